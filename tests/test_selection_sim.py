"""The selection simulator (greso_jax.selection.sim) on a small population: the strategies' order holds."""

import dataclasses

import numpy as np
import pytest

from greso_jax.selection import OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED
from greso_jax.selection import sim


@pytest.fixture(scope="module")
def results():
    settings = sim.SimSettings(num_prompts=2000, steps=60, train_batch_size=32, rollout_batch_size=48,
                               min_pass_size=8, seed=1)
    return sim.all_runs(settings)


def test_greso_fewer_responses_than_ds_for_the_same_effective_prompts(results):
    ds, greso = results["dynamic_sampling"], results["greso"]
    assert ds["effective_prompts"] == greso["effective_prompts"] == 60 * 32
    assert ds["full_batch_fraction"] == greso["full_batch_fraction"] == 1.0
    assert greso["responses"] < 0.9 * ds["responses"]
    assert 0 < sim.efficiency(ds["responses"], greso["responses"], results["oracle"]["responses"]) < 1


def test_oracle_bounds_every_strategy(results):
    oracle = results["oracle"]
    assert oracle["effective_prompts"] == 60 * 32 and oracle["responses_per_effective"] == pytest.approx(8.0, rel=0.02)
    for name, r in results.items():
        assert oracle["responses_per_effective"] <= r["responses_per_effective"] + 1e-9, name


def test_vanilla_trains_on_zero_variance_groups(results):
    vanilla = results["vanilla"]
    assert vanilla["responses"] == 60 * 32 * 8 and vanilla["mean_effective_batch"] < 32


def test_latent_population_drifts_as_documented():
    population = sim.LatentPopulation(10_000, 100, seed=0)
    start, end = population.success(np.arange(10_000), 0), population.success(np.arange(10_000), 100)
    assert 0.15 < np.mean(start > 0.97) < 0.35  # "solved" from the start (and some strong learners)
    assert 0.15 < np.mean(end < 0.02) < 0.3  # "never"
    rises, falls = np.mean(end - start > 0.3), np.mean(start - end > 0.3)
    assert rises > 0.2 and falls > 0.05  # learnable / late prompts rise, regressing prompts fall


def test_simulated_rollouts_are_counter_based_and_the_oracle_foresees_them():
    population = sim.LatentPopulation(500, 50, seed=0)
    rollouts = sim.BernoulliRollouts(population, seed=0)
    rollouts.begin_step(7)
    ids = np.arange(0, 500, 3)
    predicted = rollouts.outcome(8)(7, ids)
    correct = rollouts(ids, [None] * ids.size, 8).correct
    actual = np.where(correct.all(1), OUTCOME_ALL_CORRECT, np.where(~correct.any(1), OUTCOME_ALL_INCORRECT,
                                                                     OUTCOME_MIXED))
    np.testing.assert_array_equal(predicted, actual)
    again = sim.BernoulliRollouts(population, seed=0)
    again.begin_step(7)
    np.testing.assert_array_equal(again(ids[::-1], [None] * ids.size, 8).correct, correct[::-1])


def test_fixed_ds_pays_more_than_adaptive_ds_and_greso_holds_p_through_epoch_zero(results):
    fixed, adaptive = results["ds_fixed"], results["dynamic_sampling"]
    assert fixed["effective_prompts"] == adaptive["effective_prompts"] == 60 * 32
    assert fixed["responses"] > adaptive["responses"] and fixed["surplus_groups"] > adaptive["surplus_groups"]
    greso = results["greso"]
    assert greso["epochs"] >= 1 and greso["knobs_epoch_1"] == {"p_easy": 0.5, "p_hard": 0.5}
    assert results["vanilla"]["surplus_groups"] == results["aero"]["surplus_groups"] == 0


def test_skip_precision_and_coverage(results):
    # The oracle skips exactly the prompts whose group would be zero-variance and trains every informative one it meets.
    assert results["oracle"]["skip_precision"] == pytest.approx(1.0, abs=0.01)
    for name in ("greso", "mopps", "posterior"):
        assert 0.3 < results[name]["skip_precision"] <= 1.0
        assert 0 < results[name]["coverage"] <= 1.0
    assert np.isnan(results["dynamic_sampling"]["skip_precision"])  # never skips
    # DS trains every informative group it rolls out, except its surplus.
    ds = results["dynamic_sampling"]
    assert ds["coverage"] == pytest.approx(ds["effective_prompts"] / (ds["effective_prompts"] + ds["surplus_groups"]))


def test_calibration_bins_hold_every_prediction():
    predicted = np.array([0.0, 0.05, 0.15, 0.95, 1.0])
    rows = sim.calibration_bins(predicted, np.array([False, True, False, True, True]))
    assert [(r["low"], r["groups"]) for r in rows] == [(0.0, 2), (0.1, 1), (0.9, 2)]
    assert rows[0]["predicted"] == pytest.approx(0.025) and rows[0]["observed"] == 0.5
    assert rows[2]["observed"] == 1.0


def test_a_selector_that_knows_p_is_calibrated_and_the_posterior_is_reported(results):
    """known_rate predicts from the true success rates, so in every well-filled bin the zero-variance
    share matches its mean prediction up to sampling noise; GRESO's prediction is a score, not a chance, so it
    has no table; the oracle and the strategies that predict nothing have none either."""
    known = results["known_rate"]["calibration"]
    assert sum(r["groups"] for r in known) > 5000
    for row in known:
        if row["groups"] >= 400:
            assert abs(row["observed"] - row["predicted"]) < 4 * np.sqrt(0.25 / row["groups"]) + 0.01, row
    assert results["posterior"]["calibration"] and results["mopps"]["calibration"]
    assert results["greso"]["calibration"] == [] and results["greso"]["predicts"]
    for name in ("vanilla", "dynamic_sampling", "ds_fixed", "aero", "oracle"):
        assert not results[name]["predicts"] and results[name]["calibration"] == []


def test_a_small_pool_is_re_rolled_within_a_step_unless_once_per_step():
    settings = sim.SimSettings(num_prompts=300, steps=30, train_batch_size=32, rollout_batch_size=48,
                               min_pass_size=8, seed=1)
    cycled = sim.run_strategy("greso", settings)
    assert cycled["repeated_groups"] > 0  # GRESO skips most of the pool and meets its kept prompts again
    once = sim.run_strategy("greso", dataclasses.replace(settings, once_per_step=True))
    assert once["repeated_groups"] == 0


def test_levels_are_observable_difficulty_bins_not_the_latent_class():
    population = sim.LatentPopulation(5000, 200, seed=0)
    level, kind = population.level, population.kind
    assert set(level.tolist()) == set(range(5)) and np.bincount(level).min() >= 900  # quantile bins
    start = population.success(np.arange(5000), 0)
    means = [start[level == k].mean() for k in range(5)]
    assert means == sorted(means)  # a level says how hard its prompts start out ...
    for k in range(5):  # ... not which class they are: every level mixes classes, and rates vary within it
        assert np.bincount(kind[level == k], minlength=5).max() < 0.9 * np.count_nonzero(level == k)
        assert population.start[level == k].std() > 0.5  # in logits
    # The never and late classes start alike, so they share levels.
    never, late = kind == list(sim.CLASS_FRACTIONS).index("never"), kind == list(sim.CLASS_FRACTIONS).index("late")
    assert np.bincount(level[never], minlength=5).argmax() == np.bincount(level[late], minlength=5).argmax()


def test_the_sizing_grid_runs_every_selector_with_every_sizer_it_can_use():
    settings = sim.SimSettings(num_prompts=400, steps=12, train_batch_size=16, rollout_batch_size=24,
                               min_pass_size=4, seed=1)
    grid = sim.sizing_grid(settings)
    assert {"ds_fixed", "oracle", "greso@observed_rate", "posterior@predicted", "known_rate@exact"} <= set(grid)
    assert "greso@predicted" not in grid and not any(k.startswith(("vanilla@", "aero@")) for k in grid)
    assert grid["posterior@predicted"]["own_sizing"] and not grid["posterior@observed_rate"]["own_sizing"]
    table = sim.sizing_table(grid)
    assert set(table) == {"dynamic_sampling", "greso", "mopps", "posterior", "known_rate"}
    assert table["dynamic_sampling"]["fixed"][0] == 0.0  # the baseline itself
    assert all(vs_known == pytest.approx(1.0) for _, vs_known in table["known_rate"].values())
    assert all(vs_oracle < 1 for row in table.values() for vs_oracle, _ in row.values())


def test_mopps_as_its_authors_run_it_trains_one_unfiltered_batch_per_step():
    settings = sim.SimSettings(num_prompts=400, steps=12, train_batch_size=16, rollout_batch_size=24,
                               min_pass_size=4, seed=1)
    authors = sim.run_strategy("mopps_authors", settings)
    assert authors["responses"] == 12 * 16 * 8 and authors["mean_passes"] == 1.0
    assert authors["mean_batch"] == 16 and authors["mean_effective_batch"] < 16  # zero-variance groups trained
