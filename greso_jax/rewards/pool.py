"""Parallel scoring: grades a batch of responses in spawned worker processes (each grading
in its own main thread, under its own deadline), order preserved; a worker that crashes or
hangs past its deadline is killed and replaced, its item scores 0 and is counted.

Synthetic "arith" items are exact string matches and are graded in the calling process;
everything else goes through the math grader. `num_workers=0` grades in-process (the
SIGALRM deadline then only works when called from the main thread). `score_across_hosts`
splits one batch over the hosts of a multi-host run.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from typing import Sequence

import numpy as np

from greso_jax.rewards import arith as arith_grader
from greso_jax.rewards import math as math_grader

ARITH_SOURCE = "arith"
STARTUP_TIMEOUT_S = 120.0  # spawning imports sympy; a loaded CI machine can be slow


@dataclasses.dataclass
class ScoreResult:
    rewards: np.ndarray  # float32 [N]
    correct: np.ndarray  # bool [N]
    num_timeouts: int  # items that hit their deadline (scored as wrong)
    num_crashes: int  # items whose worker died while grading them (scored as wrong)
    num_errors: int = 0  # items on which the grader raised (hostile text; scored as wrong)
    seconds: float = 0.0  # wall time the scoring took, in whichever thread ran it (stream mode's hidden share)


def _worker_main(conn, timeout_s: float, shaping: str, memory_limit_mb: int, grader) -> None:
    """Worker loop: receives lists of (index, response, gold), sends one result per item."""
    # The parent decides when workers stop (it kills them): a Ctrl-C or a scheduler's SIGTERM to the
    # whole process group must not cut the step in flight's grading short while the parent stops safely.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if memory_limit_mb > 0:
        import resource

        limit = memory_limit_mb * 2 ** 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    math_grader.warm_up()
    try:
        conn.send("ready")
        while True:
            batch = conn.recv()
            if batch is None:
                return
            for index, response, gold in batch:
                grade = grader(response, gold, shaping, timeout_s)
                conn.send((index, grade.reward, grade.correct, grade.status))
    except (EOFError, OSError):  # the parent is gone (stopped while this worker started, or killed): nothing to say
        return


class _Worker:
    def __init__(self, context, timeout_s: float, shaping: str, memory_limit_mb: int, grader):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_conn, timeout_s, shaping, memory_limit_mb, grader),
                                       daemon=True, name="greso-grader")
        self.process.start()
        child_conn.close()
        self.started_at = time.monotonic()
        self.ready = False
        self.in_flight: collections.deque[int] = collections.deque()
        self.item_started_at = 0.0

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class _DoneFuture:
    """A finished result with the `.result()` of a future (for in-process grading)."""

    def __init__(self, value: ScoreResult):
        self._value = value

    def result(self, timeout: float | None = None) -> ScoreResult:
        return self._value

    def done(self) -> bool:
        return True


class GradingPool:
    """Scores (response, gold, data_source) batches; use as a context manager or call close()."""

    def __init__(self, num_workers: int = 1, timeout_s: float = 2.0, shaping: str = "binary", *,
                 memory_limit_mb: int = 4096, kill_grace_s: float = 1.0, grader=math_grader.grade):
        """grader: a module-level (picklable) function (response, gold, shaping, timeout_s) ->
        math.Grade used for non-arith items; the default is the math grader."""
        if num_workers < 0:
            raise ValueError(f"data.grading_workers: must be >= 0, got {num_workers}")
        if not 0 < timeout_s <= 60:
            raise ValueError(f"data.grading_timeout_s: must be in (0, 60], got {timeout_s}")
        if shaping not in math_grader.SHAPINGS:
            raise ValueError(f"data.reward_shaping: {shaping!r} is not one of {', '.join(math_grader.SHAPINGS)}")
        self.num_workers, self.timeout_s, self.shaping = num_workers, timeout_s, shaping
        self.memory_limit_mb, self.kill_grace_s, self.grader = memory_limit_mb, kill_grace_s, grader
        self.num_workers_replaced = 0
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        try:
            for _ in range(num_workers):
                self._workers.append(self._spawn())
        except BaseException:  # a signal while spawning: no pool to close later, so no worker may outlive it
            for worker in self._workers:
                worker.kill()
            raise
        if num_workers == 0:
            math_grader.warm_up()
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="greso-grading")
        self._closed = False

    def _spawn(self) -> _Worker:
        return _Worker(self._context, self.timeout_s, self.shaping, self.memory_limit_mb, self.grader)

    def __enter__(self) -> "GradingPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, responses: list[str], ground_truths: list[str], data_sources: list[str]):
        """Starts scoring in the background; returns an object whose .result() is the ScoreResult."""
        self._check_open()
        if self.num_workers == 0:
            return _DoneFuture(self.score(responses, ground_truths, data_sources))
        return self._executor.submit(self.score, responses, ground_truths, data_sources)

    def score(self, responses: list[str], ground_truths: list[str], data_sources: list[str]) -> ScoreResult:
        """Grades every item; rewards float32 [N] and correct bool [N] in input order."""
        self._check_open()
        start = time.perf_counter()
        n = len(responses)
        if len(ground_truths) != n or len(data_sources) != n:
            raise ValueError(f"GradingPool.score: {n} responses, {len(ground_truths)} ground truths, "
                             f"{len(data_sources)} data sources")
        rewards = np.zeros(n, dtype=np.float32)
        correct = np.zeros(n, dtype=bool)
        counts = collections.Counter()
        math_items = []
        for i, (response, gold, source) in enumerate(zip(responses, ground_truths, data_sources)):
            if not isinstance(response, str) or not isinstance(gold, str):
                raise TypeError(f"GradingPool.score: item {i}: response and ground truth must be str")
            if source == ARITH_SOURCE:
                correct[i] = arith_grader.is_correct(response, gold)
                rewards[i] = float(correct[i])
            else:  # only the tail can hold the final answer: keep IPC small
                math_items.append((i, response[-math_grader.MAX_RESPONSE_CHARS:], gold))

        def record(index: int, reward: float, is_right: bool, status: str) -> None:
            rewards[index], correct[index] = reward, is_right
            counts[status] += 1

        with self._lock:
            if self.num_workers == 0:
                for index, response, gold in math_items:
                    grade = self.grader(response, gold, self.shaping, self.timeout_s)
                    record(index, grade.reward, grade.correct, grade.status)
            elif math_items:
                self._score_in_workers(math_items, record)
        return ScoreResult(rewards, correct, num_timeouts=counts["timeout"], num_crashes=counts["crash"],
                           num_errors=counts["error"], seconds=time.perf_counter() - start)

    def _score_in_workers(self, items: list[tuple[int, str, str]], record) -> None:
        by_index = {index: (index, response, gold) for index, response, gold in items}
        queue = collections.deque(by_index)
        chunk = max(1, min(16, math.ceil(len(items) / (4 * self.num_workers))))
        deadline_s = self.timeout_s + self.kill_grace_s
        while queue or any(w.in_flight for w in self._workers):
            now = time.monotonic()
            for worker in self._workers:
                if worker.ready and not worker.in_flight and queue:
                    batch = [queue.popleft() for _ in range(min(chunk, len(queue)))]
                    worker.in_flight.extend(batch)
                    worker.item_started_at = now
                    worker.conn.send([by_index[i] for i in batch])
            waits = [w.item_started_at + deadline_s - now for w in self._workers if w.in_flight]
            waits += [w.started_at + STARTUP_TIMEOUT_S - now for w in self._workers if not w.ready]
            handles = [w.conn for w in self._workers] + [w.process.sentinel for w in self._workers]
            multiprocessing.connection.wait(handles, timeout=max(0.0, min(waits, default=1.0)))
            for slot, worker in enumerate(self._workers):
                failure = self._drain(worker, record)
                if failure is None and worker.in_flight and time.monotonic() - worker.item_started_at > deadline_s:
                    failure = "timeout"  # stuck where SIGALRM cannot reach (C code): kill it
                if failure is None and not worker.ready and time.monotonic() - worker.started_at > STARTUP_TIMEOUT_S:
                    raise RuntimeError(f"grading worker did not start within {STARTUP_TIMEOUT_S} s")
                if failure is not None:
                    if not worker.ready:
                        raise RuntimeError(f"grading worker died while starting (exit code {worker.process.exitcode})")
                    if worker.in_flight:
                        record(worker.in_flight.popleft(), 0.0, False, failure)
                        queue.extendleft(reversed(worker.in_flight))
                    worker.kill()
                    self._workers[slot] = self._spawn()
                    self.num_workers_replaced += 1

    def _drain(self, worker: _Worker, record) -> str | None:
        """Reads every message a worker has sent; returns "crash" when it died."""
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message == "ready":
                    worker.ready = True
                    continue
                index, reward, is_right, status = message
                if not worker.in_flight or worker.in_flight[0] != index:
                    raise RuntimeError(f"grading worker answered item {index} out of order")
                worker.in_flight.popleft()
                worker.item_started_at = time.monotonic()
                record(index, reward, is_right, status)
        except (EOFError, OSError):
            return "crash"
        if not worker.process.is_alive():
            return "crash"
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("GradingPool is closed")

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True)
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(timeout=2)
            worker.kill()
        self._workers = []


def score_across_hosts(pool: GradingPool, texts: Sequence[str], golds: Sequence[str], sources: Sequence[str], *,
                       process_index: int, process_count: int, allgather) -> tuple[np.ndarray, np.ndarray, int]:
    """Grades every response once across hosts: host h grades rows h, h+P, ... (P = process_count),
    and the results are gathered so every host holds all of them — the selector must observe
    identical groups everywhere. `allgather(local)` stacks each host's array: [P, *local.shape].

    Returns (rewards f32 [N], correct bool [N], grading failures — timeouts and crashes — summed over hosts).
    """
    n = len(texts)
    rows = np.arange(process_index, n, process_count)
    scored = pool.score([texts[i] for i in rows], [golds[i] for i in rows], [sources[i] for i in rows])
    # Every host sends the same shape; column 2 of row 0 carries the host's failure count.
    local = np.zeros((max(-(-n // process_count), 1), 3), np.float32)
    local[:len(rows), 0] = scored.rewards
    local[:len(rows), 1] = scored.correct
    local[0, 2] = scored.num_timeouts + scored.num_crashes
    gathered = np.asarray(allgather(local))  # [P, width, 3]
    rewards, correct = np.zeros(n, np.float32), np.zeros(n, bool)
    for host in range(process_count):
        host_rows = np.arange(host, n, process_count)
        rewards[host_rows] = gathered[host, :len(host_rows), 0]
        correct[host_rows] = gathered[host, :len(host_rows), 1] > 0.5
    return rewards, correct, int(gathered[:, 0, 2].sum())
