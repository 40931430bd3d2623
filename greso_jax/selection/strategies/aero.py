"""AERO ("Train Less, Learn More"), as we read it: adapt each group's size and loss terms instead of skipping prompts.

Our reading of the paper (its method section was not available to us; where the reading is
a choice, it is a config field of `AeroSettings`, `selection.aero.*`):
- Budget: a prompt gets at most `max_group_size` responses (0: rl.group_size, so AERO is
  compared with the other strategies at the same per-prompt budget; a larger cap is allowed
  and reported as `selection/aero/max_group_size`). Stage I generates `n_explore` of them (0: half
  the cap); its success rate u = correct / n_explore picks the prompt's stratum.
- u == 0, rescue: the method's small increments, rounds of `n_extra` (2) more rollouts over the
  still-unsolved prompts: a prompt leaves the rounds at its first correct response, the others go
  on until the budget is spent (the last round is narrower when n_extra does not divide it). With
  n_extra = max_group_size - n_explore, rescue is one round that completes the group, with no early
  stop. Each round is one generation call over the unsolved subset, so the number of calls is
  bounded and shapes stay static. A rescued group trains on all its responses.
- 0 < u < `reject_below`, selective rejection, decided on the Stage-I responses: keep every
  correct response and ceil(`reject_k` · correct) of the incorrect ones, picked by
  counter-based draws keyed by (seed, step, prompt id, response). Rejected responses leave
  the update batch altogether (rl.assemble_batch drops rows whose loss mask is 0), so their
  forward and backward passes are not paid.
- u >= reject_below: kept as generated.
- No dead zones: a group whose kept responses are all correct or all incorrect gets a
  baseline from a Beta posterior, Beta(`prior_alpha` + successes, `prior_beta` + failures),
  with successes / failures over the prompt's whole history, this step included
  (`posterior_from="history"`), or over this group only (`"group"`): baseline ũ = α / (α + β)
  and scale √(ũ(1 − ũ)). `posterior_responses` of its responses enter the loss (0: all).
- Correctness, never a shaped reward: strata, rescue and the posterior count correct
  responses, and a posterior group's rewards are replaced by its correctness (0 / 1), the
  units ũ is in. With a format bonus (reward 0.1 for a boxed wrong answer) an all-wrong group
  would otherwise have reward 0.1 > ũ and its wrong answers would be reinforced.
- The posterior scale replaces the group's std, so it applies exactly where the advantage
  estimator divides by a group std (rl.advantage="grpo"); estimators that do not ("drgrpo",
  "batch_std") ignore it, for posterior and ordinary groups alike (rl.advantages).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from greso_jax.core.specs import FLOAT, INT, STR, ConfigError, Spec, field
from greso_jax.selection import counter_rng
from greso_jax.selection.base import Selector
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.registry import register_strategy
from greso_jax.selection.settings import StrategySettings


def _zero_or_at_least(low: int):
    return lambda value: None if value == 0 or value >= low else f"must be 0 (derived) or >= {low}"


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

    n_explore: int = field(0, Spec(INT, 0, check=_zero_or_at_least(2)), "Stage I rollouts per prompt (0: half of "
                           "the budget; >= 2 to estimate a success rate)")
    n_extra: int = field(2, Spec(INT, 1), "rollouts added per rescue round to prompts with no correct response "
                         "yet (small increments until the first success or the budget)")
    max_group_size: int = field(0, Spec(INT, 0, check=_zero_or_at_least(3)), "per-prompt response budget, Stage "
                                "I and rescue together (0: rl.group_size, the other strategies' budget)")
    reject_k: float = field(1.0, Spec(FLOAT, 0), "selective rejection keeps ceil(reject_k * #correct) "
                            "incorrect responses")
    reject_below: float = field(0.5, Spec(FLOAT, 0, 1, low_open=True), "selective rejection applies while the "
                                "Stage-I success rate is below this")
    prior_alpha: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior alpha of the per-prompt posterior")
    prior_beta: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior beta of the per-prompt posterior")
    posterior_from: str = field("history", Spec(STR, choices=("history", "group")), "posterior counts: the "
                                "prompt's whole history (this step included) or this group only")
    posterior_responses: int = field(0, Spec(INT, 0), "responses of a posterior group that enter the loss "
                                     "(0: all)")

    def check_relations(self, prefix: str) -> None:
        if self.n_explore and self.max_group_size and self.n_explore >= self.max_group_size:
            raise ConfigError(f"{prefix}.n_explore: {self.n_explore} must be below {prefix}.max_group_size "
                              f"{self.max_group_size}")

    def budget(self, group_size: int) -> int:
        """Responses per prompt, Stage I and rescue together (max_group_size, 0: rl.group_size)."""
        return int(self.max_group_size or group_size)

    def stage_one(self, group_size: int) -> int:
        """Stage I responses per prompt (n_explore, 0: half the budget)."""
        return int(self.n_explore or self.budget(group_size) // 2)

    def check_group_size(self, prefix: str, group_size: int) -> None:
        budget, stage_one = self.budget(group_size), self.stage_one(group_size)
        if not 2 <= stage_one < budget:
            raise ConfigError(f"{prefix}.n_explore: Stage I of {stage_one} responses must be >= 2 and below the "
                              f"budget of {budget} ({prefix}.max_group_size, 0 = rl.group_size)")


class Curated(NamedTuple):
    """What curation decides for one group: loss mask bool [k], rewards float32 [k] for the
    advantage, and baseline / scale overrides (NaN: the group's own statistics)."""

    loss_mask: np.ndarray
    rewards: np.ndarray
    baseline: float
    scale: float


@register_strategy("aero")
class AeroSelector(Selector):
    """Keeps every prompt; Stage I and rescue rounds are its passes, `curate` builds each group's loss terms."""

    Settings = AeroSettings
    extends_groups = True

    def __init__(self, num_prompts: int, **common):
        super().__init__(num_prompts, **common)
        self.max_group_size = self.settings.budget(self.group_size)
        self.n_explore = self.settings.stage_one(self.group_size)
        self.successes = np.zeros(self.num_prompts, dtype=np.int32)  # correct responses over the prompt's history
        self.failures = np.zeros(self.num_prompts, dtype=np.int32)
        self.step_posterior_groups = self.step_rejected_responses = 0

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
        """Observes the final groups (rescue included), then curates each one's loss terms."""
        self.observe_groups(groups)
        for group in groups:
            group.loss_mask, group.rewards, group.baseline, group.scale = self.curate(
                group.prompt_id, group.correct, group.rewards)
        return groups

    def rescue_widths(self) -> list[int]:
        return rescue_widths(self.n_explore, self.settings.n_extra, self.max_group_size)

    def curate(self, prompt_id: int, correct: np.ndarray, rewards: np.ndarray) -> Curated:
        """The loss terms of one group whose first n_explore responses are its Stage I.

        Call after the group was observed, so that a history posterior includes it.
        """
        correct = np.asarray(correct, dtype=bool)
        rewards = np.asarray(rewards, dtype=np.float32)
        s = self.settings
        key = counter_rng.scalar_key(self.seed, Stream.AERO_REJECT, self.step, prompt_id)
        draws = counter_rng.uniform(key, np.arange(correct.size))
        stage_one_correct = int(correct[:self.n_explore].sum())
        mask = np.ones(correct.shape, dtype=bool)
        if 0 < stage_one_correct < s.reject_below * min(self.n_explore, correct.size):
            mask = rejection_mask(correct, draws, s.reject_k)
        kept = correct[mask]
        if kept.any() and not kept.all():
            return self._curated(mask, rewards, math.nan, math.nan)
        self.step_posterior_groups += 1
        if s.posterior_from == "history":
            successes, failures = self.successes[prompt_id], self.failures[prompt_id]
        else:
            successes, failures = int(correct.sum()), int((~correct).sum())
        baseline, scale = posterior_baseline(successes, failures, s.prior_alpha, s.prior_beta)
        if s.posterior_responses and mask.sum() > s.posterior_responses:
            chosen = np.flatnonzero(mask)[np.argsort(draws[mask], kind="stable")[:s.posterior_responses]]
            mask = np.zeros(correct.shape, dtype=bool)
            mask[chosen] = True
        return self._curated(mask, correct.astype(np.float32), baseline, scale)

    def _curated(self, mask: np.ndarray, rewards: np.ndarray, baseline: float, scale: float) -> Curated:
        self.step_rejected_responses += int(np.count_nonzero(~mask))
        return Curated(mask, rewards, baseline, scale)

    def begin_step(self, step: int, *, epoch: int = 0) -> None:
        super().begin_step(step, epoch=epoch)
        self.step_posterior_groups = self.step_rejected_responses = 0

    def end_step(self) -> dict[str, float]:
        metrics = super().end_step()
        metrics[self.metric_name("posterior_groups")] = float(self.step_posterior_groups)
        # Generated and paid for, left out of the update (rejection, posterior subsets).
        metrics[self.metric_name("rejected_responses")] = float(self.step_rejected_responses)
        metrics[self.metric_name("max_group_size")] = float(self.max_group_size)
        return metrics

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        np.add.at(self.successes, ids, num_correct.astype(np.int32))
        np.add.at(self.failures, ids, (num_samples - num_correct).astype(np.int32))

    def _history_state(self) -> dict[str, Any]:
        return {"successes": self.successes.copy(), "failures": self.failures.copy(),
                "step_posterior_groups": self.step_posterior_groups,
                "step_rejected_responses": self.step_rejected_responses}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        for name in ("successes", "failures"):
            setattr(self, name, self._loaded_prompt_array(state, name, np.int32, integer=True, counts=True))
        self.step_posterior_groups = int(state["step_posterior_groups"])
        self.step_rejected_responses = int(state["step_rejected_responses"])
