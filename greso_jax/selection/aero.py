"""AERO ("Train Less, Learn More"), as we read it: adapt each group's size and loss mask instead of skipping prompts.

Our reading of the paper (its full text was not available to us; every knob is explicit
so a reader can align it with the paper):
- Stage I: `n_explore` rollouts per prompt; success rate u = correct / n_explore.
- Rescue (u == 0): rounds of `n_extra` more rollouts over the still-unsolved prompts, until
  one is correct or the per-prompt budget `max_group_size` is spent (the last round is
  narrower if n_extra does not divide the budget). Each round is one generation call over
  the unsolved subset, so the number of calls is bounded and shapes stay static.
- Selective rejection (0 < u < `reject_below`, u over the final group, rescue included):
  keep every correct response and ceil(`reject_k` · correct) of the incorrect ones, picked by
  counter-based draws keyed by (seed, step, prompt id, response); the rest get loss mask 0.
- No dead zones: a group whose loss-masked rewards are all equal gets a baseline from the
  prompt's Beta posterior, Beta(`prior_alpha` + successes, `prior_beta` + failures),
  successes / failures accumulated over every rollout of the prompt (this step included):
  baseline ũ = α / (α + β) and scale √(ũ(1 − ũ)), so its advantage (r − ũ) / scale is not
  identically zero. This assumes binary {0, 1} rewards, where ũ is in reward units.
Groups with u >= reject_below are kept as generated. rl.group_size is not used by AERO.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from greso_jax.selection import counter_rng
from greso_jax.selection.base import Selector

_REJECT_STREAM = 2  # counter_rng stream id of the rejection draws


def rescue_widths(n_explore: int, n_extra: int, max_group_size: int) -> list[int]:
    """Rollouts added per rescue round: n_extra at a time until a group reaches max_group_size."""
    widths, size = [], n_explore
    while size < max_group_size:
        widths.append(min(n_extra, max_group_size - size))
        size += widths[-1]
    return widths


def rejection_mask(correct: np.ndarray, draws: np.ndarray, reject_k: float) -> np.ndarray:
    """Loss mask bool [k]: every correct response plus ceil(reject_k · #correct) incorrect ones (lowest draws)."""
    num_correct = int(correct.sum())
    incorrect = np.flatnonzero(~correct)
    # The 1e-9 keeps a product like 0.1 · 30 = 3.0000000000000004 from rounding up to 4.
    keep_incorrect = min(incorrect.size, max(0, math.ceil(reject_k * num_correct - 1e-9)))
    mask = correct.copy()
    mask[incorrect[np.argsort(draws[incorrect], kind="stable")[:keep_incorrect]]] = True
    return mask


def posterior_baseline(successes: float, failures: float, prior_alpha: float,
                       prior_beta: float) -> tuple[float, float]:
    """(ũ, √(ũ(1 − ũ))) of Beta(prior_alpha + successes, prior_beta + failures)."""
    alpha, beta = prior_alpha + successes, prior_beta + failures
    mean = alpha / (alpha + beta)
    return mean, math.sqrt(mean * (1.0 - mean))


class AeroSelector(Selector):
    """Keeps every prompt; the driver runs Stage I and rescue rounds, then `curate` builds each group's loss terms."""

    strategy = "aero"
    filters_zero_variance = False
    staged_groups = True

    def __init__(self, num_prompts: int, *, n_explore: int = 4, n_extra: int = 4, max_group_size: int = 16,
                 reject_k: float = 1.0, reject_below: float = 0.5, prior_alpha: float = 1.0,
                 prior_beta: float = 1.0, seed: int = 0):
        super().__init__(num_prompts, group_size=n_explore, seed=seed)
        if not 1 <= n_explore < max_group_size:
            raise ValueError(f"selection.aero_n_explore: need 1 <= n_explore < aero_max_group_size "
                             f"({max_group_size}), got {n_explore}")
        if n_extra < 1:
            raise ValueError(f"selection.aero_n_extra: must be >= 1, got {n_extra}")
        if reject_k < 0:
            raise ValueError(f"selection.aero_reject_k: must be >= 0, got {reject_k}")
        if not 0.0 < reject_below <= 1.0:
            raise ValueError(f"selection.aero_reject_below: must be in (0, 1], got {reject_below}")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"selection.aero_prior_alpha / aero_prior_beta: must be > 0, got "
                             f"{prior_alpha}, {prior_beta}")
        self.n_explore, self.n_extra, self.max_group_size = int(n_explore), int(n_extra), int(max_group_size)
        self.reject_k, self.reject_below = float(reject_k), float(reject_below)
        self.prior_alpha, self.prior_beta = float(prior_alpha), float(prior_beta)
        self.successes = np.zeros(self.num_prompts, dtype=np.int32)  # correct responses over the prompt's history
        self.failures = np.zeros(self.num_prompts, dtype=np.int32)
        self.step_posterior_groups = 0

    def rescue_widths(self) -> list[int]:
        return rescue_widths(self.n_explore, self.n_extra, self.max_group_size)

    def curate(self, prompt_id: int, correct: np.ndarray, rewards: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Loss mask bool [k] and baseline / scale overrides (NaN: use the group's own statistics).

        Call after `observe_counts` has recorded this group, so the posterior includes it.
        """
        correct = np.asarray(correct, dtype=bool)
        rewards = np.asarray(rewards, dtype=np.float32)
        num_correct = int(correct.sum())
        mask = np.ones(correct.shape, dtype=bool)
        if 0 < num_correct < self.reject_below * correct.size:
            key = counter_rng.scalar_key(self.seed, _REJECT_STREAM, self.step, prompt_id)
            mask = rejection_mask(correct, counter_rng.uniform(key, np.arange(correct.size)), self.reject_k)
        kept = rewards[mask]
        if kept.size and kept.max() > kept.min():
            return mask, math.nan, math.nan
        self.step_posterior_groups += 1
        baseline, scale = posterior_baseline(self.successes[prompt_id], self.failures[prompt_id],
                                             self.prior_alpha, self.prior_beta)
        return mask, baseline, scale

    def begin_step(self, step: int) -> None:
        super().begin_step(step)
        self.step_posterior_groups = 0

    def end_step(self) -> dict[str, float]:
        metrics = super().end_step()
        metrics["selection/posterior_groups"] = float(self.step_posterior_groups)
        return metrics

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        np.add.at(self.successes, ids, num_correct.astype(np.int32))
        np.add.at(self.failures, ids, (num_samples - num_correct).astype(np.int32))

    def _history_state(self) -> dict[str, Any]:
        return {"successes": self.successes.copy(), "failures": self.failures.copy(),
                "step_posterior_groups": self.step_posterior_groups}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        for name in ("successes", "failures"):
            array = np.asarray(state[name])
            if array.shape != (self.num_prompts,):
                raise ValueError(f"aero.load_state_dict: {name} has shape {array.shape}, "
                                 f"expected ({self.num_prompts},)")
            setattr(self, name, array.astype(np.int32).copy())
        self.step_posterior_groups = int(state["step_posterior_groups"])
