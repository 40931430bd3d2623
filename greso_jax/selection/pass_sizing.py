"""Adaptive pass size of Dynamic Sampling, GRESO and the oracle (docs/design.md, "Vanilla and Dynamic Sampling")."""

from __future__ import annotations

import math
from fractions import Fraction

PASS_MARGIN = 1.25  # over-provision each follow-up pass so one more pass usually fills the batch


def next_pass_size(*, remaining: int, pass_groups: int, pass_zero_variance: int, min_pass_size: int,
                   max_pass_size: int, margin: float = PASS_MARGIN) -> int:
    """Prompts to pull for the next pass of a step.

    remaining: prompts with variance still needed; pass_groups / pass_zero_variance: groups
    rolled out in the last pass and how many of them had zero variance. Returns
    clamp(ceil(remaining / (1 − zv) · margin), min_pass_size, max_pass_size) with
    zv = pass_zero_variance / pass_groups, computed in exact rational arithmetic so a
    float rounding never adds a prompt. zv == 1 (nothing usable: the estimate is
    unbounded) and an empty last pass give max_pass_size; remaining <= 0 gives 0.
    """
    if min_pass_size < 1 or max_pass_size < min_pass_size:
        raise ValueError(f"next_pass_size: need 1 <= min_pass_size <= max_pass_size, got "
                         f"{min_pass_size}, {max_pass_size}")
    if not 0 <= pass_zero_variance <= pass_groups:
        raise ValueError(f"next_pass_size: pass_zero_variance {pass_zero_variance} must be in "
                         f"[0, pass_groups={pass_groups}]")
    if remaining <= 0:
        return 0
    usable = pass_groups - pass_zero_variance
    if usable == 0:
        return max_pass_size
    estimate = math.ceil(Fraction(remaining) * pass_groups / usable * Fraction(margin))
    return min(max(estimate, min_pass_size), max_pass_size)
