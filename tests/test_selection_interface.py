"""What the tools rely on: each strategy's settings live only in its dataclass, it declares its extras and
knobs, says what it predicts through the interface, draws from the one stream table, and keeps its
checkpoint keys; the alias is resolved once, in validation."""

import dataclasses
import inspect

import numpy as np
import pytest

from greso_jax.config import get_config, validate
from greso_jax.run.build import selector_from_config
from greso_jax.selection import (ALIASES, STRATEGIES, GresoSelector, GresoSettings, Selector, Stream, baseline, bound,
                                 causal_bound,
                                 make_selector, named_variants, zero_variance_chance)
from greso_jax.selection.registry import variant

SIMULATOR = {"outcome": lambda step, ids: np.zeros(len(ids), np.int64),
             "success": lambda step, ids: np.linspace(0.1, 0.9, len(ids))}

BASE_STATE = {"last_outcome", "num_prompts", "seed", "step", "step_easy", "step_groups", "step_hard",
              "step_repeated_easy", "step_repeated_hard", "step_revisited_easy", "step_revisited_hard",
              "step_skipped_easy", "step_skipped_hard", "total_responses", "total_tokens"}
POSTERIOR_STATE = {"calibration", "correct", "evidence_square_weight", "incorrect", "step_informed",
                   "step_predicted_kept",
                   "step_predicted_kept_zero_variance", "threshold"}
STATE_KEYS = {"vanilla": set(), "dynamic_sampling": set(), "greso": {"p_easy", "p_hard", "streak"},
              "aero": {"failures", "step_posterior_groups", "step_rejected_responses", "successes"},
              "mopps": {"failures", "successes"}, "posterior": POSTERIOR_STATE, "oracle": set(),
              "known_rate": POSTERIOR_STATE}


def build(name, num_prompts=10, **settings):
    return make_selector(name, num_prompts=num_prompts, group_size=4, seed=0, settings=settings, **SIMULATOR)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_settings_defaults_live_only_in_the_dataclass(name):
    cls = STRATEGIES.get(name)
    if cls.Settings is None:
        return
    fields = {f.name for f in dataclasses.fields(cls.Settings)}
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            assert not fields & set(inspect.signature(klass.__init__).parameters), klass
    selector = build(name)
    assert selector.settings == cls.Settings()
    # No copies of the settings on the selector: only state that starts from one (GRESO's p, the posterior's
    # threshold) and AERO's budget resolved from rl.group_size (its fields' 0 means "derived").
    state = {"greso": {"p_easy", "p_hard"}, "posterior": {"threshold"}, "known_rate": {"threshold"},
             "aero": {"max_group_size", "n_explore"}}
    assert fields & set(vars(selector)) == state.get(name, set())


def test_the_design_contract_constructor_and_its_checks():
    s = GresoSelector(100, p_easy=0.4, p_hard=0.6, delta_p=0.02, target_zero_variance=0.3, p_min=0.1, p_max=0.9,
                      seed=3)
    assert (s.p_easy, s.p_hard, s.seed) == (0.4, 0.6, 3) and s.settings.delta_p == 0.02
    s.p_easy = 0.2  # mutable state, not a setting
    assert s.keep_probabilities(np.arange(3)).shape == (3,) and s.settings.p_easy == 0.4
    assert GresoSelector(10, settings=GresoSettings(p_easy=0.3)).p_easy == 0.3
    with pytest.raises(ValueError, match="selection.greso.delta_p"):
        GresoSelector(10, delta_p=2.0)
    with pytest.raises(TypeError, match="unknown setting"):
        GresoSelector(10, p_eazy=0.3)
    with pytest.raises(TypeError, match="takes no settings"):
        make_selector("vanilla", num_prompts=4, group_size=4, seed=0, settings={"x": 1})


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_checkpoint_keys_stay(name):
    assert set(build(name).state_dict()) == BASE_STATE | STATE_KEYS[name]


def test_make_selector_passes_exactly_the_declared_extras():
    levels = np.array([0, 1, 0, 1])
    posterior = make_selector("posterior", num_prompts=4, group_size=4, seed=0, prompt_levels=levels, **SIMULATOR)
    assert posterior.num_levels == 3  # no level, 0, 1
    known = make_selector("known_rate", num_prompts=4, group_size=4, seed=0, prompt_levels=levels, **SIMULATOR)
    assert known.num_levels == 1 and STRATEGIES.get("known_rate").extras == ("success",)
    make_selector("greso", num_prompts=4, group_size=4, seed=0, prompt_levels=levels, **SIMULATOR)  # takes none
    with pytest.raises(TypeError, match="no strategy takes"):
        make_selector("greso", num_prompts=4, group_size=4, seed=0, prompt_level=levels)
    with pytest.raises(ValueError, match="needs the simulator's `outcome`"):
        make_selector("oracle", num_prompts=4, group_size=4, seed=0, prompt_levels=levels)


def test_predictions_through_the_interface():
    ids = np.arange(6)
    greso = build("greso", 6)
    greso.begin_step(0)
    greso.observe(ids[:3], np.array([[True] * 4, [False] * 4, [True, False, True, True]]))
    greso.observe(ids[:1], np.ones((1, 4), bool))
    np.testing.assert_array_equal(greso.predicted_zero_variance(ids), [2, 1, 0, 0, 0, 0])
    assert not greso.prediction_is_chance
    posterior = build("posterior", 6)
    np.testing.assert_array_equal(posterior.predicted_zero_variance(ids), posterior.zero_variance_chances(ids))
    mopps = build("mopps", 6)
    mopps.begin_step(0)
    mopps.observe(ids[:2], np.array([[True] * 4, [True, False, False, False]]))
    np.testing.assert_allclose(mopps.predicted_zero_variance(ids[:2]),
                               zero_variance_chance(np.array([5.0, 2.0]), np.array([1.0, 4.0]), 4))
    p = SIMULATOR["success"](0, ids)
    np.testing.assert_allclose(build("known_rate", 6).predicted_zero_variance(ids), p ** 4 + (1 - p) ** 4)
    for name in ("vanilla", "dynamic_sampling", "aero", "oracle"):
        assert build(name, 6).predicted_zero_variance(ids) is None


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_each_strategy_logs_its_knobs_under_its_own_name(name):
    selector = build(name)
    selector.begin_step(1)
    selector.observe(np.arange(4), np.eye(4, dtype=bool))
    metrics = selector.end_step()
    own = {k for k in metrics if k.startswith(f"selection/{name}/")}
    assert {f"selection/{name}/{knob}" for knob in selector.knobs} <= own
    assert not {"selection/p_easy", "selection/p_hard"} & set(metrics)
    assert all(k.count("/") == 1 or k in own for k in metrics if k.startswith("selection/"))


def test_the_knob_metric_names():
    assert build("greso").knobs == ("p_easy", "p_hard")
    posterior = build("posterior").end_step()
    assert {f"selection/posterior/{name}" for name in (
        "threshold", "calibration", "threshold_in_force", "supply_threshold", "predicted_kept",
        "predicted_kept_zero_variance")} <= set(posterior)
    assert "selection/mopps/tolerance" in build("mopps").end_step()
    assert {"selection/aero/posterior_groups", "selection/aero/rejected_responses",
            "selection/aero/max_group_size"} <= set(build("aero").end_step())


def test_stream_ids_are_one_table_with_the_old_values():
    table = {k: v for k, v in vars(Stream).items() if k.isupper() and isinstance(v, int)}
    assert table == {"GRESO_KEEP": 1, "AERO_REJECT": 2, "MOPPS_THOMPSON": 3, "POSTERIOR_KEEP": 3,
                     "MOPPS_REFERENCE": 4, "SIM_POPULATION": 7, "SIM_SHUFFLE": 11, "SIM_LEVELS": 13,
                     "SIM_ROLLOUTS": 101}
    shared = {frozenset(pair) for pair in Stream.SHARED}
    for a, b in [(a, b) for a in table for b in table if a < b and table[a] == table[b]]:
        assert frozenset((a, b)) in shared, (a, b)


def test_the_alias_is_resolved_once_in_validation():
    assert ALIASES == {"ds": "dynamic_sampling"}
    config = get_config()
    config.selection.strategy = "ds"
    validate(config)
    assert config.selection.strategy == "dynamic_sampling"
    assert selector_from_config(config, num_prompts=5).strategy == "dynamic_sampling"
    with pytest.raises(ValueError, match="unknown selection strategy 'ds'"):
        make_selector("ds", num_prompts=4, group_size=4, seed=0)  # later pieces see registered names only


def test_the_registry_names_the_baseline_the_bound_and_the_variants():
    assert baseline().name == "ds_fixed" and baseline().strategy == "dynamic_sampling"
    assert baseline().settings == {"pass_sizing": "fixed"} and bound() == "oracle"
    assert causal_bound() == "known_rate" and STRATEGIES.get(causal_bound()).simulation_only
    assert [v.name for v in named_variants()] == ["ds_fixed", "greso_patient", "greso_fill", "greso_hard_only",
                                                  "greso_easy_only", "greso_rested", "greso_spaced", "greso_frontier",
                                                  "mopps_authors"]
    assert variant("greso").settings == {} and variant("ds_fixed") == baseline()
    fixed = build("dynamic_sampling", **variant("ds_fixed").settings)
    assert fixed.follow_up_pass_size(5, []) == fixed.pass_config.rollout_batch_size
    assert issubclass(STRATEGIES.get(bound()), Selector) and STRATEGIES.get(bound()).simulation_only
