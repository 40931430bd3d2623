"""One training step of selective rollout, the same code path for every strategy (trainer and simulator).

Response references: every group lists its responses as rows (rollout call index, row in
that call, sample index); the response is row `row * num_samples + sample` of the handle
returned by call `rollout call index` (StepResult.handles), i.e. the sampler's layout.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from greso_jax.selection.base import Selector
from greso_jax.selection.pass_sizing import next_pass_size


@dataclasses.dataclass
class PulledPrompts:
    """The next kept prompts from the pipeline: ids int64 [n], one opaque payload each, and the ids it skipped."""

    prompt_ids: np.ndarray
    payloads: list
    skipped_ids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclasses.dataclass
class RolloutResult:
    """num_samples responses for each of n prompts: correct bool [n, s], rewards float32 [n, s]."""

    correct: np.ndarray
    rewards: np.ndarray
    handle: Any = None  # opaque to selection: the trainer keeps tokens / logprobs here
    num_tokens: int | None = None  # generated tokens in this call, for rollout/num_tokens


@dataclasses.dataclass
class SelectedGroup:
    """One group of the training batch.

    response_refs int64 [k, 3]: (rollout call index, row in that call, sample index).
    rewards float32 [k], correct bool [k], loss_mask bool [k] (False: generated, left out
    of the loss — AERO's rejection). baseline / scale: NaN means "use the group's own
    mean / std over the masked responses"; a number (AERO's posterior) replaces them.
    """

    prompt_id: int
    payload: Any
    response_refs: np.ndarray
    rewards: np.ndarray
    correct: np.ndarray
    loss_mask: np.ndarray
    baseline: float = math.nan
    scale: float = math.nan


@dataclasses.dataclass
class StepResult:
    groups: list[SelectedGroup]  # at most train_batch_size, in rollout order
    handles: list[Any]  # RolloutResult.handle of every rollout call, by call index
    metrics: dict[str, float]

    @property
    def full_batch(self) -> bool:
        return bool(self.metrics["selection/full_batch"])


class MaxPassesReached(RuntimeError):
    """selection.on_max_passes == "error" and a step hit selection.max_passes before filling its batch."""


PullFn = Callable[[int], PulledPrompts]
RolloutFn = Callable[[np.ndarray, list, int], RolloutResult]


def run_selection_step(selector: Selector, step: int, *, pull_prompts: PullFn, rollout: RolloutFn,
                       train_batch_size: int) -> StepResult:
    """Pulls, rolls out, observes and filters until the step's batch is built; closes the step.

    Calls selector.begin_step(step) first and selector.end_step() last (which adapts GRESO's
    p): the caller must not call either itself. `pull_prompts(n)` returns up to n prompts the
    pipeline kept with `selector.should_keep`; returning none ends the step early.
    """
    if train_batch_size < 1:
        raise ValueError(f"train.train_batch_size: must be >= 1, got {train_batch_size}")
    selector.begin_step(step)
    calls = _RolloutCalls(selector, rollout)
    if selector.staged_groups:
        groups, zero_variance = _staged_step(selector, calls, pull_prompts, train_batch_size)
    else:
        groups, zero_variance = _pass_step(selector, calls, pull_prompts, train_batch_size)
    metrics = selector.end_step()
    rolled_out = selector.step_groups
    metrics.update({
        "selection/passes": float(len(calls.handles)),
        "selection/zero_variance_ratio": zero_variance / rolled_out if rolled_out else 0.0,
        "selection/effective_prompts": float(sum(_has_variance(g.rewards[g.loss_mask]) for g in groups)),
        "selection/batch_groups": float(len(groups)),
        "selection/full_batch": float(len(groups) == train_batch_size),
        "rollout/step_responses": float(calls.step_responses),
    })
    return StepResult(groups=groups, handles=calls.handles, metrics=metrics)


def _has_variance(rewards: np.ndarray) -> bool:
    return rewards.size > 0 and bool(rewards.max() > rewards.min())


class _RolloutCalls:
    """Runs rollout calls, checks what they return, counts responses, keeps the handles in call order."""

    def __init__(self, selector: Selector, rollout: RolloutFn):
        self.selector, self.rollout = selector, rollout
        self.handles: list[Any] = []
        self.step_responses = 0

    def run(self, prompt_ids: np.ndarray, payloads: list, num_samples: int) -> tuple[int, RolloutResult]:
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


def _group(call: int, row: int, prompt_id: int, payload: Any, correct: np.ndarray,
           rewards: np.ndarray) -> SelectedGroup:
    samples = np.arange(correct.size, dtype=np.int64)
    refs = np.stack([np.full_like(samples, call), np.full_like(samples, row), samples], axis=1)
    return SelectedGroup(prompt_id=int(prompt_id), payload=payload, response_refs=refs, rewards=rewards.copy(),
                         correct=correct.copy(), loss_mask=np.ones(correct.shape, dtype=bool))


def _pass_step(selector: Selector, calls: _RolloutCalls, pull_prompts: PullFn,
               train_batch_size: int) -> tuple[list[SelectedGroup], int]:
    """Vanilla (one pass, keep all), DS / GRESO / oracle (passes until train_batch_size groups with variance)."""
    config = selector.pass_config
    filters = selector.filters_zero_variance
    pass_size = selector.first_pass_size(train_batch_size)
    collected: list[SelectedGroup] = []
    zero_variance_total = passes = 0
    while True:
        pulled = _pull(pull_prompts, pass_size, selector)
        if pulled.prompt_ids.size == 0:
            break
        call, result = calls.run(pulled.prompt_ids, pulled.payloads, selector.group_size)
        passes += 1
        selector.observe(pulled.prompt_ids, result.correct)
        zero_variance = result.rewards.max(axis=1) == result.rewards.min(axis=1)
        zero_variance_total += int(zero_variance.sum())
        for row, prompt_id in enumerate(pulled.prompt_ids):
            if not (filters and zero_variance[row]):
                collected.append(_group(call, row, prompt_id, pulled.payloads[row], result.correct[row],
                                        result.rewards[row]))
        remaining = train_batch_size - len(collected)
        if remaining <= 0:
            break
        if passes >= config.max_passes:
            if config.on_max_passes == "error":
                raise MaxPassesReached(f"selection.max_passes: step {selector.step} ran {passes} passes and "
                                       f"collected {len(collected)} of {train_batch_size} groups with variance")
            break
        pass_size = (next_pass_size(remaining=remaining, pass_groups=pulled.prompt_ids.size,
                                    pass_zero_variance=int(zero_variance.sum()),
                                    min_pass_size=config.min_pass_size, max_pass_size=config.rollout_batch_size)
                     if filters else remaining)
    return collected[:train_batch_size], zero_variance_total


def _staged_step(selector, calls: _RolloutCalls, pull_prompts: PullFn,
                 train_batch_size: int) -> tuple[list[SelectedGroup], int]:
    """AERO: Stage I over train_batch_size prompts, bounded rescue rounds over the unsolved, then curation."""
    pulled = _pull(pull_prompts, train_batch_size, selector)
    ids, payloads = pulled.prompt_ids, pulled.payloads
    if ids.size == 0:
        return [], 0
    call, result = calls.run(ids, payloads, selector.n_explore)
    groups = [_group(call, row, ids[row], payloads[row], result.correct[row], result.rewards[row])
              for row in range(ids.size)]
    solved = result.correct.any(axis=1)
    for width in selector.rescue_widths():
        rows = np.flatnonzero(~solved)
        if rows.size == 0:
            break
        call, result = calls.run(ids[rows], [payloads[r] for r in rows], width)
        for sub_row, row in enumerate(rows):
            extra = _group(call, sub_row, ids[row], payloads[row], result.correct[sub_row], result.rewards[sub_row])
            group = groups[row]
            group.response_refs = np.concatenate([group.response_refs, extra.response_refs])
            group.correct = np.concatenate([group.correct, extra.correct])
            group.rewards = np.concatenate([group.rewards, extra.rewards])
        solved[rows] |= result.correct.any(axis=1)
    selector.observe_counts(ids, np.array([g.correct.sum() for g in groups]),
                            np.array([g.correct.size for g in groups]))
    zero_variance = 0
    for group in groups:
        zero_variance += not _has_variance(group.rewards)
        group.loss_mask, group.baseline, group.scale = selector.curate(group.prompt_id, group.correct, group.rewards)
    return groups, zero_variance
