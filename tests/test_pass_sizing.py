"""Pass sizing: the adaptive estimate (1.25 margin, exact arithmetic, the zv = 1 guard, the clamps) and the
sizers as a component (registry, each strategy's default, the field that picks one, NAME@SIZER, state)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from greso_jax.config import get_config, validate
from greso_jax.core.specs import ConfigError
from greso_jax.selection import PassConfig, make_selector, next_pass_size, variant
from greso_jax.selection.pass_sizing import SIZERS, make_sizer
from greso_jax.selection.registry import sizing_choices


def size(remaining, groups, zero_variance, min_pass=4, max_pass=96):
    return next_pass_size(remaining=remaining, pass_groups=groups, pass_zero_variance=zero_variance,
                          min_pass_size=min_pass, max_pass_size=max_pass)


def test_estimate_uses_usable_fraction_and_margin():
    assert size(10, 20, 10) == 25  # 10 / (1 - 0.5) * 1.25
    assert size(12, 16, 4) == 20  # 12 / 0.75 * 1.25
    assert size(7, 10, 3) == 13  # ceil(12.5)
    assert size(30, 40, 0) == 38  # no zero variance: still the 1.25 margin, ceil(37.5)


def test_estimate_is_exact_where_floats_round_up():
    # 1 / (1 - 7/12) * 1.25 is exactly 3, but in floats it is 3.0000000000000004 and ceil gives 4.
    assert math.ceil(1 / (1 - 7 / 12) * 1.25) == 4
    assert size(1, 12, 7, min_pass=1) == 3


def test_all_zero_variance_guard_gives_the_largest_pass():
    assert size(5, 8, 8) == 96
    assert size(5, 0, 0) == 96  # an empty last pass tells nothing either


def test_clamped_to_min_and_max():
    assert size(1, 20, 0, min_pass=8) == 8
    assert size(80, 20, 19, max_pass=96) == 96


def test_nothing_remaining_gives_zero():
    assert size(0, 10, 3) == 0
    assert size(-2, 10, 3) == 0


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="pass_zero_variance"):
        size(5, 4, 5)
    with pytest.raises(ValueError, match="min_pass_size"):
        size(5, 4, 1, min_pass=10, max_pass=8)


# -- the sizers as a component ---------------------------------------------------------------

PASSES = PassConfig(rollout_batch_size=24, min_pass_size=4)
SIMULATOR = {"outcome": lambda step, ids: np.zeros(len(ids), np.int64),
             "success": lambda step, ids: np.full(len(ids), 0.5)}


def groups(informative, zero_variance):
    return [SimpleNamespace(has_variance=True)] * informative + [SimpleNamespace(has_variance=False)] * zero_variance


def selector(name, **settings):
    return make_selector(name, num_prompts=50, group_size=8, seed=0, passes=PASSES, settings=settings, **SIMULATOR)


def test_every_strategy_defaults_to_its_papers_sizing():
    sizers = {name: selector(name).sizer.name for name in ("vanilla", "dynamic_sampling", "greso", "mopps",
                                                          "posterior", "oracle", "known_rate", "aero")}
    assert sizers == {"vanilla": "exact", "dynamic_sampling": "adaptive", "greso": "adaptive", "mopps": "adaptive",
                      "posterior": "predicted", "oracle": "exact", "known_rate": "predicted", "aero": "exact"}
    assert selector("dynamic_sampling", **variant("ds_fixed").settings).sizer.name == "fixed"
    assert list(SIZERS) == ["fixed", "adaptive", "observed_rate", "predicted", "exact"]


def test_fixed_adaptive_and_exact_passes():
    fixed, adaptive, exact = (make_sizer(name, PASSES) for name in ("fixed", "adaptive", "exact"))
    assert [s.first(None, 16) for s in (fixed, adaptive, exact)] == [24, 24, 16]
    last = groups(10, 10)
    assert [s.follow_up(None, 6, last) for s in (fixed, adaptive, exact)] == [24, 15, 6]  # 6 / 0.5 * 1.25


def test_observed_rate_sizes_from_the_running_informative_share_with_a_margin_and_a_cap():
    sizer = make_sizer("observed_rate", PASSES)
    assert sizer.first(None, 16) == 24  # nothing seen: the shared first pass
    sizer.observe(groups(12, 12))
    assert sizer.follow_up(None, 4, []) == 9  # ceil(4 * 1.05 / 0.5)
    sizer.observe(groups(0, 24))  # decayed: (0.8 * 12 + 0) / (0.8 * 24 + 24)
    rate = 0.8 * 12 / (0.8 * 24 + 24)
    assert sizer.follow_up(None, 4, []) == int(np.ceil(4 * 1.05 / rate))
    assert sizer.first(None, 16) == 64  # 16 * 1.05 / 0.22 = 76.4, capped at 4 x train_batch_size
    sizer.observe(groups(0, 1000))
    assert sizer.follow_up(None, 1, []) == 64


def test_predicted_sizes_from_the_strategys_own_prediction():
    posterior = selector("posterior")
    assert posterior.first_pass(16).pull == min(64, int(np.ceil(posterior.prompts_to_pull(16 * 1.05))))
    with pytest.raises(NotImplementedError, match="predicts no informative rate"):
        make_sizer("predicted", PASSES).first(selector("greso"), 16)


def test_the_sizer_is_chosen_by_a_field_that_validation_checks():
    assert "predicted" not in sizing_choices("greso") and "predicted" in sizing_choices("posterior")
    assert sizing_choices("vanilla") == sizing_choices("aero") == sizing_choices("oracle") == ()
    config = get_config()
    config.selection.greso.pass_sizing = "observed_rate"
    validate(config)
    config.selection.greso.pass_sizing = "predicted"
    with pytest.raises(ConfigError, match="selection.greso.pass_sizing"):
        validate(config)


def test_name_at_sizer_is_the_variant_with_that_sizing():
    assert variant("greso@observed_rate").settings == {"pass_sizing": "observed_rate"}
    assert variant("mopps_authors@adaptive").settings == {"filter_groups": False, "pass_sizing": "adaptive"}
    assert variant("ds_fixed@exact").strategy == "dynamic_sampling"
    with pytest.raises(ValueError, match="greso sizes its passes by one of"):
        variant("greso@predicted")
    with pytest.raises(ValueError, match="not 'x'"):
        variant("vanilla@x")


def test_observed_rate_state_resumes_exactly():
    first = selector("greso", pass_sizing="observed_rate")
    first.sizer.first(first, 16)
    first.sizer.observe(groups(5, 15))
    state = first.state_dict()
    assert {"sizer_informative", "sizer_groups"} <= set(state)
    second = selector("greso", pass_sizing="observed_rate")
    second.load_state_dict(state)
    second.sizer.first(second, 16)
    assert second.follow_up_pass_size(7, []) == first.follow_up_pass_size(7, []) == 30  # ceil(7 * 1.05 / 0.25)
