"""Posterior selector: a decayed Beta-binomial posterior of each prompt's success rate predicts whether
its next group is zero-variance; predicted ones are skipped, behind a threshold tuned toward a target.

The parts, and why (the measurements behind each choice: docs/design.md, "Posterior"):
- Evidence: decayed counts of correct and incorrect responses per prompt (`decay` at each
  rollout of it, `step_decay` at every step), so a prompt the policy moved on from is re-learnt,
  and one skipped for long drifts back to its prior; it is re-tried once that prior's own chance
  of zero variance is under the threshold in force (a U-shaped pool's is above it: there re-tries
  come from `explore` and the supply floor).
- Prior: fitted to the pool's evidence (empirical Bayes, each prompt once), since real prompt
  sets are U-shaped and a uniform prior cannot say so; per data level (`level_prior`) once a
  level has `_MIN_PRIOR_PROMPTS` prompts with evidence; its effective sample size is one that decay
  does not shrink. An unseen prompt is judged only by its own level's prior when that prior's
  zero-variance chance is one-sided (a mastered or hopeless level, not a U-shaped mix), else kept
  (`_kept_unjudged` says why).
- Prediction: E[p^G + (1-p)^G] under the posterior; kept with probability 1 below the threshold
  in force, else `explore`. Draws are counter-based, as GRESO's.
- Threshold: moved by `threshold_step` toward `target_zero_variance` of the groups the prediction
  kept (exploration left out), only after steps whose prompts mostly had evidence; never below
  the supply floor that keeps `min_keep_share` of the pool, which bounds how narrow the kept set
  gets where zero variance is hard to predict.
- Passes: by default (`pass_sizing="predicted"`) sized from the prediction (`prompts_to_pull`: the
  keep-weighted informative rate, calibrated by observed over predicted), the unseen prompts of the
  first epoch counted first; any other sizer of `selection.pass_sizing` can replace it.
  Zero-variance groups are dropped after rollout, as Dynamic Sampling does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from greso_jax.core.specs import BOOL, FLOAT, ConfigError, Spec, field
from greso_jax.selection.base import OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, check_prompt_ids, level_indices
from greso_jax.selection.beta import zero_variance_chance, zero_variance_sides
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.pass_sizing import sizing_field
from greso_jax.selection.registry import register_strategy
from greso_jax.selection.settings import StrategySettings
from greso_jax.selection.strategies.dynamic_sampling import FilteringSelector

_UNIT = Spec(FLOAT, 0, 1)
_CALIBRATION_MEMORY = 0.8  # weight of earlier passes in the running observed / predicted ratio
_MIN_PRIOR_PROMPTS = 32  # prompts with evidence before a fitted prior replaces the configured one
_MIXED_SIDE_SHARE = 0.1  # a level prior with more of its zero-variance chance on its lesser side keeps unseen prompts


@dataclasses.dataclass(frozen=True)
class PosteriorSettings(StrategySettings):
    """`selection.posterior.*`: the posterior, the skip rule, its threshold and pass sizing."""

    fit_prior: bool = field(True, Spec(BOOL), "fit the Beta prior to the pool: the success fractions of every "
                            "prompt with evidence, each once (empirical Bayes); False: Beta(prior_alpha, prior_beta)")
    prior_alpha: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior pseudo-count of correct responses "
                               "(before the fit, or without it)")
    prior_beta: float = field(1.0, Spec(FLOAT, 0, low_open=True), "Beta prior pseudo-count of incorrect responses")
    decay: float = field(0.7, _UNIT, "weight a prompt's earlier evidence keeps at each new rollout of it "
                         "(1: never forget)")
    step_decay: float = field(0.995, _UNIT, "weight all evidence keeps at each training step, rolled out or not "
                              "(1: only rollouts forget)")
    explore: float = field(0.005, _UNIT, "keep probability of a prompt predicted zero-variance (re-exploration)")
    threshold: float = field(0.5, _UNIT, "initial skip threshold on the predicted chance of a zero-variance group")
    threshold_step: float = field(0.02, _UNIT, "change of the threshold after a step toward the target")
    threshold_min: float = field(0.05, _UNIT, "lower clamp of the threshold")
    target_zero_variance: float = field(0.15, _UNIT, "zero-variance ratio of rolled-out groups the threshold "
                                        "aims at")
    min_keep_share: float = field(0.2, _UNIT, "the threshold in force keeps at least this share of the pool "
                                  "(a floor on its predicted chances' quantile); 0: no floor")
    level_prior: bool = field(True, Spec(BOOL), "prompts whose data gives a level (the arithmetic pools' "
                              "difficulty, data.level_field) use a prior fitted to their level's prompts once "
                              "it has enough")
    pass_margin: float = field(1.05, Spec(FLOAT, 1), "over-provisioning of a rate-sized pass (predicted, "
                               "observed_rate) over its estimated need")
    max_pass_factor: float = field(4.0, Spec(FLOAT, 1), "largest rate-sized pass, in multiples of train_batch_size")
    pass_sizing: str = sizing_field("predicted", predicts=True)  # its own: from the prediction (prompts_to_pull)

    def check_relations(self, prefix: str) -> None:
        if not self.threshold_min <= self.threshold:
            raise ConfigError(f"{prefix}.threshold: {self.threshold} is below {prefix}.threshold_min "
                              f"{self.threshold_min}")


@register_strategy("posterior")
class PosteriorSelector(FilteringSelector):
    """Skips prompts whose decayed Beta posterior predicts a zero-variance group (module docstring)."""

    Settings = PosteriorSettings
    extras = ("prompt_levels",)
    knobs = ("threshold", "calibration")

    def __init__(self, num_prompts: int, *, prompt_levels=None, **common):
        """prompt_levels: the data's level per prompt (int [num_prompts], -1 none; None: no levels)."""
        super().__init__(num_prompts, **common)
        # Level index per prompt: 0 = no level, l + 1 = data level l.
        self.level_index = level_indices(prompt_levels, self.num_prompts, "posterior")
        self.num_levels = int(self.level_index.max()) + 1
        self.threshold = float(self.settings.threshold)
        self.calibration = 1.0  # running observed / predicted informative groups
        self.correct = np.zeros(self.num_prompts, np.float32)  # decayed evidence
        self.incorrect = np.zeros(self.num_prompts, np.float32)
        # Sum of the squared weights of each prompt's evidence: (correct + incorrect)^2 / this is its
        # effective number of responses, which decay does not shrink (the prior fit's binomial noise).
        self.evidence_square_weight = np.zeros(self.num_prompts, np.float32)
        self.step_informed = 0  # rolled-out groups whose prompt had evidence before the rollout
        self._prior = self.fitted_prior()
        self._supply_threshold = 0.0  # the floor min_keep_share puts under the threshold this step

    # -- prediction ----------------------------------------------------------------------------

    def begin_step(self, step: int, *, epoch: int = 0) -> None:
        super().begin_step(step, epoch=epoch)
        if self.settings.step_decay < 1:
            self.correct *= np.float32(self.settings.step_decay)
            self.incorrect *= np.float32(self.settings.step_decay)
            self.evidence_square_weight *= np.float32(self.settings.step_decay) ** 2
        self._prior = self.fitted_prior()  # fixed for the step, as the threshold: decisions do not change mid-step
        self._supply_threshold = self.supply_threshold()

    def supply_threshold(self) -> float:
        """The lowest threshold under which `min_keep_share` of the pool is kept (the prompts kept
        whatever their chance, unseen ones, count toward it); 0 with no floor or when those suffice."""
        ids = np.arange(self.num_prompts)
        judged = ~self._kept_unjudged(ids)
        needed = math.ceil(self.settings.min_keep_share * self.num_prompts) - int(np.count_nonzero(~judged))
        if needed <= 0:
            return 0.0
        chances = np.sort(self.zero_variance_chances(ids[judged]))
        return float(np.nextafter(chances[min(needed, chances.size) - 1], np.inf))

    def threshold_in_force(self) -> float:
        """The skip threshold this step's decisions use: the adapted one, or the supply floor above it."""
        return max(self.threshold, self._supply_threshold)

    def prior(self, prompt_ids=None) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta) of the Beta prior in force this step: per prompt of `prompt_ids` (float64 [N]
        each), or, without ids, per level index ([num_levels]; index 0: the whole population)."""
        alpha, beta, _ = self._prior
        if prompt_ids is None:
            return alpha, beta
        levels = self.level_index[prompt_ids]
        return alpha[levels], beta[levels]

    def fitted_prior(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(alpha, beta, own) per level index ([num_levels] each): index 0 fitted to the evidence of
        every prompt, each level's to its own prompts' once enough have evidence (own True), else
        the population's; the configured prior until then or with fit_prior off."""
        s = self.settings
        alpha = np.full(self.num_levels, s.prior_alpha, np.float64)
        beta = np.full(self.num_levels, s.prior_beta, np.float64)
        own = np.zeros(self.num_levels, bool)
        if not s.fit_prior:
            return alpha, beta, own
        for level, moments in enumerate(self.pool_moments()):
            fitted = _fit_beta(moments) if level == 0 or s.level_prior else None
            if fitted is not None:
                alpha[level], beta[level] = fitted
                own[level] = level > 0
            elif level > 0:
                alpha[level], beta[level] = alpha[0], beta[0]
        return alpha, beta, own

    def pool_moments(self) -> np.ndarray:
        """float64 [num_levels, 4]: per level index (0: every prompt), over the prompts with evidence,
        (count, sum of success fractions, sum of their squares, sum of 1 / effective evidence size).

        A success fraction of weighted responses has the binomial noise of (sum w)^2 / sum w^2 responses:
        decay weighs the evidence, it does not make its fraction noisier, so the fit does not widen as
        the evidence ages."""
        size = self.correct.astype(np.float64) + self.incorrect
        seen = size > 0
        fraction = self.correct[seen] / size[seen]
        effective = np.square(size[seen]) / np.maximum(self.evidence_square_weight[seen], 1e-30)
        terms = np.stack([np.ones_like(fraction), fraction, np.square(fraction), 1.0 / effective], axis=1)
        moments = np.zeros((self.num_levels, 4), np.float64)
        moments[0] = terms.sum(axis=0)
        if self.num_levels > 1:
            levels = self.level_index[seen]
            for column in range(4):
                moments[1:, column] = np.bincount(levels, terms[:, column], self.num_levels)[1:]
        return moments

    def zero_variance_chances(self, prompt_ids) -> np.ndarray:
        """Predicted chance that each prompt's next group is zero-variance, float64 [N]."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "posterior.zero_variance_chances")
        alpha, beta = self.prior(ids)
        return zero_variance_chance(alpha + self.correct[ids], beta + self.incorrect[ids], self.group_size)

    def predicted_zero_variance(self, prompt_ids) -> np.ndarray:
        return self.zero_variance_chances(prompt_ids)

    def admission_order(self, prompt_ids) -> np.ndarray:
        """Stream rollouts: the likeliest informative prompts (lowest zero-variance chance) enter first."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "posterior.admission_order")
        return np.argsort(self.zero_variance_chances(ids), kind="stable")

    def keep_probabilities(self, prompt_ids) -> np.ndarray:
        """Keep probability per prompt, float64 [N]: 1 below the threshold or without evidence (unless its
        level's prior predicts zero variance), else `explore`."""
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "posterior.keep_probabilities")
        return self._keep_given(ids, self.zero_variance_chances(ids))

    def _keep_given(self, ids: np.ndarray, chances: np.ndarray) -> np.ndarray:
        """The keep rule from already computed chances (float64 [N] each)."""
        return np.where((chances < self.threshold_in_force()) | self._kept_unjudged(ids), 1.0, self.settings.explore)

    def _kept_unjudged(self, ids: np.ndarray) -> np.ndarray:
        """bool [N]: kept whatever the prediction says. An unseen prompt is judged only by a prior of
        its own level, never by the population's, and only by one whose zero-variance chance is one-sided
        (at least 1 - _MIXED_SIDE_SHARE of it all correct, or all incorrect: a mastered or a hopeless level).
        A level whose chance splits between the two (a U-shaped prior, as a coarse level such as a data
        source has) says its prompts are easy or hard, not which one an unseen prompt is: only its first
        rollout tells, and skipping it on the level's base rate would leave the level's informative
        prompts unfound."""
        alpha, beta, own = self._prior
        sides = zero_variance_sides(alpha, beta, self.group_size)
        judges = own & (sides.min(axis=0) < _MIXED_SIDE_SHARE * sides.sum(axis=0))
        return ~self.has_evidence(ids) & ~judges[self.level_index[ids]]

    def has_evidence(self, ids: np.ndarray) -> np.ndarray:
        """bool [N]: the prompt has been rolled out (its prediction is its own, not only a prior's)."""
        return (self.correct[ids] + self.incorrect[ids]) > 0

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "posterior.should_keep")
        return self.occurrence_uniforms(ids, epochs, Stream.POSTERIOR_KEEP) < self.keep_probabilities(ids)

    def prompts_to_pull(self, wanted: float) -> float:
        """Expected kept prompts the stream must yield for `wanted` informative groups (calibrated).

        The stream yields prompts in a random order, so the kept ones ahead are, in expectation, the
        keep-weighted pool. In the first epoch they are not: every prompt with evidence has already
        been met, and the stream yields the unseen ones until the epoch ends, so those are counted
        first and the whole pool only for what they cannot supply."""
        ids = np.arange(self.num_prompts)
        chances = self.zero_variance_chances(ids)
        keep = self._keep_given(ids, chances)  # every pass sizes from all prompts: compute the chances once
        informative = keep * (1.0 - chances) * self.calibration
        prompts = 0.0
        if self.epoch == 0:
            ahead = ~self.has_evidence(ids)
            supply = float(np.sum(informative[ahead]))
            if supply >= wanted:
                return wanted * float(np.sum(keep[ahead])) / supply
            prompts, wanted = float(np.sum(keep[ahead])), wanted - supply
        rate = float(np.clip(np.sum(informative) / max(np.sum(keep), 1e-12), 1e-3, 1.0))
        return prompts + wanted / rate

    # -- history -------------------------------------------------------------------------------

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        alpha, beta = self.prior(ids)
        mean = (alpha + self.correct[ids]) / (alpha + beta + self.correct[ids] + self.incorrect[ids])
        return np.where(mean > 0.5, OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT)

    def _update_history(self, ids, num_correct, num_samples, easy, hard) -> None:
        # Calibration: what the posterior predicted for these groups against what they were.
        chances = self.zero_variance_chances(ids)
        # The evidence is unchanged since the keep decision, so this is what the prediction said then.
        seen = self.has_evidence(ids)
        predicted_kept = seen & (chances < self.threshold_in_force())
        self.step_informed += int(seen.sum())
        self.step_predicted_kept += int(predicted_kept.sum())
        self.step_predicted_kept_zero_variance += int(np.count_nonzero(predicted_kept & (easy | hard)))
        predicted = float(np.sum(1.0 - chances))
        observed = float(np.count_nonzero(~(easy | hard)))
        if predicted > 0:
            m = _CALIBRATION_MEMORY
            self.calibration = m * self.calibration + (1 - m) * observed / predicted
        decay = np.float32(self.settings.decay)
        for row, prompt in enumerate(ids):  # in rollout order: a prompt may appear twice in one call
            self.correct[prompt] = decay * self.correct[prompt] + num_correct[row]
            self.incorrect[prompt] = decay * self.incorrect[prompt] + (num_samples[row] - num_correct[row])
            # Each new response weighs 1: the squares of the new weights add num_samples.
            self.evidence_square_weight[prompt] = decay ** 2 * self.evidence_square_weight[prompt] + num_samples[row]

    def _reset_step_tallies(self) -> None:
        super()._reset_step_tallies()
        self.step_informed = 0
        self.step_predicted_kept = self.step_predicted_kept_zero_variance = 0

    def _adapt(self) -> None:
        if self.step_predicted_kept == 0 or 2 * self.step_informed < self.step_groups:
            return
        ratio = self.step_predicted_kept_zero_variance / self.step_predicted_kept
        move = -self.settings.threshold_step if ratio > self.settings.target_zero_variance \
            else self.settings.threshold_step
        if move < 0 and self._supply_threshold >= self.threshold:
            return  # the supply floor decides: winding the threshold down under it would only wind it up
        self.threshold = min(max(self.threshold + move, self.settings.threshold_min), 1.0)

    def end_step(self) -> dict[str, float]:
        in_force, supply = self.threshold_in_force(), self._supply_threshold  # before _adapt moves the threshold
        kept, kept_zero_variance = self.step_predicted_kept, self.step_predicted_kept_zero_variance
        metrics = super().end_step()
        # Why the step kept what it kept: the threshold its decisions used and the floor under it, and
        # how the groups the prediction kept (not exploration, not unseen prompts) turned out.
        metrics.update({self.metric_name("threshold_in_force"): in_force,
                        self.metric_name("supply_threshold"): supply,
                        self.metric_name("predicted_kept"): float(kept),
                        self.metric_name("predicted_kept_zero_variance"): float(kept_zero_variance)})
        return metrics

    def _history_state(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "calibration": self.calibration, "step_informed": self.step_informed,
                "step_predicted_kept": self.step_predicted_kept,
                "step_predicted_kept_zero_variance": self.step_predicted_kept_zero_variance,
                "correct": self.correct.copy(), "incorrect": self.incorrect.copy(),
                "evidence_square_weight": self.evidence_square_weight.copy()}

    def _load_history_state(self, state: dict[str, Any]) -> None:
        for name in ("correct", "incorrect", "evidence_square_weight"):
            setattr(self, name, self._loaded_prompt_array(state, name, np.float32, counts=True))
        self._prior = self.fitted_prior()  # begin_step computed it from the same evidence
        self.threshold = float(state["threshold"])
        self._supply_threshold = self.supply_threshold()  # from the restored evidence, as begin_step did
        self.calibration = float(state["calibration"])
        self.step_informed = int(state["step_informed"])
        self.step_predicted_kept = int(state["step_predicted_kept"])
        self.step_predicted_kept_zero_variance = int(state["step_predicted_kept_zero_variance"])


def _fit_beta(moments: np.ndarray) -> tuple[float, float] | None:
    """The Beta whose beta-binomial matches `pool_moments` of one level (prompts, sum of success
    fractions, sum of their squares, sum of 1 / evidence size); None before `_MIN_PRIOR_PROMPTS` prompts."""
    prompts, total, squares, inverse_sizes = moments
    if prompts < _MIN_PRIOR_PROMPTS:
        return None
    mean = min(max(total / prompts, 1e-3), 1 - 1e-3)
    variance = max(squares / prompts - mean ** 2, 0.0)
    noise = min(inverse_sizes / prompts, 0.5)  # the binomial share 1/n, averaged over unequal sizes
    # Beta-binomial: Var(k/n) = m(1-m)(1/n + (1 - 1/n) rho) with rho = 1 / (alpha + beta + 1).
    rho = min(max((variance / (mean * (1 - mean)) - noise) / (1 - noise), 1e-3), 0.999)
    strength = 1 / rho - 1
    return mean * strength, (1 - mean) * strength
