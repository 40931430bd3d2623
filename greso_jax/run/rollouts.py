"""The trainer's rollouts in either mode (`selection.rollout_mode`): passes (`PassRollouts`, a sampler
call per pass, graded on every host) or a stream (`StreamRollouts`, the lane engine behind the stream
driver's `StreamBackend`, its grading overlapped with decoding), and the stream's carry (carried
groups, every host's pending prompts) as run state (`carry_to_json` / `carry_from_json`).

Every random draw is keyed by the run's seed and the step: a pass by its call index, a stream lane by
the prompt it holds and that prompt's occurrence in the step, so a resumed run draws what the
uninterrupted one drew.
"""

from __future__ import annotations

import base64
import time
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import nnx

from greso_jax.parallel import multihost
from greso_jax.rewards.pool import score_across_hosts
from greso_jax.config import rl_seed
from greso_jax.sampling import SampleOutput, generate_in_chunks
from greso_jax.sampling.stream import LaneEngine
from greso_jax.selection import Aborted, Carry, Group, LaneResult, ScoredPass

STREAM_KEY = 0x5354  # folded into the seed's key first, so lane keys never meet the passes' keys


@jax.jit
def _lane_key(seed, step, prompt_id, occurrence):
    """The raw key (uint32 [2]) of one lane's admission, in one dispatch."""
    key = jax.random.PRNGKey(seed)
    for part in (STREAM_KEY, step, prompt_id, occurrence):
        key = jax.random.fold_in(key, part)
    return key


class _Grader:
    """Decodes and grades responses on every host (`rewards.pool.score_across_hosts`)."""

    def __init__(self, tokenizer, pool, timers):
        self.tokenizer, self.pool, self.timers = tokenizer, pool, timers
        self.failures = 0

    def grade(self, out: SampleOutput, payloads: list, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """-> (rewards float32 [N, G], correct bool [N, G]) for the N prompts of `out`."""
        with self.timers.timed("time/reward"):
            texts = [self.tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(out.tokens.shape[0])]
            golds = [e["ground_truth"] for e in payloads for _ in range(num_samples)]
            sources = [e["data_source"] for e in payloads for _ in range(num_samples)]
            rewards, correct, failures = score_across_hosts(
                self.pool, texts, golds, sources, process_index=jax.process_index(),
                process_count=jax.process_count(), allgather=multihost.allgather)
        self.failures += failures
        shape = (len(payloads), num_samples)
        return rewards.reshape(shape), correct.reshape(shape)


class PassRollouts(_Grader):
    """selection.rollout_mode = "passes": one sampler call per pass (`driver.run_selection_step`'s rollout)."""

    def __init__(self, model, tokenizer, pool, timers, *, seed: int, mesh, generation: dict):
        super().__init__(tokenizer, pool, timers)
        self.model, self.seed, self.mesh, self.generation = model, seed, mesh, generation
        self.step, self.calls = 0, 0

    def begin_step(self, step: int) -> None:
        self.step, self.calls, self.failures = step, 0, 0

    def __call__(self, prompt_ids, payloads, num_samples: int) -> ScoredPass:
        prompts = [list(map(int, e["prompt_tokens"])) for e in payloads]
        rng = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(self.seed), self.step), self.calls)
        self.calls += 1
        with self.timers.timed("time/rollout"):
            out = generate_in_chunks(self.model, prompts, num_samples=num_samples, rng=rng,
                                     eos_ids=self.tokenizer.eos_ids, pad_id=self.tokenizer.pad_id, mesh=self.mesh,
                                     **self.generation)
        rewards, correct = self.grade(out, payloads, num_samples)
        return ScoredPass(correct=correct, rewards=rewards, handle=out, num_tokens=int(np.sum(out.lengths)))


class _Grading(NamedTuple):
    """One chunk's finished lanes, submitted to the grading workers: held (prompt id, payload) and
    outs (one-prompt SampleOutput) per lane, the pool's future, and the main thread's seconds on it so far."""

    held: list
    outs: list
    future: Any
    main_seconds: float


class StreamRollouts(_Grader):
    """selection.rollout_mode = "stream": the lane engine as the stream driver's `StreamBackend`.

    Each host streams its shard of the data through its own lanes (on its first local device) and
    grades its own lanes; every decode chunk the hosts exchange their finished groups and busy-lane
    counts, so all of them observe, count and train on the same groups. A lane's prompt draws with
    `_lane_key` (seed, STREAM_KEY, step, prompt, occurrence in the step): its samples depend on the
    prompt and the step, not on the lane or when it entered.

    A chunk's finished lanes are submitted to the grading workers and come back graded from the next
    `advance`, after the next chunk decoded (`overlap_grading`: the grading runs meanwhile; False:
    it is waited for at once). Either way a group is handed back at the same point of the stream, so
    both give the same run; time/reward_graded is the pool's grading time, time/reward_hidden its
    part that ran while the main thread was busy elsewhere.
    """

    def __init__(self, model, tokenizer, pool, timers, *, seed: int, lanes: int, num_samples: int,
                 prompt_length: int, max_new_tokens: int, chunk_steps: int, temperature: float, top_p: float,
                 top_k: int, payload_of, overlap_grading: bool = True):
        super().__init__(tokenizer, pool, timers)
        self.overlap_grading = overlap_grading
        self._grading: _Grading | None = None  # the last chunk's finished lanes, being graded
        self.payload_of = payload_of  # prompt id -> payload, for the groups other hosts streamed
        self.lanes, self.num_samples, self.seed = lanes, num_samples, seed
        self.engine = LaneEngine(model, lanes=lanes, num_samples=num_samples, prompt_length=prompt_length,
                                 max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                                 eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id, chunk_steps=chunk_steps)
        self.held: dict[int, tuple[int, Any]] = {}  # lane -> (prompt id, payload)
        self.step, self.occurrences = 0, {}

    def begin_step(self, step: int) -> None:
        if self._grading is not None:
            raise RuntimeError("StreamRollouts.begin_step: the previous step left a chunk's grades uncollected")
        self.step, self.occurrences, self.failures = step, {}, 0
        if multihost.is_multihost():  # each host streams on its own device, with a copy of the parameters
            device = jax.local_devices()[0]
            params = nnx.split(self.engine.model, nnx.Param, ...)[1]
            self.engine.refresh(jax.tree.map(lambda x: jax.device_put(multihost.to_host(x), device), params))
        else:
            self.engine.refresh()  # the last update changed the parameters in place
        self.engine.decoded_row_steps = self.engine.busy_row_steps = 0

    def free_lanes(self) -> int:
        return int(self.engine.free.sum())

    def admit(self, prompt_id: int, payload: Any) -> None:
        occurrence = self.occurrences.get(prompt_id, 0)
        self.occurrences[prompt_id] = occurrence + 1
        lane = int(np.flatnonzero(self.engine.free)[0])
        with self.timers.timed("time/rollout"):
            key = _lane_key(np.uint32(self.seed), np.int32(self.step), np.int32(prompt_id), np.int32(occurrence))
            self.engine.admit(lane, list(map(int, payload["prompt_tokens"])), key)
        self.held[lane] = (prompt_id, payload)

    def sum_over_hosts(self, counts: np.ndarray) -> np.ndarray:
        return multihost.allgather(np.asarray(counts, np.float64)).sum(axis=0)

    def in_flight(self) -> int:
        grading = len(self._grading.held) if self._grading else 0
        return int(multihost.allgather(np.array([len(self.held) + grading], np.int64)).sum())

    def advance(self) -> list[LaneResult]:
        """Decodes a chunk, submits its finished lanes for grading, returns the previous chunk's graded."""
        with self.timers.timed("time/rollout"):
            self.engine.advance()
            finished = self.engine.finished()
            outs = [self.engine.collect(lane) for lane in finished]
        held = [self.held.pop(lane) for lane in finished]
        previous, self._grading = self._grading, self._submit(held, outs) if outs else None
        local = self._collect(previous) if previous else []
        return self._exchange(local) if multihost.is_multihost() else local

    def _submit(self, held: list, outs: list) -> _Grading:
        """The lanes' responses to the grading workers, in one call."""
        g, start = self.num_samples, time.perf_counter()
        with self.timers.timed("time/reward"):
            texts = [self.tokenizer.decode(out.tokens[r, :out.lengths[r]]) for out in outs for r in range(g)]
            future = self.pool.submit(texts, [payload["ground_truth"] for _, payload in held for _ in range(g)],
                                      [payload["data_source"] for _, payload in held for _ in range(g)])
            if not self.overlap_grading:
                future.result()
        return _Grading(held, outs, future, time.perf_counter() - start)

    def _collect(self, grading: _Grading) -> list[LaneResult]:
        """Waits for a submitted chunk's grades; its lanes as LaneResults, in lane order."""
        start = time.perf_counter()
        with self.timers.timed("time/reward"):
            scored = grading.future.result()
        main_seconds = grading.main_seconds + time.perf_counter() - start
        self.timers.add("time/reward_graded", scored.seconds)
        self.timers.add("time/reward_hidden", max(0.0, scored.seconds - main_seconds))
        self.failures += scored.num_timeouts + scored.num_crashes
        n, g = len(grading.outs), self.num_samples
        correct = np.asarray(scored.correct, bool).reshape(n, g)
        rewards = np.asarray(scored.rewards, np.float32).reshape(n, g)
        return [LaneResult(prompt_id, payload, correct[i], rewards[i], out, int(np.sum(out.lengths)))
                for i, ((prompt_id, payload), out) in enumerate(zip(grading.held, grading.outs))]

    def _exchange(self, local: list[LaneResult]) -> list[LaneResult]:
        """Every host's finished lanes on every host, host by host (each host grades its own lanes)."""
        k, g, cap = self.lanes, self.num_samples, self.engine.cap
        ids = np.full(k, -1, np.int64)
        scores = np.zeros((k, 3, g), np.float32)  # correct, reward, truncated
        tokens, lengths = np.zeros((k, g, cap), np.int32), np.zeros((k, g), np.int32)
        logprobs = np.zeros((k, g, cap), np.float32)
        for i, r in enumerate(local):
            ids[i], tokens[i], logprobs[i], lengths[i] = r.prompt_id, r.handle.tokens, r.handle.logprobs, \
                r.handle.lengths
            scores[i] = r.correct, r.rewards, r.handle.truncated
        gathered = [multihost.allgather(x) for x in (ids, scores, tokens, logprobs, lengths)]
        results, mine = [], jax.process_index()
        for host in range(gathered[0].shape[0]):
            if host == mine:
                results.extend(local)
                continue
            for i in np.flatnonzero(gathered[0][host] >= 0):
                prompt_id = int(gathered[0][host][i])
                payload = self.payload_of(prompt_id)
                score = gathered[1][host][i]
                out = SampleOutput(tokens=gathered[2][host][i], logprobs=gathered[3][host][i],
                                   lengths=gathered[4][host][i], truncated=score[2] > 0.5,
                                   kv_cache_bytes=self.engine.kv_cache_bytes, prompt_rows=k, rows=k * g,
                                   prompt_length=self.engine.prompt_length,
                                   prompts=[list(map(int, payload["prompt_tokens"]))], num_samples=g)
                results.append(LaneResult(prompt_id, payload, score[0] > 0.5, score[1].copy(), out,
                                          int(out.lengths.sum())))
        return results

    def abort_all(self) -> Aborted:
        lanes = sorted(self.held)
        tokens = sum(self.engine.abort(lane) for lane in lanes)
        count, tokens = multihost.allgather(np.array([len(lanes), tokens], np.int64)).sum(0)
        return Aborted([self.held.pop(lane) for lane in lanes], int(count), int(tokens))

    def busy_share(self) -> float:
        e = self.engine
        busy, decoded = multihost.allgather(np.array([e.busy_row_steps, e.decoded_row_steps], np.int64)).sum(0)
        return float(busy / decoded) if decoded else 0.0


def _encode(array: np.ndarray) -> dict:
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}


def _decode(blob: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(blob["data"]), np.dtype(blob["dtype"])).reshape(blob["shape"]).copy()


def carry_to_json(carry: Carry) -> dict:
    """The checkpoint's `extras` for the stream: stream_carry, the carried groups and their lanes' outputs,
    exactly (arrays as raw bytes); stream_pending, every host's pending prompt ids (one list per host);
    stream_usable_share, the step's (usable, finished) groups."""
    pending = np.array([prompt_id for prompt_id, _ in carry.pending], np.int64)
    rows = []
    for group, out in zip(carry.groups, carry.handles):
        rows.append({"prompt_id": group.prompt_id, "baseline_scale": _encode(np.array([group.baseline, group.scale])),
                     **{name: _encode(getattr(group, name)) for name in ("response_refs", "rewards", "correct",
                                                                         "loss_mask")},
                     **{name: _encode(getattr(out, name)) for name in ("tokens", "logprobs", "lengths", "truncated")},
                     "prompt": list(out.prompts[0]), "num_samples": out.num_samples,
                     "shape": [out.prompt_rows, out.rows, out.prompt_length, out.kv_cache_bytes]})
    by_host = multihost.allgather_ragged(pending) if multihost.is_multihost() else [pending]
    return {"stream_carry": rows, "stream_pending": [host.tolist() for host in by_host],
            "stream_usable_share": [int(n) for n in carry.usable_share]}


def carry_from_json(extras: dict, payload_of) -> Carry:
    """Inverse of `carry_to_json` (empty extras: an empty carry); payload_of(prompt id) gives a prompt's
    payload (the pipeline's element). Saved under another host count, the pending prompts of all hosts
    are dealt out in turn."""
    pending = extras.get("stream_pending", [])
    hosts, me = jax.process_count(), jax.process_index()
    mine = pending[me] if len(pending) == hosts else [p for host in pending for p in host][me::hosts]
    usable, finished = extras.get("stream_usable_share", [0, 0])  # absent from checkpoints before it existed
    carry = Carry(pending=[(int(p), payload_of(int(p))) for p in mine], usable_share=(int(usable), int(finished)))
    for row in extras.get("stream_carry", []):
        carry.groups.append(Group(prompt_id=int(row["prompt_id"]), payload=payload_of(int(row["prompt_id"])),
                                  response_refs=_decode(row["response_refs"]), rewards=_decode(row["rewards"]),
                                  correct=_decode(row["correct"]), loss_mask=_decode(row["loss_mask"]),
                                  baseline=float(_decode(row["baseline_scale"])[0]),
                                  scale=float(_decode(row["baseline_scale"])[1])))
        prompt_rows, rows_, prompt_length, kv_bytes = row["shape"]
        carry.handles.append(SampleOutput(tokens=_decode(row["tokens"]), logprobs=_decode(row["logprobs"]),
                                          lengths=_decode(row["lengths"]), truncated=_decode(row["truncated"]),
                                          kv_cache_bytes=kv_bytes, prompt_rows=prompt_rows, rows=rows_,
                                          prompt_length=prompt_length, prompts=[row["prompt"]],
                                          num_samples=int(row["num_samples"])))
    return carry


def stream_rollouts(config, model, tokenizer, pool, timers, payload_of) -> StreamRollouts | None:
    """The stream backend a validated config asks for (None: selection.rollout_mode = "passes")."""
    sel, s = config.selection, config.sampling
    if sel.rollout_mode != "stream":
        return None
    lanes = int(sel.stream_lanes or sel.rollout_batch_size)
    return StreamRollouts(model, tokenizer, pool, timers, seed=rl_seed(config), lanes=lanes,
                          num_samples=int(config.rl.group_size), prompt_length=int(config.data.max_prompt_length),
                          max_new_tokens=int(s.max_new_tokens), chunk_steps=int(sel.stream_chunk_steps),
                          temperature=float(s.temperature), top_p=float(s.top_p), top_k=int(s.top_k),
                          payload_of=payload_of)
