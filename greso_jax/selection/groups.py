"""The data of one selection step: prompts pulled, scored passes, the step's groups and the next pass request."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


@dataclasses.dataclass
class PulledPrompts:
    """The next kept prompts from the pipeline: ids int64 [n], one opaque payload each, and the ids it skipped."""

    prompt_ids: np.ndarray
    payloads: list
    skipped_ids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclasses.dataclass
class ScoredPass:
    """What one rollout call returns: num_samples responses for each of n prompts, graded.

    correct bool [n, s], rewards float32 [n, s]; `handle` is opaque to selection (the trainer
    keeps the generated tokens there); num_tokens counts the generated tokens, when known.
    """

    correct: np.ndarray
    rewards: np.ndarray
    handle: Any = None
    num_tokens: int | None = None


@dataclasses.dataclass
class Group:
    """One prompt's responses in this step, and what the strategy decided about their loss terms.

    response_refs int64 [k, 3]: (rollout call index, prompt row in that call, sample index),
    i.e. row `prompt_row * num_samples + sample` of the call's output. rewards float32 [k],
    correct bool [k], loss_mask bool [k] (False: generated but left out of the update, e.g.
    AERO's rejection). baseline / scale: NaN means "use the group's own mean / std over the
    masked responses"; a number (AERO's posterior) replaces them.
    """

    prompt_id: int
    payload: Any
    response_refs: np.ndarray
    rewards: np.ndarray
    correct: np.ndarray
    loss_mask: np.ndarray
    baseline: float = math.nan
    scale: float = math.nan

    @classmethod
    def from_call(cls, call: int, row: int, prompt_id: int, payload: Any, correct: np.ndarray,
                  rewards: np.ndarray) -> "Group":
        refs = _refs(call, row, correct.size)
        return cls(prompt_id=int(prompt_id), payload=payload, response_refs=refs, rewards=rewards.copy(),
                   correct=correct.copy(), loss_mask=np.ones(correct.shape, dtype=bool))

    def extend(self, call: int, row: int, correct: np.ndarray, rewards: np.ndarray) -> None:
        """Appends the responses of another call (AERO's rescue) to this group."""
        refs = _refs(call, row, correct.size)
        self.response_refs = np.concatenate([self.response_refs, refs])
        self.correct = np.concatenate([self.correct, correct])
        self.rewards = np.concatenate([self.rewards, rewards])
        self.loss_mask = np.concatenate([self.loss_mask, np.ones(correct.shape, dtype=bool)])

    @property
    def has_variance(self) -> bool:
        """The group's rewards are not all equal: it has a non-zero advantage."""
        return self.rewards.size > 0 and bool(self.rewards.max() > self.rewards.min())

    @property
    def has_variance_in_loss(self) -> bool:
        """The rewards that enter the loss are not all equal."""
        kept = self.rewards[self.loss_mask]
        return kept.size > 0 and bool(kept.max() > kept.min())


def _refs(call: int, row: int, count: int) -> np.ndarray:
    samples = np.arange(count, dtype=np.int64)
    return np.stack([np.full_like(samples, call), np.full_like(samples, row), samples], axis=1)


@dataclasses.dataclass(frozen=True)
class PassRequest:
    """The next rollout pass of a step, as the strategy asks for it.

    Either `pull` new prompts from the pipeline (a positive count), or `extend` the step's
    groups at these indices with more responses (AERO's rescue); `num_samples` responses per
    prompt in either case.
    """

    num_samples: int
    pull: int = 0
    extend: tuple[int, ...] = ()

    def __post_init__(self):
        if self.num_samples < 1:
            raise ValueError(f"PassRequest: num_samples must be >= 1, got {self.num_samples}")
        if (self.pull > 0) == bool(self.extend):
            raise ValueError(f"PassRequest: give either pull > 0 or extend, got pull={self.pull}, "
                             f"extend={self.extend}")
