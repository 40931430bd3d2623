"""One training step of selective rollout, the same code path for every strategy (trainer and simulator).

The driver knows no strategy: it runs the passes the strategy asks for (`first_pass`,
`after_pass`), then asks which groups to train on (`finish_step`). Response references:
every group lists its responses as (rollout call index, prompt row in that call, sample index);
the response is row `prompt_row * num_samples + sample` of the handle returned by that call
(StepResult.handles), i.e. the sampler's layout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from greso_jax.selection.base import Selector
from greso_jax.selection.groups import Group, PassRequest, PulledPrompts, ScoredPass


@dataclasses.dataclass
class StepResult:
    groups: list[Group]  # at most train_batch_size, in rollout order
    handles: list[Any]  # ScoredPass.handle of every rollout call, by call index
    metrics: dict[str, float]
    rolled_out: list[Group] = dataclasses.field(default_factory=list)  # every group of the step, in rollout order

    @property
    def full_batch(self) -> bool:
        return bool(self.metrics["selection/full_batch"])


PullFn = Callable[[int], PulledPrompts]
RolloutFn = Callable[[np.ndarray, list, int], ScoredPass]


def run_selection_step(selector: Selector, step: int, *, pull_prompts: PullFn, rollout: RolloutFn,
                       train_batch_size: int, epoch: int = 0) -> StepResult:
    """Pulls, rolls out, observes and filters until the step's batch is built; closes the step.

    Calls selector.begin_step(step, epoch=epoch) first and selector.end_step() last (which
    adapts the strategy): the caller must not call either itself. `pull_prompts(n)` returns up to
    n prompts the pipeline kept with `selector.should_keep`; returning none ends the step early.
    """
    if train_batch_size < 1:
        raise ValueError(f"train.train_batch_size: must be >= 1, got {train_batch_size}")
    selector.begin_step(step, epoch=epoch)
    calls = _RolloutCalls(selector, rollout)
    groups: list[Group] = []
    repeats = _Repeats(selector.num_prompts, drop=selector.pass_config.once_per_step)
    request = selector.first_pass(train_batch_size)
    while request is not None:
        new = _run_pass(request, groups, calls, pull_prompts, selector, repeats)
        if not new:
            break
        request = selector.after_pass(groups, new, passes=len(calls.handles), train_batch_size=train_batch_size)
    batch = selector.finish_step(groups, train_batch_size)
    metrics = selector.end_step()
    rolled_out = selector.step_groups
    zero_variance = sum(not g.has_variance for g in groups)
    metrics.update({
        "selection/passes": float(len(calls.handles)),
        "selection/zero_variance_ratio": zero_variance / rolled_out if rolled_out else 0.0,
        "selection/effective_prompts": float(sum(g.has_variance_in_loss for g in batch)),
        "selection/batch_groups": float(len(batch)),
        # Informative groups generated (and paid for) beyond what the batch trains on.
        "selection/surplus_groups": float(sum(g.has_variance for g in groups) - sum(g.has_variance for g in batch)),
        "selection/full_batch": float(len(batch) == train_batch_size),
        # Groups of a prompt rolled out earlier in the same step, and the batch's distinct prompts: a
        # small pool cycled within a step trains on fewer prompts than groups.
        "selection/repeated_groups": float(len(groups) - len({g.prompt_id for g in groups})),
        "selection/repeats_dropped": float(repeats.dropped),
        "selection/batch_prompts": float(len({g.prompt_id for g in batch})),
        "rollout/step_responses": float(calls.step_responses),
    })
    return StepResult(groups=batch, handles=calls.handles, metrics=metrics, rolled_out=groups)


def _run_pass(request: PassRequest, groups: list[Group], calls: "_RolloutCalls", pull_prompts: PullFn,
              selector: Selector, repeats: "_Repeats") -> list[int]:
    """Runs one requested pass; returns the indices of the groups it created or extended (empty: nothing ran)."""
    if request.extend:
        rows = list(request.extend)
        if min(rows) < 0 or max(rows) >= len(groups):
            raise ValueError(f"{selector.strategy}.after_pass: extend indices {rows} outside the step's "
                             f"{len(groups)} groups")
        ids = np.array([groups[i].prompt_id for i in rows], dtype=np.int64)
        call, result = calls.run(ids, [groups[i].payload for i in rows], request.num_samples)
        for sub_row, i in enumerate(rows):
            groups[i].extend(call, sub_row, result.correct[sub_row], result.rewards[sub_row])
        return rows
    pulled = repeats.pull(lambda: _pull(pull_prompts, request.pull, selector))
    if pulled.prompt_ids.size == 0:
        return []
    call, result = calls.run(pulled.prompt_ids, pulled.payloads, request.num_samples)
    first = len(groups)
    groups.extend(Group.from_call(call, row, prompt_id, pulled.payloads[row], result.correct[row],
                                  result.rewards[row])
                  for row, prompt_id in enumerate(pulled.prompt_ids))
    return list(range(first, len(groups)))


class _Repeats:
    """selection.once_per_step: the prompts rolled out this step, and the pulled ones dropped as repeats."""

    def __init__(self, num_prompts: int, *, drop: bool):
        self.num_prompts, self.drop = num_prompts, drop
        self.seen: set[int] = set()
        self.dropped = 0

    def pull(self, pull_once: Callable[[], PulledPrompts]) -> PulledPrompts:
        """Pulls; with `drop`, removes prompts already rolled out this step and pulls again while a pull
        leaves nothing, until the stream ends or a whole pool's worth has been dropped."""
        while True:
            pulled = pull_once()
            if not self.drop:
                return pulled
            ids = pulled.prompt_ids
            fresh, first = [], set()
            for row, prompt in enumerate(ids.tolist()):
                if prompt not in self.seen and prompt not in first:
                    fresh.append(row)
                    first.add(prompt)
            self.dropped += ids.size - len(fresh)
            self.seen |= first
            if fresh or ids.size == 0 or self.dropped >= self.num_prompts:
                return PulledPrompts(ids[fresh], [pulled.payloads[row] for row in fresh], pulled.skipped_ids)


class _RolloutCalls:
    """Runs rollout calls, checks what they return, counts responses, keeps the handles in call order."""

    def __init__(self, selector: Selector, rollout: RolloutFn):
        self.selector, self.rollout = selector, rollout
        self.handles: list[Any] = []
        self.step_responses = 0

    def run(self, prompt_ids: np.ndarray, payloads: list, num_samples: int) -> tuple[int, ScoredPass]:
        result = self.rollout(prompt_ids, payloads, num_samples)
        n = prompt_ids.shape[0]
        correct, rewards = np.asarray(result.correct), np.asarray(result.rewards, dtype=np.float32)
        if correct.shape != (n, num_samples) or correct.dtype != bool:
            raise ValueError(f"rollout: correct must be bool [{n}, {num_samples}], "
                             f"got {correct.dtype} {correct.shape}")
        if rewards.shape != (n, num_samples):
            raise ValueError(f"rollout: rewards must be [{n}, {num_samples}], got {rewards.shape}")
        if not np.all(np.isfinite(rewards)):
            raise ValueError("rollout: rewards contain NaN or inf")
        self.handles.append(result.handle)
        self.step_responses += correct.size
        self.selector.record_rollout(correct.size, result.num_tokens)
        return len(self.handles) - 1, dataclasses.replace(result, correct=correct, rewards=rewards)


def _pull(pull_prompts: PullFn, n: int, selector: Selector) -> PulledPrompts:
    pulled = pull_prompts(n)
    ids = np.asarray(pulled.prompt_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size > n:
        raise ValueError(f"pull_prompts({n}): returned prompt_ids of shape {ids.shape}")
    if len(pulled.payloads) != ids.size:
        raise ValueError(f"pull_prompts({n}): {len(pulled.payloads)} payloads for {ids.size} prompts")
    skipped = np.asarray(pulled.skipped_ids, dtype=np.int64).reshape(-1)
    selector.record_skipped(skipped)
    return PulledPrompts(ids, list(pulled.payloads), skipped)
