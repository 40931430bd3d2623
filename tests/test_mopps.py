"""MoPPS selector: decayed posteriors against hand computations, keyed Thompson keep decisions, state, config, simulator."""

import math

import numpy as np
import pytest

from greso_jax.config import get_config, selection_field_docs, validate
from greso_jax.selection import OUTCOME_NONE, MoppsSelector, make_selector
from greso_jax.selection import sim
from greso_jax.selection.strategies import mopps
from greso_jax.core.specs import ConfigError


def test_decayed_posterior_matches_hand_computation():
    s = MoppsSelector(4, prior_alpha=2.0, prior_beta=3.0, decay=0.5)
    s.observe_counts([0], [3], [4])
    s.observe_counts([0, 1], [1, 6], [4, 6])  # groups of different sizes in one call
    alpha, beta = s.posterior([0, 1, 2])
    # prompt 0: S = 0.5 * 3 + 1 = 2.5, F = 0.5 * 1 + 3 = 3.5; prompt 1: one group; prompt 2: the prior.
    np.testing.assert_allclose(alpha, [4.5, 8.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(beta, [6.5, 3.0, 3.0], rtol=1e-6)
    assert s.successes.dtype == s.failures.dtype == np.float32


def test_update_is_the_authors_recursion_around_the_prior():
    """alpha <- decay * alpha + (1 - decay) * prior_alpha + correct, and the same for beta, group by group."""
    prior_alpha, prior_beta, decay = 1.5, 0.5, 0.7
    s = MoppsSelector(1, prior_alpha=prior_alpha, prior_beta=prior_beta, decay=decay)
    alpha, beta = prior_alpha, prior_beta
    for correct, samples in [(8, 8), (0, 8), (5, 8), (2, 4), (16, 16)]:
        s.observe_counts([0], [correct], [samples])
        alpha = decay * alpha + (1 - decay) * prior_alpha + correct
        beta = decay * beta + (1 - decay) * prior_beta + samples - correct
    np.testing.assert_allclose(np.concatenate(s.posterior([0])), [alpha, beta], rtol=1e-6)


def test_repeated_prompt_in_one_call_decays_in_rollout_order():
    once, twice = MoppsSelector(2, decay=0.5), MoppsSelector(2, decay=0.5)
    once.observe_counts([0, 1, 0], [4, 1, 0], [4, 4, 4])
    for ids, correct in (([0, 1], [4, 1]), ([0], [0])):
        twice.observe_counts(ids, correct, [4] * len(ids))
    np.testing.assert_array_equal(once.successes, twice.successes)
    np.testing.assert_array_equal(once.failures, twice.failures)
    assert (once.successes[0], once.failures[0]) == (2.0, 4.0)


def test_keep_decisions_are_keyed_by_seed_step_id_and_epoch_not_by_batch():
    ids = np.arange(400)
    a, b = MoppsSelector(400, candidate_ratio=4.0, seed=3), MoppsSelector(400, candidate_ratio=4.0, seed=3)
    a.observe_counts(ids, ids % 9, np.full(400, 8))
    b.observe_counts(ids, ids % 9, np.full(400, 8))
    a.begin_step(5, epoch=1)
    b.begin_step(5, epoch=1)
    keep = a.should_keep(ids)
    order = np.random.default_rng(0).permutation(400)
    np.testing.assert_array_equal(b.should_keep(ids[order]), keep[order])
    np.testing.assert_array_equal(b.should_keep(ids[:7]), keep[:7])
    np.testing.assert_array_equal(a.should_keep(ids, np.full(400, 1)), keep)  # epochs=None is the step's epoch
    assert not np.array_equal(a.should_keep(ids, np.full(400, 2)), keep)  # the next epoch draws again
    b.begin_step(6, epoch=1)
    assert not np.array_equal(b.should_keep(ids), keep)
    other_seed = MoppsSelector(400, candidate_ratio=4.0, seed=4)
    other_seed.observe_counts(ids, ids % 9, np.full(400, 8))
    other_seed.begin_step(5, epoch=1)
    assert not np.array_equal(other_seed.should_keep(ids), keep)


def test_the_population_cut_keeps_one_in_candidate_ratio():
    s = MoppsSelector(1000, candidate_ratio=8.0)
    s.observe_counts(np.arange(600), np.arange(600) % 9, np.full(600, 8))
    for step in range(3):
        s.begin_step(step, epoch=step)
        assert s.should_keep(np.arange(1000)).sum() == math.ceil(1000 / 8)
    every = MoppsSelector(50, candidate_ratio=1.0)
    every.observe_counts(np.arange(25), np.full(25, 8), np.full(25, 8))
    assert every.should_keep(np.arange(50)).all()


def test_large_data_sets_estimate_the_cut_from_a_sample(monkeypatch):
    monkeypatch.setattr(mopps, "REFERENCE_PROMPTS", 512)
    s = MoppsSelector(20_000, candidate_ratio=4.0, seed=1)
    kept = s.should_keep(np.arange(20_000)).mean()
    assert kept == pytest.approx(0.25, abs=0.04)
    np.testing.assert_array_equal(MoppsSelector(20_000, candidate_ratio=4.0, seed=1).should_keep(np.arange(50)),
                                  s.should_keep(np.arange(50)))


def test_confident_easy_and_hard_prompts_are_kept_far_less_than_prompts_near_the_target():
    s = MoppsSelector(400, candidate_ratio=16.0)
    easy, hard, near = np.arange(100), np.arange(100, 200), np.arange(200, 300)  # 300..399: never rolled out
    for _ in range(5):
        s.observe_counts(easy, np.full(100, 8), np.full(100, 8))
        s.observe_counts(hard, np.zeros(100, np.int64), np.full(100, 8))
        s.observe_counts(near, np.full(100, 4), np.full(100, 8))
    kept = np.zeros(400)
    for step in range(40):
        s.begin_step(step)
        kept += s.should_keep(np.arange(400))
    rate = kept / 40
    assert rate[near].mean() > 0.15
    assert rate[easy].mean() < 0.01 and rate[hard].mean() < 0.01
    assert rate[near].mean() > 2 * rate[300:].mean() > 0  # unseen prompts draw uniformly: still explored


def test_skipped_prompts_are_easy_or_hard_by_posterior_mean():
    s = MoppsSelector(5)
    s.observe_counts([0, 1, 2], [7, 1, 4], [8, 8, 8])
    s.begin_step(0)
    s.record_skipped([0, 1, 2, 3, 0])  # 2: mean exactly 1/2 -> hard; 3: never rolled out -> neither
    assert (s.step_skipped_easy, s.step_skipped_hard) == (2, 2)
    assert s.skip_kinds([3])[0] == OUTCOME_NONE


def test_state_round_trip_restores_posteriors_and_decisions():
    s = MoppsSelector(300, decay=0.8, candidate_ratio=5.0, seed=2)
    s.begin_step(3, epoch=1)
    s.observe_counts(np.arange(0, 300, 2), np.arange(150) % 9, np.full(150, 8))
    s.end_step()
    state = s.state_dict()
    restored = MoppsSelector(300, decay=0.8, candidate_ratio=5.0, seed=2)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.successes, s.successes)
    np.testing.assert_array_equal(restored.failures, s.failures)
    for selector in (s, restored):
        selector.begin_step(4, epoch=1)
    np.testing.assert_array_equal(restored.should_keep(np.arange(300)), s.should_keep(np.arange(300)))
    bad = {**state, "failures": -np.ones(300, np.float32)}
    with pytest.raises(ValueError, match="mopps.load_state_dict: failures"):
        restored.load_state_dict(bad)
    with pytest.raises(ValueError, match="mopps.load_state_dict: successes"):
        restored.load_state_dict({**state, "successes": np.zeros(299, np.float32)})


@pytest.mark.parametrize("field, value", [("prior_alpha", 0.0), ("prior_beta", -1.0), ("decay", 1.5),
                                          ("target_rate", -0.1), ("candidate_ratio", 0.5), ("decay", "0.5")])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"^selection[.]mopps[.]{field}:"):
        make_selector("mopps", num_prompts=10, group_size=8, seed=0, settings={field: value})
    config = get_config()
    config.selection.strategy = "mopps"
    with config.selection.mopps.ignore_type():
        config.selection.mopps[field] = value
    with pytest.raises(ConfigError, match=rf"^selection[.]mopps[.]{field}:"):
        validate(config)


def test_config_section_validates_and_builds_the_selector():
    config = get_config()
    config.selection.strategy = "mopps"
    config.selection.mopps.update(decay=0.5, candidate_ratio=8)
    validate(config)
    selector = make_selector("mopps", num_prompts=10, group_size=8, seed=0, settings=config.selection.mopps)
    assert (selector.settings.decay, selector.settings.candidate_ratio) == (0.5, 8)
    assert "selection.mopps.target_rate" in [name for name, _, _ in selection_field_docs()]


def test_runs_through_the_step_driver_in_the_simulator():
    settings = sim.SimSettings(num_prompts=500, steps=30, train_batch_size=16, rollout_batch_size=24,
                               min_pass_size=4, seed=2)
    mopps_run, ds = sim.run_strategy("mopps", settings), sim.run_strategy("dynamic_sampling", settings)
    assert mopps_run["effective_prompts"] == ds["effective_prompts"] == 30 * 16
    assert mopps_run["full_batch_fraction"] == 1.0
    assert mopps_run["responses"] < ds["responses"]
