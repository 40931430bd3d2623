"""AERO pieces (our reading of the paper): rescue rounds, selective rejection, Beta-posterior baselines, state."""

import math

import numpy as np
import pytest

from greso_jax.rl.advantages import compute_advantages
from greso_jax.selection import AeroSelector
from greso_jax.selection.strategies.aero import posterior_baseline, rejection_mask, rescue_widths


def test_rescue_widths_spend_the_budget_exactly():
    assert rescue_widths(4, 4, 16) == [4, 4, 4]
    assert rescue_widths(4, 3, 12) == [3, 3, 2]
    assert rescue_widths(4, 8, 6) == [2]
    assert rescue_widths(5, 4, 6) == [1]


def test_rejection_keeps_all_correct_and_k_times_as_many_incorrect_lowest_draws():
    correct = np.array([True, False, False, False, True, False])
    draws = np.array([0.9, 0.7, 0.1, 0.5, 0.0, 0.3])
    assert rejection_mask(correct, draws, 1.0).tolist() == [True, False, True, False, True, True]
    assert rejection_mask(correct, draws, 0.5).tolist() == [True, False, True, False, True, False]
    assert rejection_mask(correct, draws, 0.0).tolist() == [True, False, False, False, True, False]
    assert rejection_mask(correct, draws, 10.0).all()
    # 0.1 * 30 is 3.0000000000000004 in floats: it must keep 3, not 4.
    many = np.array([True] * 30 + [False] * 10)
    assert rejection_mask(many, np.linspace(0, 1, 40), 0.1).sum() == 33


def test_posterior_baseline_values():
    assert posterior_baseline(4, 0, 1.0, 1.0) == pytest.approx((5 / 6, math.sqrt(5 / 36)))
    assert posterior_baseline(0, 12, 1.0, 1.0) == pytest.approx((1 / 14, math.sqrt(13) / 14))
    assert posterior_baseline(0, 0, 2.0, 6.0) == pytest.approx((0.25, math.sqrt(0.1875)))


def test_curate_strata():
    s = AeroSelector(4, n_explore=4, n_extra=4, max_group_size=12, reject_k=1.0, seed=1)
    s.begin_step(3)
    s.observe_counts([0, 1, 2, 3], [4, 0, 2, 1], [4, 12, 4, 4])
    mask, _, base, scale = s.curate(0, np.ones(4, bool), np.ones(4, np.float32))  # all correct: posterior
    assert mask.all() and (base, scale) == pytest.approx((5 / 6, math.sqrt(5 / 36)))
    mask, _, base, scale = s.curate(1, np.zeros(12, bool), np.zeros(12, np.float32))  # rescue failed: posterior
    assert mask.all() and base == pytest.approx(1 / 14)
    half = np.array([True, True, False, False])
    mask, _, base, scale = s.curate(2, half, half.astype(np.float32))  # u = 0.5: kept as generated
    assert mask.all() and math.isnan(base) and math.isnan(scale)
    low = np.array([False, True, False, False])
    mask, _, base, scale = s.curate(3, low, low.astype(np.float32))  # u = 0.25: 1 correct + 1 incorrect
    assert mask[1] and mask.sum() == 2 and math.isnan(base)
    again = s.curate(3, low, low.astype(np.float32)).loss_mask
    np.testing.assert_array_equal(mask, again)  # keyed by (seed, step, prompt): deterministic
    metrics = s.end_step()
    assert metrics["selection/aero/posterior_groups"] == 2
    assert metrics["selection/aero/rejected_responses"] == 2 + 2  # two incorrect responses left out, twice


def test_rejection_draws_depend_on_seed():
    low = np.array([True] + [False] * 11)
    masks = set()
    for seed in range(8):
        s = AeroSelector(1, n_explore=4, max_group_size=16, seed=seed)
        s.observe_counts([0], [1], [12])
        masks.add(tuple(s.curate(0, low, low.astype(np.float32))[0]))
    assert len(masks) > 1


def test_posterior_accumulates_across_steps_and_survives_state_round_trip():
    s = AeroSelector(3, n_explore=2, max_group_size=4)
    for step in range(3):
        s.begin_step(step)
        s.observe_counts([0, 0, 2], [2, 1, 0], [2, 4, 4])
        s.end_step()
    assert (s.successes.tolist(), s.failures.tolist()) == ([9, 0, 0], [9, 0, 12])
    restored = AeroSelector(3, n_explore=2, max_group_size=4)
    restored.load_state_dict({k: np.asarray(v) for k, v in s.state_dict().items()})
    np.testing.assert_array_equal(restored.successes, s.successes)
    np.testing.assert_array_equal(restored.failures, s.failures)
    assert restored.step == 2


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="selection.aero.n_explore"):
        AeroSelector(3, n_explore=8, max_group_size=8)
    with pytest.raises(ValueError, match="selection.aero.n_explore"):
        AeroSelector(3, group_size=3)  # half the budget of 3 is one response: no success rate
    with pytest.raises(ValueError, match="selection.aero.reject_below"):
        AeroSelector(3, reject_below=0.0)
    with pytest.raises(ValueError, match="selection.aero.prior_alpha"):
        AeroSelector(3, prior_alpha=0.0)


def test_wrong_but_formatted_group_is_not_reinforced():
    """A fresh prompt whose 16 responses are all wrong but boxed (shaped reward 0.1 each): the posterior
    counts correctness, the group's rewards become 0, and every advantage is negative."""
    s = AeroSelector(1, n_explore=8, max_group_size=16)
    s.begin_step(1)
    correct = np.zeros(16, bool)
    s.observe_counts([0], [0], [16])
    mask, rewards, base, scale = s.curate(0, correct, np.full(16, 0.1, np.float32))
    assert mask.all() and rewards.tolist() == [0.0] * 16 and base == pytest.approx(1 / 18)
    advantages = compute_advantages(rewards[None], "grpo", baseline=np.array([base]), scale=np.array([scale]))
    assert (advantages < 0).all()


def test_budget_defaults_to_the_group_size_and_stage_one_to_half():
    s = AeroSelector(2, group_size=8)
    assert (s.n_explore, s.max_group_size, s.rescue_widths()) == (4, 8, [2, 2])  # the method's small increments
    s = AeroSelector(2, group_size=8, max_group_size=16)  # a larger budget is allowed and reported
    assert (s.n_explore, s.max_group_size) == (8, 16)
    s.begin_step(0)
    assert s.end_step()["selection/aero/max_group_size"] == 16


def test_rejection_follows_the_stage_one_stratum():
    """A group rescued from 0 of 4 to 1 correct of 8 is the rescue stratum: it trains on all 8 responses."""
    s = AeroSelector(1, n_explore=4, max_group_size=8, seed=2)
    s.begin_step(0)
    rescued = np.array([False] * 4 + [True, False, False, False])
    s.observe_counts([0], [1], [8])
    mask, rewards, base, _ = s.curate(0, rescued, rescued.astype(np.float32))
    assert mask.all() and math.isnan(base) and rewards.tolist() == rescued.astype(np.float32).tolist()


def test_posterior_choices_are_fields():
    s = AeroSelector(1, n_explore=2, max_group_size=4, posterior_from="group", posterior_responses=2)
    s.begin_step(0)
    s.observe_counts([0], [0], [40])  # a long history of failures, ignored with posterior_from="group"
    mask, _, base, _ = s.curate(0, np.ones(4, bool), np.ones(4, np.float32))
    assert base == pytest.approx(5 / 6) and mask.sum() == 2
    with pytest.raises(ValueError, match="selection.aero.posterior_from"):
        AeroSelector(1, posterior_from="prior")
