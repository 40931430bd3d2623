"""MoPPS (Model Predictive Prompt Selection), as we read it: keep prompts whose sampled success rate is near a target.

Per prompt a decayed Beta posterior of its success rate; a candidate is kept when its Thompson
draw θ̂ ~ Beta(α, β) lies within τ of `target_rate`, τ being the 1/`candidate_ratio` quantile of
that distance over the population's draws for the step. The authors rank a candidate pool of
k·B prompts and keep the B closest; our prompts arrive as a stream filtered one at a time, and
the quantile is their rule as the pool grows. Draws are counter-based (the inverse Beta CDF of
a keyed uniform) so every host and every resume decides the same. By default the step shape is Dynamic
Sampling's with adaptive passes, so that MoPPS trains on the same batches as DS and GRESO; the variant
`mopps_authors` is MoPPS as its authors run it (every script sets enable_filter_groups=False): one pass
of train_batch_size kept prompts (the B of about k·B scanned), trained on unfiltered.
Our reading of the authors' code, line by line, and where we depart from it: docs/design.md,
"MoPPS (our reading)".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import special

from greso_jax.core.specs import BOOL, FLOAT, Spec, field
from greso_jax.selection.base import OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_NONE, check_prompt_ids
from greso_jax.selection.beta import zero_variance_chance
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.groups import Group
from greso_jax.selection.pass_sizing import sizing_field
from greso_jax.selection.registry import register_strategy, register_variant
from greso_jax.selection.settings import StrategySettings
from greso_jax.selection.strategies.dynamic_sampling import FilteringSelector

# τ is estimated from at most this many prompts' draws: the authors' candidate pools hold 2-4k
# prompts, so 16k estimates their cut at least as closely, at a cost that does not grow with the data set.
REFERENCE_PROMPTS = 1 << 14
_POSITIVE = Spec(FLOAT, 0, low_open=True)
_UNIT = Spec(FLOAT, 0, 1)


@dataclasses.dataclass(frozen=True)
class MoppsSettings(StrategySettings):
    """`selection.mopps.*`: MoPPS's posterior and keep rule (our reading, module docstring)."""

    prior_alpha: float = field(1.0, _POSITIVE, "Beta prior alpha of every prompt's success rate")
    prior_beta: float = field(1.0, _POSITIVE, "Beta prior beta of every prompt's success rate")
    decay: float = field(1.0, _UNIT, "lambda: at each rollout of a prompt its decayed correct / incorrect counts "
                         "are multiplied by this before the group's are added (1: no forgetting, the authors' "
                         "math runs; 0.5: their countdown and geometry runs)")
    target_rate: float = field(0.5, _UNIT, "success rate the Thompson draws are ranked against (closest kept)")
    candidate_ratio: float = field(16.0, Spec(FLOAT, 1), "k: keep the 1/k of the candidates whose draw is "
                                   "closest to target_rate (their top-B of a pool of k*B; 16 in their math runs, "
                                   "8 in countdown and geometry)")
    filter_groups: bool = field(True, Spec(BOOL), "drop zero-variance groups after rollout and pull follow-up "
                                "passes, as DS (False: train on every group, the authors' enable_filter_groups)")
    pass_sizing: str = sizing_field("adaptive")  # DS's adaptive passes; the authors' one pass of B: "exact"


@register_strategy("mopps")
class MoppsSelector(FilteringSelector):
    """Per-prompt decayed Beta posteriors (two float32 arrays, 8 bytes per prompt) and Thompson-sampled keep decisions.

    A candidate is kept when its draw θ̂ ~ Beta(α, β) lies within τ of target_rate, τ being the
    1/candidate_ratio quantile of that distance over the population's draws for the step
    (computed once per step and epoch). Passes are sized by `pass_sizing`; with `filter_groups` off every
    group is usable, so a pass of train_batch_size (the "exact" sizer) is the step's only one.
    """

    Settings = MoppsSettings
    knobs = ("tolerance",)

    def __init__(self, num_prompts: int, **common):
        super().__init__(num_prompts, **common)
        # Decayed counts of correct / incorrect responses per prompt: the evidence beyond the prior.
        self.successes = np.zeros(self.num_prompts, dtype=np.float32)
        self.failures = np.zeros(self.num_prompts, dtype=np.float32)
        self._tolerance_cache: tuple[tuple[int, int], float] | None = None  # ((step, epoch), τ)

    def usable(self, group: Group) -> bool:
        return group.has_variance or not self.settings.filter_groups

    def posterior(self, prompt_ids) -> tuple[np.ndarray, np.ndarray]:
        """(α, β) of each prompt's Beta posterior, float64 [N] each."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.posterior")
        return (self.settings.prior_alpha + self.successes[ids].astype(np.float64),
                self.settings.prior_beta + self.failures[ids].astype(np.float64))

    def predicted_zero_variance(self, prompt_ids) -> np.ndarray:
        """The posterior's chance that each prompt's next group is zero-variance, float64 [N]."""
        alpha, beta = self.posterior(prompt_ids)
        return zero_variance_chance(alpha, beta, self.group_size)

    def thompson_draws(self, prompt_ids, epochs=None) -> np.ndarray:
        """θ̂ ~ Beta(α, β) per occurrence, float64 [N]: the inverse CDF of a uniform keyed by
        (seed, step, prompt id, epoch); `epochs` int [N] (None: the step's epoch)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.thompson_draws")
        uniforms = self.occurrence_uniforms(ids, epochs, Stream.MOPPS_THOMPSON)
        alpha, beta = self.posterior(ids)
        return special.betaincinv(alpha, beta, uniforms)

    @property
    def tolerance(self) -> float:
        """τ of the current step: the ceil(M / candidate_ratio)-th smallest |θ̂ − target_rate| over the
        draws of M reference prompts (all prompts, or REFERENCE_PROMPTS of them drawn per step)."""
        key = (self.step, self.epoch)
        if self._tolerance_cache is None or self._tolerance_cache[0] != key:
            if self.num_prompts <= REFERENCE_PROMPTS:
                reference = np.arange(self.num_prompts)
            else:
                rng = np.random.default_rng([self.seed, Stream.MOPPS_REFERENCE, self.step])
                reference = rng.choice(self.num_prompts, REFERENCE_PROMPTS, replace=False)
            distance = np.abs(self.thompson_draws(reference) - self.settings.target_rate)
            rank = math.ceil(reference.size / self.settings.candidate_ratio) - 1
            self._tolerance_cache = (key, float(np.partition(distance, rank)[rank]))
        return self._tolerance_cache[1]

    def admission_order(self, prompt_ids) -> np.ndarray:
        """Stream rollouts: the draws closest to target_rate enter first (the draws should_keep judged)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.admission_order")
        return np.argsort(np.abs(self.thompson_draws(ids) - self.settings.target_rate), kind="stable")

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.should_keep")
        return np.abs(self.thompson_draws(ids, epochs) - self.settings.target_rate) <= self.tolerance

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        # A prompt without evidence was skipped by the luck of its draw from the prior, not predicted
        # either way; one with evidence counts on the side its posterior mean is.
        alpha, beta = self.posterior(ids)
        kinds = np.where(alpha / (alpha + beta) > 0.5, OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT)
        return np.where(self.successes[ids] + self.failures[ids] > 0, kinds, OUTCOME_NONE)

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        correct = num_correct.astype(np.float32)
        incorrect = (num_samples - num_correct).astype(np.float32)
        decay = np.float32(self.settings.decay)
        if np.unique(ids).size == ids.size:
            self.successes[ids] = decay * self.successes[ids] + correct
            self.failures[ids] = decay * self.failures[ids] + incorrect
            return
        for row, prompt in enumerate(ids):  # a prompt repeated in one call: decay and add in rollout order
            self.successes[prompt] = decay * self.successes[prompt] + correct[row]
            self.failures[prompt] = decay * self.failures[prompt] + incorrect[row]

    def _history_state(self) -> dict[str, Any]:
        return {"successes": self.successes.copy(), "failures": self.failures.copy()}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        for name in ("successes", "failures"):
            setattr(self, name, self._loaded_prompt_array(state, name, np.float32, counts=True))
        self._tolerance_cache = None


# MoPPS as its authors run it: one pass of B kept prompts, no post-filter (their scripts' enable_filter_groups=False).
register_variant("mopps_authors", "mopps", filter_groups=False, pass_sizing="exact")
