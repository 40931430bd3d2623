"""One training step of a stream rollout (`selection.rollout_mode = "stream"`), for every strategy.

Where `driver.run_selection_step` runs passes (a batch of prompts, waited on until its longest row
ends), this driver keeps a fixed set of lanes busy: a lane whose G responses are done is graded, the
strategy observes that group at once, and the lane takes the next prompt the strategy kept, the
waiting prompts in the strategy's `admission_order`. The step's rollouts end once the batch holds
train_batch_size usable groups (every host counts every host's groups, exchanged each decode chunk), at the response
cap, or when the data runs out. What is still decoding then is aborted (its tokens reported as
waste, its prompts admitted again next step) or finished and carried, with the usable groups the
batch had no room for, into the next step's batch; kept prompts that never entered a lane wait for
the next step's first admissions (`Carry`: run state, checkpointed), so no pulled prompt is lost.

A backend may hand a chunk's finished lanes back graded one `advance` later (its grading runs while
the next chunk decodes): the driver counts and observes a group only once it comes back, and
drains what is still being graded before the step's batch is picked.

The strategy has no stream-specific code: it keeps (`should_keep`, through the pipeline), ranks
(`admission_order`), observes (`observe_groups`), says which groups are usable and trains on
`finish_step`. The lanes themselves are behind `StreamBackend` (the trainer's lane engine and
grading); this module is NumPy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import numpy as np

from greso_jax.selection.base import Selector
from greso_jax.selection.driver import PullFn, StepResult, _pull
from greso_jax.selection.groups import Group
from greso_jax.selection.settings import ADMISSION_MODES, IN_FLIGHT_MODES


@dataclasses.dataclass
class LaneResult:
    """One finished lane: G graded responses of one prompt. correct bool [G], rewards float32 [G];
    handle: the lane's one-prompt sampler output (row g = response g)."""

    prompt_id: int
    payload: Any
    correct: np.ndarray
    rewards: np.ndarray
    handle: Any
    num_tokens: int


class StreamBackend(Protocol):
    """The lanes: admission, one decode chunk at a time, grading of finished lanes."""

    lanes: int

    def free_lanes(self) -> int: ...

    def admit(self, prompt_id: int, payload: Any) -> None: ...

    def in_flight(self) -> int:
        """Lanes decoding or finished and not yet handed back graded, over all hosts."""

    def advance(self) -> list[LaneResult]:
        """One decode chunk (none when no lane decodes), then finished lanes of every host, graded (host
        by host, in lane order), at a point fixed by the chunk count, not by when grading ends: every
        host observes the same groups in the same order."""

    def abort_all(self) -> "Aborted":
        """Frees every lane still decoding (finished lanes still come back from `advance`)."""

    def busy_share(self) -> float:
        """Row-steps spent on live rows / row-steps decoded, over the step so far."""

    def sum_over_hosts(self, counts: np.ndarray) -> np.ndarray:
        """Each host's counts float64 [K], summed over the hosts (every host calls it, at the same point)."""


@dataclasses.dataclass
class Aborted:
    """What `abort_all` freed: prompts (this host's, (prompt id, payload) in lane order), and the lanes
    and their generated tokens over all hosts."""

    prompts: list[tuple[int, Any]]
    lanes: int
    tokens: int


@dataclasses.dataclass
class Carry:
    """What a step hands to the next. groups: under stream_in_flight = "carry", usable groups it had
    no room for (finished with this step's policy; their sampling log-probs are the next step's
    behaviour policy), each with its lane's output, in the order they finished. pending: this host's
    kept prompts (prompt id, payload) not rolled out (aborted, then never admitted), the next step's
    first admissions. usable_share: (usable, finished) groups the step rolled out, over all hosts, what
    `fit` admission starts the next step's estimate from."""

    groups: list[Group] = dataclasses.field(default_factory=list)
    handles: list[Any] = dataclasses.field(default_factory=list)
    pending: list[tuple[int, Any]] = dataclasses.field(default_factory=list)
    usable_share: tuple[int, int] = (0, 0)


def run_stream_step(selector: Selector, step: int, *, pull_prompts: PullFn, backend: StreamBackend,
                    train_batch_size: int, max_responses: int, in_flight: str = "abort",
                    carry: Carry | None = None, epoch: int = 0, lookahead: int = 0,
                    admission: str = "fill", max_pool_reads: float = 0.0) -> tuple[StepResult, Carry]:
    """Streams until the step's batch is built; returns (the step's result, the carry into the next).

    Calls selector.begin_step first and selector.end_step last. The batch is
    selector.finish_step over the carried groups then this step's, so carried groups train first.
    max_responses: the step's response cap (> 0). lookahead: the most kept prompts waiting for a lane
    (0: as many as there are lanes); more lets a strategy that ranks admit the best of a larger set, the
    rest waiting (pending into the next step) until they rank first. admission: "fill" (a free lane takes
    a waiting prompt) or "fit" (only while the usable groups and the lanes in flight, at the usable share
    of the groups finished this step and the last, fall short of the batch: the lanes still in flight
    when the batch fills then hold about what it lacks, instead of a full set of lanes whose usable
    groups are carried, one step off-policy, or aborted). max_pool_reads: the most prompts the step pulls
    (kept or skipped), in readings of the pool (0: no bound); where a selector keeps almost nothing, the
    step then trains on what it has instead of reading on (passes are bounded the same way by max_passes).
    StepResult.handles: the carried groups' outputs first, then one per lane finished this step; a group's
    call index names its handle.
    """
    if train_batch_size < 1:
        raise ValueError(f"train.train_batch_size: must be >= 1, got {train_batch_size}")
    if in_flight not in IN_FLIGHT_MODES:
        raise ValueError(f"selection.stream_in_flight: expected one of {IN_FLIGHT_MODES}, got {in_flight!r}")
    if admission not in ADMISSION_MODES:
        raise ValueError(f"selection.stream_admission: expected one of {ADMISSION_MODES}, got {admission!r}")
    lookahead = lookahead or backend.lanes
    if lookahead < backend.lanes:
        raise ValueError(f"selection.stream_lookahead: {lookahead} is below the {backend.lanes} lanes it must fill")
    carry = carry or Carry()
    selector.begin_step(step, epoch=epoch)
    handles = list(carry.handles)
    carried = [_renumbered(g, i) for i, g in enumerate(carry.groups)]
    groups: list[Group] = []
    usable = sum(selector.usable(g) for g in carried)
    waiting = list(carry.pending)  # admitted before anything pulled this step (want is 0 until they are in)
    exhausted, responses, chunks, admitted, dropped = False, 0, 0, 0, 0
    finished_now = usable_now = 0  # this step's own groups (the carried ones are all usable)
    pool_reads = 0  # prompts pulled this step, kept or skipped
    hosts = int(backend.sum_over_hosts(np.ones(1))[0]) if admission == "fit" else 1
    once, seen = selector.pass_config.once_per_step, {p for p, _ in waiting}

    def take(results: list[LaneResult]) -> None:
        nonlocal responses, usable, finished_now, usable_now
        fresh = []
        for r in results:
            fresh.append(Group.from_call(len(handles), 0, r.prompt_id, r.payload, np.asarray(r.correct, bool),
                                         np.asarray(r.rewards, np.float32)))
            handles.append(r.handle)
            selector.record_rollout(r.correct.size, r.num_tokens)
            responses += r.correct.size
        selector.observe_groups(fresh)  # the history is current for the next admission
        groups.extend(fresh)
        fresh_usable = sum(selector.usable(g) for g in fresh)
        usable, usable_now, finished_now = usable + fresh_usable, usable_now + fresh_usable, finished_now + len(fresh)

    while True:
        # `usable` counts every host's groups (advance returns them all), so hosts agree here.
        if usable >= train_batch_size or responses >= max_responses:
            break
        free = backend.free_lanes()
        want = max(0, lookahead - len(waiting)) if free and not exhausted else 0
        # Every host pulls every round (want may be 0): a multi-host pull gathers the skips of all.
        pulled = _pull(pull_prompts, want, selector)
        pool_reads += pulled.prompt_ids.size + pulled.skipped_ids.size
        exhausted = (exhausted or (want > 0 and pulled.prompt_ids.size == 0)
                     or (max_pool_reads > 0 and pool_reads >= max_pool_reads * selector.num_prompts))
        for prompt_id, payload in zip(pulled.prompt_ids.tolist(), pulled.payloads):
            if once and prompt_id in seen:  # selection.once_per_step, as in passes
                dropped += 1
                continue
            seen.add(prompt_id)
            waiting.append((prompt_id, payload))
        if free and waiting and admission == "fit":
            free = min(free, _fitting_admissions(train_batch_size - usable, backend.in_flight(), hosts,
                                                 _usable_share(carry.usable_share, usable_now, finished_now)))
        if free and waiting:
            order = _checked_order(selector, np.array([p for p, _ in waiting], np.int64))
            chosen = set(order[:free].tolist())
            for i in order[:free].tolist():
                backend.admit(*waiting[i])
            admitted += len(chosen)
            waiting = [w for i, w in enumerate(waiting) if i not in chosen]
        if not backend.in_flight():
            break  # the data ran out and every lane is collected
        take(backend.advance())
        chunks += 1

    busy_share = backend.busy_share()
    aborted = backend.abort_all() if in_flight == "abort" else Aborted([], 0, 0)
    while backend.in_flight():  # carry: finish the lanes; either mode: collect the grades still out
        take(backend.advance())
    everything = carried + groups
    batch = selector.finish_step(everything, train_batch_size)
    in_batch = {id(g) for g in batch}
    next_carry = Carry(pending=aborted.prompts + waiting, usable_share=(usable_now, finished_now))
    if in_flight == "carry":
        for g in everything:
            if id(g) not in in_batch and selector.usable(g):
                next_carry.groups.append(g)
                next_carry.handles.append(handles[int(g.response_refs[0, 0])])
    metrics = selector.end_step()
    # Admissions, waiting prompts and repeats are each host's own: the step's metrics give their totals.
    admitted, unadmitted, pending_in, pending_out, dropped = backend.sum_over_hosts(np.array(
        [admitted, len(waiting), len(carry.pending), len(next_carry.pending), dropped], np.float64)).tolist()
    rolled_out = selector.step_groups
    carried_in_batch = sum(id(g) in in_batch for g in carried)
    metrics.update({
        "selection/passes": 1.0,
        "selection/zero_variance_ratio": sum(not g.has_variance for g in groups) / rolled_out if rolled_out else 0.0,
        "selection/effective_prompts": float(sum(g.has_variance_in_loss for g in batch)),
        "selection/batch_groups": float(len(batch)),
        "selection/surplus_groups": float(sum(g.has_variance for g in everything) - sum(g.has_variance for g in batch)),
        "selection/full_batch": float(len(batch) == train_batch_size),
        "selection/repeated_groups": float(len(everything) - len({g.prompt_id for g in everything})),
        "selection/repeats_dropped": dropped,
        "selection/batch_prompts": float(len({g.prompt_id for g in batch})),
        "rollout/step_responses": float(responses),
        "stream/chunks": float(chunks),
        "stream/admitted": admitted,
        "stream/unadmitted": unadmitted,
        "stream/pending_in": pending_in,
        "stream/pending_out": pending_out,
        "stream/lanes_busy_share": busy_share,
        "stream/aborted_lanes": float(aborted.lanes),
        "stream/aborted_tokens": float(aborted.tokens),
        "stream/carried_groups": float(carried_in_batch),
        "stream/carried_share": carried_in_batch / len(batch) if batch else 0.0,
        "stream/carry_out_groups": float(len(next_carry.groups)),
        "stream/usable_share": usable_now / finished_now if finished_now else 0.0,
        "stream/pool_reads": pool_reads / selector.num_prompts,
    })
    return StepResult(groups=batch, handles=handles, metrics=metrics, rolled_out=groups), next_carry


def _usable_share(last_step: tuple[int, int], usable_now: int, finished_now: int) -> float:
    """The share of finished groups that were usable, this step's and the last's together, with one usable
    and one not of prior (never 0 or 1)."""
    return (last_step[0] + usable_now + 1) / (last_step[1] + finished_now + 2)


def _fitting_admissions(lacking: int, in_flight: int, hosts: int, usable_share: float) -> int:
    """Prompts this host may admit so that the lanes in flight are expected to bring the `lacking` usable
    groups (every host's lanes count, each host admits its part)."""
    expected_short = lacking - in_flight * usable_share
    return max(0, math.ceil(expected_short / usable_share / hosts)) if expected_short > 0 else 0


def _renumbered(group: Group, call: int) -> Group:
    """A carried group pointing at call index `call` of the new step (its lane's output)."""
    refs = group.response_refs.copy()
    refs[:, 0] = call
    return dataclasses.replace(group, response_refs=refs)


def _checked_order(selector: Selector, ids: np.ndarray) -> np.ndarray:
    order = np.asarray(selector.admission_order(ids), np.int64)
    if order.shape != ids.shape or not np.array_equal(np.sort(order), np.arange(ids.size)):
        raise ValueError(f"{selector.strategy}.admission_order: must return a permutation of range({ids.size}), "
                         f"got {order.tolist()}")
    return order

