"""Runs strategies in the simulated world through the trainer's step driver and totals what each one cost.

Every registered strategy and named variant runs through `selection.run_selection_step`, the
trainer's code path, with what it declares it takes (`extras`) from what only the simulator
knows: the next outcomes (the oracle), the true rates (known_rate), and the prompts' observable
levels (noisy difficulty bins, never the latent class). Beside the costs it measures what a skip
was worth, since the simulator knows the group
a skipped prompt would have had: skip precision, coverage and, for a strategy whose prediction
is a chance, its calibration.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from greso_jax.selection.base import OUTCOME_MIXED
from greso_jax.selection.driver import run_selection_step
from greso_jax.selection.groups import PulledPrompts, ScoredPass
from greso_jax.selection.registry import (SIZED, STRATEGIES, baseline, bound, causal_bound, default_settings,
                                          make_selector, named_variants, sizing_choices, variant)
from greso_jax.selection.settings import PassConfig
from greso_jax.selection.sim.population import BernoulliRollouts, LatentPopulation, PromptStream


@dataclasses.dataclass(frozen=True)
class SimSettings:
    num_prompts: int = 20_000
    steps: int = 200
    train_batch_size: int = 128
    group_size: int = 8
    rollout_batch_size: int = 192  # 1.5 x train_batch_size: the first pass over-provisions for filtering
    min_pass_size: int = 32
    max_passes: int = 10
    seed: int = 0
    once_per_step: bool = False  # selection.once_per_step: a prompt at most once per step


def run_strategy(name: str, settings: SimSettings, fractions: dict[str, float] | None = None,
                 levels: bool = False, **strategy_overrides) -> dict:
    """Runs `settings.steps` steps of one registered strategy or named variant; returns totals over the run.

    fractions: the population's class fractions (None: CLASS_FRACTIONS; see `calibrated_fractions`).
    levels: prompts carry their observable level (`LatentPopulation.level`: a noisy difficulty bin,
    as the arithmetic pools carry difficulty), for strategies that take levels. strategy_overrides:
    fields of the strategy's own section (e.g.
    delta_p=0.02 for GRESO), over the variant's.
    """
    run = variant(name)
    population = LatentPopulation(settings.num_prompts, settings.steps, settings.seed, fractions)
    rollouts = BernoulliRollouts(population, settings.seed)
    foresee = rollouts.outcome(settings.group_size)
    offered = {"outcome": foresee, "success": lambda step, ids: population.success(ids, step)}
    if levels:
        offered["prompt_levels"] = population.level
    selector = make_selector(
        run.strategy, num_prompts=settings.num_prompts, group_size=settings.group_size, seed=settings.seed,
        passes=PassConfig(rollout_batch_size=settings.rollout_batch_size, min_pass_size=settings.min_pass_size,
                          max_passes=settings.max_passes, once_per_step=settings.once_per_step),
        settings={**default_settings(run.strategy), **run.settings, **strategy_overrides}, **offered)
    stream = PromptStream(settings.num_prompts, settings.seed, selector.should_keep)
    predicts = selector.predicted_zero_variance(np.zeros(0, np.int64)) is not None
    # A chance predictor's predictions beside the outcomes, for rolled-out groups (observed) and skipped
    # ones (foreseen), taken when each decision was made.
    calibrate = predicts and selector.prediction_is_chance
    skipped_this_step: list[np.ndarray] = []
    predicted: list[np.ndarray] = []
    zero_variance: list[np.ndarray] = []
    skipped_predicted: list[np.ndarray] = []

    def pull(n: int) -> PulledPrompts:
        pulled = stream(n)
        skipped_this_step.append(pulled.skipped_ids)
        if calibrate:
            skipped_predicted.append(selector.predicted_zero_variance(pulled.skipped_ids))
        return pulled

    def rollout(prompt_ids, payloads, num_samples: int) -> ScoredPass:
        chances = selector.predicted_zero_variance(prompt_ids) if calibrate else None
        scored = rollouts(prompt_ids, payloads, num_samples)
        if chances is not None and num_samples == settings.group_size:
            predicted.append(chances)
            zero_variance.append(scored.correct.all(axis=1) | ~scored.correct.any(axis=1))
        return scored

    effective = full = passes = batch = surplus = repeated = 0.0
    skipped = skipped_zero_variance = skipped_informative = rolled_informative = 0
    knobs_at_epoch_1 = None  # the knobs the first step of epoch 1 starts from
    for step in range(settings.steps):
        rollouts.begin_step(step)
        epoch = stream.next_epoch
        if epoch >= 1 and knobs_at_epoch_1 is None:
            knobs_at_epoch_1 = {knob: float(getattr(selector, knob)) for knob in selector.knobs}
        skipped_this_step.clear()
        skipped_predicted.clear()
        metrics = run_selection_step(selector, step, pull_prompts=pull, rollout=rollout,
                                     train_batch_size=settings.train_batch_size, epoch=epoch).metrics
        # What the skipped prompts' groups would have been (the simulator knows): skip precision, coverage.
        ids = np.concatenate(skipped_this_step) if skipped_this_step else np.zeros(0, np.int64)
        codes = foresee(step, ids) if ids.size else np.zeros(0, np.int64)
        if calibrate and ids.size:
            predicted.append(np.concatenate(skipped_predicted))
            zero_variance.append(codes != OUTCOME_MIXED)
        skipped += ids.size
        skipped_zero_variance += int(np.count_nonzero(codes != OUTCOME_MIXED))
        skipped_informative += int(np.count_nonzero(codes == OUTCOME_MIXED))
        rolled_informative += selector.step_groups - selector.step_easy - selector.step_hard
        effective += metrics["selection/effective_prompts"]
        batch += metrics["selection/batch_groups"]
        full += metrics["selection/full_batch"]
        passes += metrics["selection/passes"]
        surplus += metrics["selection/surplus_groups"]
        repeated += metrics["selection/repeated_groups"]
    responses = metrics["rollout/num_responses"]
    return {"responses": responses, "effective_prompts": effective,
            "responses_per_effective": responses / max(effective, 1.0),
            "full_batch_fraction": full / settings.steps, "mean_passes": passes / settings.steps,
            "mean_effective_batch": effective / settings.steps, "mean_batch": batch / settings.steps,
            "surplus_groups": surplus, "repeated_groups": repeated, "epochs": stream.next_epoch,
            # Of the prompts skipped, the share whose group would have been zero-variance (the oracle: 1).
            "skip_precision": skipped_zero_variance / skipped if skipped else float("nan"),
            # Of the informative groups met (rolled out, or skipped but foreseen), the share trained on.
            "coverage": effective / max(rolled_informative + skipped_informative, 1),
            "predicts": predicts,
            "knobs_epoch_1": knobs_at_epoch_1 or {knob: float("nan") for knob in selector.knobs},
            "knobs": {knob: metrics[selector.metric_name(knob)] for knob in selector.knobs},
            "calibration": calibration_bins(np.concatenate(predicted), np.concatenate(zero_variance))
            if predicted else []}


def calibration_bins(predicted: np.ndarray, zero_variance: np.ndarray, bins: int = 10) -> list[dict[str, float]]:
    """Predicted zero-variance chance against the outcome, in `bins` equal-width bins of the
    prediction: per non-empty bin, its range, the number of groups, the mean prediction and the
    share that was zero-variance (a calibrated predictor has the two equal)."""
    predicted, zero_variance = np.asarray(predicted, np.float64), np.asarray(zero_variance, bool)
    index = np.minimum((predicted * bins).astype(np.int64), bins - 1)
    rows = []
    for b in range(bins):
        mine = index == b
        if mine.any():
            rows.append({"low": b / bins, "high": (b + 1) / bins, "groups": int(mine.sum()),
                         "predicted": float(predicted[mine].mean()), "observed": float(zero_variance[mine].mean())})
    return rows


def efficiency(baseline_cost: float, cost: float, bound_cost: float) -> float:
    """(baseline − strategy) / (baseline − bound): the share of the baseline's avoidable waste that the
    strategy avoids (the bound, the oracle, avoids all of it). Costs in responses per effective prompt
    (`responses_per_effective`: the responses ratio itself where every batch is full, and fair to a
    strategy that trains on fewer informative groups, such as MoPPS unfiltered)."""
    return (baseline_cost - cost) / (baseline_cost - bound_cost)


def sizing_grid(settings: SimSettings, fractions: dict[str, float] | None = None, levels: bool = False,
                done: dict[str, dict] | None = None) -> dict[str, dict]:
    """Every strategy that sizes its passes by a sizer, with each sizer it can use, as "<name>@<sizer>"
    (its default sizer's run reused from `done` under its plain name), beside the baseline and the bound."""
    done = dict(done or {})
    results = {}
    for name in (baseline().name, bound()):
        results[name] = done.get(name) or run_strategy(name, settings, fractions, levels)
    for name in STRATEGIES:
        for sizer in sizing_choices(name):
            own = sizer == default_settings(name)["pass_sizing"]
            key = f"{name}{SIZED}{sizer}"
            results[key] = done.get(name if own else key) or run_strategy(key, settings, fractions, levels)
            results[key]["own_sizing"] = own
    return results


def sizing_table(grid: dict[str, dict]) -> dict[str, dict[str, tuple[float, float]]]:
    """strategy -> sizer -> (efficiency vs the oracle, vs known_rate at the same sizer), from `sizing_grid`,
    both in responses per effective prompt over the baseline's."""
    cost = {name: r["responses_per_effective"] for name, r in grid.items()}
    base, limit = cost[baseline().name], cost[bound()]
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for key in grid:
        name, sized, sizer = key.partition(SIZED)
        if sized:
            reference = cost.get(f"{causal_bound()}{SIZED}{sizer}")
            table.setdefault(name, {})[sizer] = (
                efficiency(base, cost[key], limit),
                efficiency(base, cost[key], reference) if reference is not None else float("nan"))
    return table


def all_runs(settings: SimSettings, fractions: dict[str, float] | None = None,
             levels: bool = False) -> dict[str, dict]:
    """Every registered strategy with its defaults, then every named variant (e.g. ds_fixed); with
    `levels`, strategies that take levels also run without them (as "<name>:no_levels")."""
    results = {name: run_strategy(name, settings, fractions, levels) for name in STRATEGIES}
    results.update({v.name: run_strategy(v.name, settings, fractions, levels) for v in named_variants()})
    if levels:
        for name, cls in STRATEGIES.items():
            if "prompt_levels" in cls.extras:
                results[f"{name}:no_levels"] = run_strategy(name, settings, fractions)
    return results
