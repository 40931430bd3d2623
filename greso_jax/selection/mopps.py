"""MoPPS (Model Predictive Prompt Selection), as we read it: keep prompts whose sampled success rate is near a target.

Our reading of the authors' code (github.com/thu-rllab/MoPPS: recipe/ours/mopps.py, the sampler;
recipe/ours/our_ray_trainer.py, where it is called; recipe/ours/config/our_trainer.yaml and
recipe/ours/scripts/*/*.sh, its defaults and the settings each task ran with), and where we
depart from it (docs/design.md, "MoPPS (our reading)"):
- Posterior: each prompt's success rate has a Beta(α, β) posterior, α = prior_alpha + S,
  β = prior_beta + F, with S / F the prompt's decayed counts of correct / incorrect responses.
  A rolled-out group of n responses, c of them correct, sets S ← λ·S + c, F ← λ·F + (n − c)
  (λ = `decay`). That is their update α ← λα + (1 − λ)α₀ + c, β ← λβ + (1 − λ)β₀ + (n − c)
  written around the prior: forgetting pulls a posterior back toward the prior, and only at
  the prompt's own rollouts, so a prompt that is not rolled out keeps its posterior however
  many steps pass. They count a group as its mean accuracy times rollout.n; we count the
  group's own responses, so groups of any size update exactly. Every rolled-out group
  updates the posterior, the zero-variance groups the step then drops included (theirs
  updates on every selected prompt).
- Selection: they draw a candidate batch of k·B prompts (k = tasksampler.ts_ratio), sample
  θ̂ ~ Beta(α, β) for each and keep the B with the smallest (θ̂ − target)². Our prompts arrive
  as a stream, filtered one at a time by `should_keep`, so there is no pool to rank. We keep a
  candidate when |θ̂ − target| ≤ τ, where τ is the 1/k quantile of |θ̂ − target| over the
  prompt population's draws for the step (every prompt's, or a sample of 2^14 prompts on
  larger data sets). Their pool is a uniform sample of the data set, so this is their rule as
  the pool grows; the kept fraction of the candidates is 1/k in expectation (theirs: exactly).
  τ depends only on the selector's state, so every host of a sharded pipeline cuts at the same
  τ, and `selection/mopps_tolerance` reports it.
- Draws: θ̂ = I⁻¹(u; α, β), the inverse regularized incomplete beta function of a
  counter-based uniform u keyed by (seed, step, prompt id, occurrence epoch), so a prompt's
  draw, and its decision, is the same on every host, after a resume and in any batch (theirs
  is an unkeyed np.random.beta). A prompt met in two epochs of one step gets two draws.
- Step shape: Dynamic Sampling's with adaptive passes, as GRESO's: a first pass of
  selection.rollout_batch_size kept prompts, zero-variance groups dropped, follow-up passes
  until the batch is full. Their MoPPS runs train on the B selected groups as they are
  (filter_groups off); we filter so that MoPPS trains on the same batches as DS and GRESO
  and only the responses spent differ.
- Defaults are their code's and their math runs': Beta(1, 1) prior, target 0.5, λ = 1 (no
  forgetting), k = 16; their countdown and geometry runs use λ = 0.5 and k = 8. Not carried
  over: the optional prior from an offline evaluation (bandit_init), and the "threshold" rule
  of one ablation (θ̂ in [0.3, 0.7], topped up by distance to that range).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import special

from greso_jax.selection.base import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_NONE, PassConfig,
                                      StrategySettings, check_prompt_ids)
from greso_jax.selection.dynamic_sampling import DynamicSamplingSelector
from greso_jax.selection.registry import register_strategy
from greso_jax.core.specs import FLOAT, Spec, field

_THOMPSON_STREAM = 3  # counter_rng stream id of the Thompson draws (GRESO's keep draws are 1, AERO's 2)
_REFERENCE_STREAM = 4  # seeds the per-step sample of prompts τ is estimated from, on large data sets
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


@register_strategy("mopps")
class MoppsSelector(DynamicSamplingSelector):
    """Per-prompt decayed Beta posteriors (two float32 arrays, 8 bytes per prompt) and Thompson-sampled keep decisions.

    A candidate is kept when its draw θ̂ ~ Beta(α, β) lies within τ of target_rate, τ being the
    1/candidate_ratio quantile of that distance over the population's draws for the step
    (computed once per step and epoch). Passes are sized as Dynamic Sampling's adaptive ones.
    """

    Settings = MoppsSettings

    def __init__(self, num_prompts: int, *, prior_alpha: float = 1.0, prior_beta: float = 1.0, decay: float = 1.0,
                 target_rate: float = 0.5, candidate_ratio: float = 16.0, seed: int = 0, group_size: int = 8,
                 pass_config: PassConfig | None = None):
        super().__init__(num_prompts, group_size=group_size, pass_config=pass_config, seed=seed)
        settings = MoppsSettings(prior_alpha=prior_alpha, prior_beta=prior_beta, decay=decay,
                                 target_rate=target_rate, candidate_ratio=candidate_ratio).checked("selection.mopps")
        self.prior_alpha = float(settings.prior_alpha)
        self.prior_beta = float(settings.prior_beta)
        self.decay = float(settings.decay)
        self.target_rate = float(settings.target_rate)
        self.candidate_ratio = float(settings.candidate_ratio)
        # Decayed counts of correct / incorrect responses per prompt: the evidence beyond the prior.
        self.successes = np.zeros(self.num_prompts, dtype=np.float32)
        self.failures = np.zeros(self.num_prompts, dtype=np.float32)
        self._tolerance_cache: tuple[tuple[int, int], float] | None = None  # ((step, epoch), τ)

    def posterior(self, prompt_ids) -> tuple[np.ndarray, np.ndarray]:
        """(α, β) of each prompt's Beta posterior, float64 [N] each."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.posterior")
        return (self.prior_alpha + self.successes[ids].astype(np.float64),
                self.prior_beta + self.failures[ids].astype(np.float64))

    def thompson_draws(self, prompt_ids, epochs=None) -> np.ndarray:
        """θ̂ ~ Beta(α, β) per occurrence, float64 [N]: the inverse CDF of a uniform keyed by
        (seed, step, prompt id, epoch); `epochs` int [N] (None: the step's epoch)."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.thompson_draws")
        uniforms = self.occurrence_uniforms(ids, epochs, _THOMPSON_STREAM)
        alpha, beta = self.posterior(ids)
        return special.betaincinv(alpha, beta, uniforms)

    def tolerance(self) -> float:
        """τ of the current step: the ceil(M / candidate_ratio)-th smallest |θ̂ − target_rate| over the
        draws of M reference prompts (all prompts, or REFERENCE_PROMPTS of them drawn per step)."""
        key = (self.step, self.epoch)
        if self._tolerance_cache is None or self._tolerance_cache[0] != key:
            if self.num_prompts <= REFERENCE_PROMPTS:
                reference = np.arange(self.num_prompts)
            else:
                rng = np.random.default_rng([self.seed, _REFERENCE_STREAM, self.step])
                reference = rng.choice(self.num_prompts, REFERENCE_PROMPTS, replace=False)
            distance = np.abs(self.thompson_draws(reference) - self.target_rate)
            rank = math.ceil(reference.size / self.candidate_ratio) - 1
            self._tolerance_cache = (key, float(np.partition(distance, rank)[rank]))
        return self._tolerance_cache[1]

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "mopps.should_keep")
        return np.abs(self.thompson_draws(ids, epochs) - self.target_rate) <= self.tolerance()

    def end_step(self) -> dict[str, float]:
        metrics = super().end_step()
        metrics["selection/mopps_tolerance"] = self.tolerance()
        return metrics

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        # A prompt without evidence was skipped by the luck of its draw from the prior, not predicted
        # either way; one with evidence counts on the side its posterior mean is.
        alpha, beta = self.posterior(ids)
        kinds = np.where(alpha / (alpha + beta) > 0.5, OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT)
        return np.where(self.successes[ids] + self.failures[ids] > 0, kinds, OUTCOME_NONE)

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        correct = num_correct.astype(np.float32)
        incorrect = (num_samples - num_correct).astype(np.float32)
        decay = np.float32(self.decay)
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
