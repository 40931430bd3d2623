"""Adaptive pass size: the estimate with the 1.25 margin, exact arithmetic, the zv = 1 guard, the clamps."""

import math

import pytest

from greso_jax.selection import next_pass_size


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
