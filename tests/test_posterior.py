"""The posterior selector: Beta-binomial prediction of zero-variance groups, the keep rule, its
threshold, pass sizing from the prediction, state; its known-rate bound."""

import numpy as np
import pytest

from greso_jax.config import ConfigError, get_config, validate
from greso_jax.selection import make_selector, run_selection_step
from greso_jax.selection import zero_variance_chance


def _selector(**settings):
    return make_selector("posterior", num_prompts=10, group_size=4, seed=0, settings=settings)


def test_zero_variance_chance_matches_the_beta_moments():
    # Uniform prior, G=4: E[p^4] = 1/5 twice.
    assert zero_variance_chance(np.array([1.0]), np.array([1.0]), 4)[0] == pytest.approx(0.4)
    rng = np.random.default_rng(0)
    p = rng.beta(7.0, 2.0, 400_000)
    assert zero_variance_chance(np.array([7.0]), np.array([2.0]), 8)[0] == pytest.approx(
        np.mean(p ** 8 + (1 - p) ** 8), abs=2e-3)


def test_evidence_decays_at_each_new_rollout_of_the_prompt():
    selector = _selector(decay=0.5)
    selector.begin_step(1)
    selector.observe_counts(np.array([3]), np.array([4]), np.array([4]))
    selector.observe_counts(np.array([3]), np.array([1]), np.array([4]))
    assert (selector.correct[3], selector.incorrect[3]) == (0.5 * 4 + 1, 0.5 * 0 + 3)
    assert selector.correct.sum() == 3.0  # only prompt 3 has evidence


def test_keep_rule_skips_predicted_zero_variance_prompts_except_for_exploration():
    selector = _selector(threshold=0.3, explore=0.0)
    selector.begin_step(1)
    selector.observe_counts(np.array([0, 1, 2]), np.array([4, 0, 2]), np.array([4, 4, 4]))
    chances = selector.zero_variance_chances(np.arange(4))
    assert chances[0] > 0.3 and chances[1] > 0.3 and chances[2] < 0.3 and chances[3] == pytest.approx(0.4)
    np.testing.assert_array_equal(selector.keep_probabilities(np.arange(3)), [0.0, 0.0, 1.0])
    selector.begin_step(2, epoch=1)
    keep = selector.should_keep(np.array([0, 1, 2]))
    np.testing.assert_array_equal(keep, [False, False, True])
    # Decisions are keyed by (seed, step, id, epoch): the same in any order and batch.
    explorer = _selector(threshold=0.3, explore=0.5)
    explorer.load_state_dict(selector.state_dict())
    explorer.begin_step(5, epoch=1)
    ids = np.arange(10)
    forward = explorer.should_keep(ids)
    np.testing.assert_array_equal(explorer.should_keep(ids[::-1])[::-1], forward)


def test_threshold_moves_toward_the_target_only_once_prompts_have_history():
    selector = _selector(threshold=0.5, threshold_step=0.1, target_zero_variance=0.2, decay=0.5)
    selector.begin_step(1)
    selector.observe_counts(np.arange(4), np.full(4, 2), np.full(4, 4))  # no history yet
    selector.end_step()
    assert selector.threshold == 0.5
    selector.begin_step(2)  # all four were predicted informative; three are zero-variance: skip more
    selector.observe_counts(np.arange(4), np.array([4, 4, 0, 2]), np.full(4, 4))
    selector.end_step()
    assert selector.threshold == pytest.approx(0.4)
    selector.begin_step(3)
    selector.observe_counts(np.arange(4), np.array([1, 2, 3, 2]), np.full(4, 4))  # none: loosen
    metrics = selector.end_step()
    assert selector.threshold == pytest.approx(0.5) and metrics["selection/posterior/threshold"] == pytest.approx(0.5)


def test_groups_kept_by_exploration_do_not_move_the_threshold():
    selector = _selector(threshold=0.3, threshold_step=0.1, target_zero_variance=0.2)
    selector.begin_step(1)
    selector.observe_counts(np.arange(2), np.array([4, 0]), np.full(2, 4))
    selector.end_step()
    assert (selector.zero_variance_chances(np.arange(2)) >= 0.3).all()  # both now predicted zero-variance
    selector.begin_step(2)  # explored again and zero-variance again: says nothing about the threshold
    selector.observe_counts(np.arange(2), np.array([4, 0]), np.full(2, 4))
    selector.end_step()
    assert selector.threshold == 0.3


def test_passes_are_sized_from_the_predicted_informative_rate():
    selector = make_selector("posterior", num_prompts=100, group_size=4, seed=0,
                             settings={"pass_margin": 1.0, "threshold": 0.9})
    selector.begin_step(1)
    assert selector.first_pass(20).pull == 34  # unseen prompts: 1 - 0.4 informative -> 20 / 0.6
    selector.observe_counts(np.arange(100), np.full(100, 2), np.full(100, 4))  # everything mixed
    assert selector.first_pass(20).pull < 34
    assert make_selector("posterior", num_prompts=100, group_size=4, seed=0,
                         settings={"max_pass_factor": 1.0}).first_pass(20).pull == 20


def test_in_the_first_epoch_passes_are_sized_from_the_prompts_not_yet_met():
    # 100 of 200 prompts rolled out (all mixed: predicted informative); the other 100 unseen, at the
    # uniform prior's 1 - 2/9 = 7/9. In epoch 0 the stream yields the unseen ones next.
    selector = make_selector("posterior", num_prompts=200, group_size=8, seed=0,
                             settings={"fit_prior": False, "step_decay": 1.0, "threshold": 0.9})
    selector.begin_step(1, epoch=0)
    selector.observe_counts(np.arange(100), np.full(100, 4), np.full(100, 8))
    selector.end_step()
    calibration = selector.calibration
    seen = 1.0 - selector.zero_variance_chances(np.array([0]))[0]
    unseen = 7 / 9
    selector.begin_step(2, epoch=0)
    assert selector.prompts_to_pull(70) == pytest.approx(70 / (unseen * calibration))
    # More than the unseen prompts can supply: all of them, then the rest at the whole pool's rate.
    supply = 100 * unseen * calibration
    pool_rate = (seen + unseen) / 2 * calibration
    assert selector.prompts_to_pull(120) == pytest.approx(100 + (120 - supply) / pool_rate)
    selector.end_step()
    selector.begin_step(3, epoch=1)  # a new shuffle: every prompt may come next
    assert selector.prompts_to_pull(70) == pytest.approx(70 / pool_rate)


def test_a_step_through_the_driver_and_a_state_round_trip():
    selector = make_selector("posterior", num_prompts=50, group_size=4, seed=1)
    rng = np.random.default_rng(0)
    success = rng.uniform(0, 1, 50)
    order = iter(np.tile(np.arange(50), 20))

    def pull(n):
        from greso_jax.selection import PulledPrompts
        ids = np.array([next(order) for _ in range(n)])
        keep = selector.should_keep(ids)
        return PulledPrompts(ids[keep], [None] * int(keep.sum()), ids[~keep])

    def rollout(ids, payloads, g):
        from greso_jax.selection import ScoredPass
        correct = rng.uniform(size=(ids.size, g)) < success[ids][:, None]
        return ScoredPass(correct=correct, rewards=correct.astype(np.float32), handle=None)

    for step in range(1, 6):
        result = run_selection_step(selector, step, pull_prompts=pull, rollout=rollout, train_batch_size=8)
        assert all(g.has_variance for g in result.groups)
    restored = make_selector("posterior", num_prompts=50, group_size=4, seed=1)
    restored.load_state_dict(selector.state_dict())
    np.testing.assert_array_equal(restored.correct, selector.correct)
    assert (restored.threshold, restored.calibration) == (selector.threshold, selector.calibration)


def test_settings_are_checked_naming_the_field():
    with pytest.raises(ConfigError, match="selection.posterior.decay"):
        _selector(decay=1.5)
    with pytest.raises(ConfigError, match="selection.posterior.step_decay"):
        _selector(step_decay=-0.1)
    with pytest.raises(ConfigError, match="selection.posterior.threshold"):
        _selector(threshold=0.01, threshold_min=0.05)


def test_the_prior_is_fitted_to_a_u_shaped_population_and_unseen_prompts_are_kept():
    selector = make_selector("posterior", num_prompts=200, group_size=8, seed=0, settings={"threshold": 0.7})
    selector.begin_step(1)
    # 100 prompts: 45 always solved, 45 never, 10 half the time: a U-shaped population.
    selector.observe_counts(np.arange(100), np.array([8] * 45 + [0] * 45 + [4] * 10), np.full(100, 8))
    selector.end_step()
    selector.begin_step(2)
    (alpha,), (beta,) = selector.prior()  # one level index: the whole population
    assert alpha + beta < 1.0 and alpha == pytest.approx(beta, rel=0.05)  # U-shaped: mass at 0 and 1
    chances = selector.zero_variance_chances(np.array([0, 50, 95]))
    assert chances[0] > 0.85 and chances[1] > 0.85 and chances[2] < 0.2
    # With the uniform prior one all-correct group would predict only ~0.53.
    uniform = make_selector("posterior", num_prompts=200, group_size=8, seed=0, settings={"fit_prior": False})
    uniform.observe_counts(np.array([0]), np.array([8]), np.array([8]))
    assert uniform.zero_variance_chances(np.array([0]))[0] == pytest.approx(0.5294, abs=1e-3)
    np.testing.assert_array_equal(selector.keep_probabilities(np.array([0, 95, 150])), [0.005, 1.0, 1.0])


def _levelled(level_prior=True):
    """200 prompts: ids 0-99 of level 0, 100-199 of level 1; level 0 always solved, level 1 half the time."""
    levels = np.repeat([0, 1], 100)
    selector = make_selector("posterior", num_prompts=200, group_size=8, seed=0, prompt_levels=levels,
                             settings={"threshold": 0.5, "level_prior": level_prior})
    selector.begin_step(1)
    selector.observe_counts(np.r_[0:50, 100:150], np.array([8] * 50 + [4] * 50), np.full(100, 8))
    selector.end_step()
    selector.begin_step(2)
    return selector


def test_unseen_prompts_borrow_their_levels_prior():
    selector = _levelled()
    alpha, beta = selector.prior(np.array([60, 160]))
    assert alpha[0] / (alpha[0] + beta[0]) > 0.95 and abs(alpha[1] / (alpha[1] + beta[1]) - 0.5) < 0.05
    # Unseen prompt 60 is of a mastered level: predicted all-correct, skipped but for exploration;
    # unseen prompt 160 is of a half-solved level: kept.
    np.testing.assert_array_equal(selector.keep_probabilities(np.array([60, 160])), [0.005, 1.0])
    chances = selector.zero_variance_chances(np.array([60, 160]))
    assert chances[0] > 0.8 and chances[1] < 0.1
    # Without level priors every unseen prompt is kept and shares the population's prior.
    flat = _levelled(level_prior=False)
    np.testing.assert_array_equal(flat.keep_probabilities(np.array([60, 160])), [1.0, 1.0])
    assert flat.zero_variance_chances(np.array([60]))[0] == pytest.approx(flat.zero_variance_chances(
        np.array([160]))[0])


def test_level_priors_survive_a_checkpoint_and_bad_levels_are_refused():
    selector = _levelled()
    state = selector.state_dict()
    restored = make_selector("posterior", num_prompts=200, group_size=8, seed=0, prompt_levels=np.repeat([0, 1], 100),
                             settings={"threshold": 0.5})
    restored.load_state_dict(state)
    ids = np.arange(200)
    np.testing.assert_array_equal(restored.keep_probabilities(ids), selector.keep_probabilities(ids))
    np.testing.assert_array_equal(np.stack(restored.prior()), np.stack(selector.prior()))
    with pytest.raises(ValueError, match="prompt_levels"):
        make_selector("posterior", num_prompts=200, group_size=8, seed=0, prompt_levels=np.zeros(5, int))


def test_the_prior_is_fitted_to_the_pool_not_to_the_prompts_it_keeps_rolling_out():
    # 200 prompts: 90 solved and 90 never solved, seen once; then only the 20 informative ones are rolled out,
    # step after step, as a selector that skips the others would. The pool is still U-shaped.
    selector = make_selector("posterior", num_prompts=200, group_size=8, seed=0, settings={"step_decay": 1.0})
    selector.begin_step(1)
    selector.observe_counts(np.arange(180), np.array([8] * 90 + [0] * 90), np.full(180, 8))
    selector.end_step()
    for step in range(2, 12):
        selector.begin_step(step)
        selector.observe_counts(np.arange(180, 200), np.full(20, 4), np.full(20, 8))
        selector.end_step()
    selector.begin_step(12)
    (alpha,), (beta,) = selector.prior()
    assert alpha + beta < 0.5  # fitted to the rolled-out groups it would be near Beta(inf, inf) at 1/2
    assert selector.zero_variance_chances(np.array([0]))[0] > 0.85


def test_step_decay_ages_every_prompts_evidence_toward_the_prior():
    selector = make_selector("posterior", num_prompts=4, group_size=8, seed=0, settings={"step_decay": 0.5})
    selector.begin_step(1)
    selector.observe_counts(np.array([0, 1]), np.array([8, 3]), np.array([8, 8]))
    selector.end_step()
    np.testing.assert_array_equal(selector.correct, [8, 3, 0, 0])
    selector.begin_step(2)  # nothing rolled out: the evidence still halves
    np.testing.assert_array_equal(selector.correct, [4, 1.5, 0, 0])
    np.testing.assert_array_equal(selector.incorrect, [0, 2.5, 0, 0])
    kept = make_selector("posterior", num_prompts=4, group_size=8, seed=0, settings={"step_decay": 1.0})
    kept.begin_step(1)
    kept.observe_counts(np.array([0, 1]), np.array([8, 3]), np.array([8, 8]))
    kept.begin_step(2)
    np.testing.assert_array_equal(kept.correct, [8, 3, 0, 0])


def test_known_rate_is_the_posterior_rule_on_the_true_rates_and_only_for_the_simulator():
    rates = np.linspace(0.0, 1.0, 11)
    selector = make_selector("known_rate", num_prompts=11, group_size=4, seed=0, settings={"threshold": 0.3},
                             success=lambda step, ids: rates[ids])
    selector.begin_step(1)
    ids = np.arange(11)
    chances = selector.zero_variance_chances(ids)
    np.testing.assert_allclose(chances, rates ** 4 + (1 - rates) ** 4)
    # No history needed and no exploration by default: kept exactly where the true chance is below 0.3.
    np.testing.assert_array_equal(selector.keep_probabilities(ids), (chances < 0.3).astype(float))
    with pytest.raises(ValueError, match="success"):
        make_selector("known_rate", num_prompts=11, group_size=4, seed=0)
    config = get_config()
    assert "known_rate" not in config.selection and "oracle" not in config.selection
    config.selection.strategy = "known_rate"
    with pytest.raises(ConfigError, match="simulation-only"):
        validate(config)


def test_the_supply_floor_keeps_a_share_of_the_pool_and_stops_the_threshold_winding_down():
    def observed(min_keep_share):
        selector = make_selector("posterior", num_prompts=100, group_size=8, seed=0, settings={
            "threshold": 0.3, "threshold_min": 0.05, "min_keep_share": min_keep_share})
        selector.begin_step(1)
        # 10 prompts half solved, 20 solved 7 times in 8, 70 always solved.
        selector.observe_counts(np.arange(100), np.array([4] * 10 + [7] * 20 + [8] * 70), np.full(100, 8))
        selector.end_step()
        selector.begin_step(2)
        return selector

    ids = np.arange(100)
    assert np.count_nonzero(observed(0.0).keep_probabilities(ids) == 1.0) == 10  # no floor: the 4/8 ones only
    selector = observed(0.3)
    keep = selector.keep_probabilities(ids)
    np.testing.assert_array_equal(np.flatnonzero(keep == 1.0), np.arange(30))  # the 30 least predictable
    assert selector.threshold_in_force() > selector.threshold == 0.3
    # The kept 7/8 prompts are often all-correct, far above the target: the threshold would move down,
    # but the floor is what decides, so it stays (no windup below the floor).
    selector.observe_counts(np.arange(30), np.array([4] * 10 + [8] * 20), np.full(30, 8))
    in_force = selector.threshold_in_force()
    metrics = selector.end_step()
    assert selector.threshold == 0.3
    assert metrics["selection/posterior/threshold_in_force"] == in_force
    assert metrics["selection/posterior/supply_threshold"] == in_force  # the floor is what was in force
    assert metrics["selection/posterior/predicted_kept"] == 30
    assert metrics["selection/posterior/predicted_kept_zero_variance"] == 20
    restored = make_selector("posterior", num_prompts=100, group_size=8, seed=0, settings={
        "threshold": 0.3, "threshold_min": 0.05, "min_keep_share": 0.3})
    restored.load_state_dict(selector.state_dict())
    selector.begin_step(3)
    restored.begin_step(3)
    np.testing.assert_array_equal(restored.keep_probabilities(ids), selector.keep_probabilities(ids))


@pytest.mark.parametrize("aged_steps", [0, 140, 280])
def test_the_fitted_prior_does_not_widen_as_the_evidence_ages(aged_steps):
    """A Beta(0.15, 0.15) pool, one group of 8 each, aged by step_decay: decay weighs the evidence but does not
    make a success fraction noisier, so the fit stays near the truth (it went to Beta(0.32, 0.32) by 280 steps
    when the decayed counts were taken as the binomial sample size)."""
    rng = np.random.default_rng(0)
    num_prompts = 20_000
    rates = rng.beta(0.15, 0.15, num_prompts)
    selector = make_selector("posterior", num_prompts=num_prompts, group_size=8, seed=0)
    selector.begin_step(0)
    selector.observe_counts(np.arange(num_prompts), rng.binomial(8, rates), np.full(num_prompts, 8))
    for step in range(1, aged_steps + 2):
        selector.begin_step(step)  # each step multiplies the evidence by step_decay (0.995)
    assert selector.correct.sum() + selector.incorrect.sum() == pytest.approx(
        8 * num_prompts * 0.995 ** (aged_steps + 1), rel=1e-3)
    (alpha,), (beta,) = selector.prior()
    assert alpha == pytest.approx(0.15, abs=0.02) and beta == pytest.approx(0.15, abs=0.02)


def test_a_u_shaped_level_keeps_its_unseen_prompts_a_one_sided_one_judges_them():
    """A coarse level (a data source mixing solved and unsolved prompts) has a U-shaped prior whose chance of
    zero variance is above the threshold; its unseen prompts are still tried, since only their first rollout
    tells which side they are on. A mastered level's unseen prompts are skipped but for exploration."""
    levels = np.repeat([0, 1], 100)
    selector = make_selector("posterior", num_prompts=200, group_size=8, seed=0, prompt_levels=levels,
                             settings={"threshold": 0.5})
    selector.begin_step(1)
    # Level 0 mixes 25 always-solved and 25 never-solved prompts; level 1's 50 seen prompts are all solved.
    selector.observe_counts(np.r_[0:50, 100:150], np.array([8] * 25 + [0] * 25 + [8] * 50), np.full(100, 8))
    selector.end_step()
    selector.begin_step(2)
    assert selector.zero_variance_chances(np.array([60]))[0] > 0.9  # the mixed level's base rate
    np.testing.assert_array_equal(selector.keep_probabilities(np.array([60, 160])), [1.0, 0.005])
