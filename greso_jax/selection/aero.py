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
Settings: `AeroSettings` (`selection.aero.*`); design notes: docs/design.md, "AERO".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from greso_jax.selection import counter_rng
from greso_jax.selection.base import PassConfig, Selector, StrategySettings
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.registry import register_strategy
from greso_jax.specs import FLOAT, INT, ConfigError, Spec, field

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


@dataclasses.dataclass(frozen=True)
class AeroSettings(StrategySettings):
    """`selection.aero.*`: AERO's stages, rejection and posterior (our reading of the paper, module docstring)."""

    n_explore: int = field(4, Spec(INT, 2), "Stage I rollouts per prompt (>= 2 to estimate a success rate)")
    n_extra: int = field(4, Spec(INT, 1), "rollouts added per rescue round to prompts with no correct response")
    max_group_size: int = field(16, Spec(INT, 2), "per-prompt response budget, Stage I and rescue together")
    reject_k: float = field(1.0, Spec(FLOAT, 0), "selective rejection keeps ceil(reject_k * #correct) "
                            "incorrect responses")
    reject_below: float = field(0.5, Spec(FLOAT, 0, 1, low_open=True), "selective rejection applies while the "
                                "success rate is below this")
    prior_alpha: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior alpha of the per-prompt posterior")
    prior_beta: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior beta of the per-prompt posterior")

    def check_relations(self, prefix: str) -> None:
        if self.n_explore >= self.max_group_size:
            raise ConfigError(f"{prefix}.n_explore: {self.n_explore} must be below {prefix}.max_group_size "
                              f"{self.max_group_size}")


@register_strategy("aero")
class AeroSelector(Selector):
    """Keeps every prompt; Stage I and rescue rounds are its passes, `curate` builds each group's loss terms."""

    Settings = AeroSettings

    def __init__(self, num_prompts: int, *, n_explore: int = 4, n_extra: int = 4, max_group_size: int = 16,
                 reject_k: float = 1.0, reject_below: float = 0.5, prior_alpha: float = 1.0,
                 prior_beta: float = 1.0, seed: int = 0, group_size: int = 8,
                 pass_config: PassConfig | None = None):
        super().__init__(num_prompts, group_size=group_size, pass_config=pass_config, seed=seed)
        settings = AeroSettings(n_explore=n_explore, n_extra=n_extra, max_group_size=max_group_size,
                                reject_k=reject_k, reject_below=reject_below, prior_alpha=prior_alpha,
                                prior_beta=prior_beta).checked("selection.aero")
        self.n_explore, self.n_extra = int(settings.n_explore), int(settings.n_extra)
        self.max_group_size = int(settings.max_group_size)
        self.reject_k, self.reject_below = float(settings.reject_k), float(settings.reject_below)
        self.prior_alpha, self.prior_beta = float(settings.prior_alpha), float(settings.prior_beta)
        self.successes = np.zeros(self.num_prompts, dtype=np.int32)  # correct responses over the prompt's history
        self.failures = np.zeros(self.num_prompts, dtype=np.int32)
        self.step_posterior_groups = 0

    def first_pass(self, train_batch_size: int) -> PassRequest:
        """Stage I: train_batch_size prompts, n_explore responses each."""
        return PassRequest(num_samples=self.n_explore, pull=train_batch_size)

    def after_pass(self, groups: list[Group], new: Sequence[int], *, passes: int,
                   train_batch_size: int) -> PassRequest | None:
        """The next rescue round over the groups with no correct response yet, while the budget lasts."""
        widths = self.rescue_widths()
        unsolved = tuple(i for i, g in enumerate(groups) if not g.correct.any())
        if passes > len(widths) or not unsolved:
            return None
        return PassRequest(num_samples=widths[passes - 1], extend=unsolved)

    def finish_step(self, groups: list[Group], train_batch_size: int) -> list[Group]:
        """Observes the final groups (rescue included), then curates each one's loss mask and baseline."""
        self.observe_groups(groups)
        for group in groups:
            group.loss_mask, group.baseline, group.scale = self.curate(group.prompt_id, group.correct,
                                                                       group.rewards)
        return groups

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

    def begin_step(self, step: int, *, epoch: int = 0) -> None:
        super().begin_step(step, epoch=epoch)
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
