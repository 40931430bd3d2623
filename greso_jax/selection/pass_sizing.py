"""Pass sizers: how many prompts each rollout pass of a step pulls, a component every pass-based strategy picks.

A sizer is registered by name with `@register_sizer`; a strategy picks one by its settings field
`selection.<strategy>.pass_sizing` (`sizing_field`), each strategy's default being its paper's:
- fixed: every pass pulls selection.rollout_batch_size (the GRESO paper's DS, DAPO's generation batches);
- adaptive: the first pass pulls rollout_batch_size, follow-ups from the last pass's zero-variance
  rate with a 1.25 margin (`next_pass_size`; DS's and GRESO's own);
- observed_rate: prediction-free, from a running average of the informative share of rolled-out
  groups, with a 1.05 margin, up to 4x train_batch_size (rollout_batch_size before anything is seen);
- predicted: from the strategy's own prediction of the informative rate among the prompts it
  keeps (`Selector.prompts_to_pull`; the posterior's own), with the same margin and cap;
- exact: pulls exactly what is missing (the oracle, whose kept prompts all have variance, and a
  strategy that trains unfiltered: one pass of train_batch_size).
Comparing strategies at one sizer separates what their skip rule saves from what their sizing does
(docs/design.md, "Pass sizing").
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, ClassVar, Sequence

from greso_jax.core.registry import Registry
from greso_jax.core.specs import STR, Spec, field

PASS_MARGIN = 1.25  # over-provision each adaptive follow-up pass so one more pass usually fills the batch
RATE_MARGIN = 1.05  # the rate-based sizers' over-provisioning: their rate is an estimate of the kept pool itself
MAX_PASS_FACTOR = 4.0  # the rate-based sizers' largest pass, in multiples of train_batch_size
RATE_MEMORY = 0.8  # weight of earlier passes in observed_rate's running average
NEEDS_PREDICTION = "predicted"  # the sizer a strategy can use only if it predicts its informative rate


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


class PassSizer:
    """Sizes the passes of one selector. `first` sizes a step's first pass, `follow_up` the next one when
    `remaining` usable groups are missing; `observe` sees every pass's new groups; state is checkpointed.
    passes: the shared pass settings (`settings.PassConfig`, selection.*)."""

    name: ClassVar[str] = ""

    def __init__(self, passes, *, margin: float = RATE_MARGIN, max_pass_factor: float = MAX_PASS_FACTOR):
        self.passes, self.margin, self.max_pass_factor = passes, float(margin), float(max_pass_factor)
        self.train_batch_size = 1  # set by each step's first pass

    def first(self, selector, train_batch_size: int) -> int:
        self.train_batch_size = int(train_batch_size)
        return self._first(selector)

    def _first(self, selector) -> int:
        return self.passes.rollout_batch_size

    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        raise NotImplementedError

    def observe(self, groups: Sequence) -> None:
        """A pass's new groups (each with `has_variance`); the stateless sizers ignore them."""

    def largest(self) -> int:
        return max(self.passes.min_pass_size, math.ceil(self.max_pass_factor * self.train_batch_size))

    def clamped(self, wanted: float) -> int:
        """ceil(wanted) within [min_pass_size, largest]."""
        return min(max(math.ceil(wanted), self.passes.min_pass_size), self.largest())

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what `state_dict` wrote (its keys were checked by the selector)."""


SIZERS: Registry[type[PassSizer]] = Registry("pass sizer")


def register_sizer(name: str):
    """Class decorator: registers a PassSizer subclass under `name`."""
    def add(cls: type[PassSizer]) -> type[PassSizer]:
        cls.name = name
        return SIZERS.register(name)(cls)
    return add


@register_sizer("fixed")
class FixedSizer(PassSizer):
    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        return self.passes.rollout_batch_size


@register_sizer("adaptive")
class AdaptiveSizer(PassSizer):
    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        return next_pass_size(remaining=remaining, pass_groups=len(last_pass),
                              pass_zero_variance=sum(not g.has_variance for g in last_pass),
                              min_pass_size=self.passes.min_pass_size, max_pass_size=self.passes.rollout_batch_size)


@register_sizer("observed_rate")
class ObservedRateSizer(PassSizer):
    """missing · margin / rate, rate the informative share of rolled-out groups, decayed by RATE_MEMORY per pass."""

    def __init__(self, passes, **bounds):
        super().__init__(passes, **bounds)
        self.informative = self.groups = 0.0  # decayed counts over passes

    def _first(self, selector) -> int:
        return self._sized(self.train_batch_size)

    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        return self._sized(remaining)

    def _sized(self, missing: int) -> int:
        if self.groups == 0:
            return self.passes.rollout_batch_size  # nothing seen yet: the shared first pass
        rate = max(self.informative / self.groups, 1e-3)
        return self.clamped(missing * self.margin / rate)

    def observe(self, groups: Sequence) -> None:
        if groups:
            self.informative = RATE_MEMORY * self.informative + sum(bool(g.has_variance) for g in groups)
            self.groups = RATE_MEMORY * self.groups + len(groups)

    def state_dict(self) -> dict[str, Any]:
        return {"sizer_informative": self.informative, "sizer_groups": self.groups}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.informative, self.groups = float(state["sizer_informative"]), float(state["sizer_groups"])


@register_sizer(NEEDS_PREDICTION)
class PredictedSizer(PassSizer):
    """The strategy's expected prompts to pull for missing · margin informative groups."""

    def _first(self, selector) -> int:
        return self.clamped(selector.prompts_to_pull(self.train_batch_size * self.margin))

    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        return self.clamped(selector.prompts_to_pull(remaining * self.margin))


@register_sizer("exact")
class ExactSizer(PassSizer):
    def _first(self, selector) -> int:
        return self.train_batch_size

    def follow_up(self, selector, remaining: int, last_pass: Sequence) -> int:
        return remaining


def sizer_choices(*, predicts: bool) -> tuple[str, ...]:
    """The sizers a strategy can use: all, but `predicted` only for one that predicts its informative rate."""
    return tuple(name for name in SIZERS if predicts or name != NEEDS_PREDICTION)


def sizing_field(default: str, *, predicts: bool = False):
    """The `pass_sizing` field of a pass-based strategy's settings; `predicts`: it implements prompts_to_pull."""
    return field(default, Spec(STR, choices=sizer_choices(predicts=predicts)),
                 "how its passes are sized (selection.pass_sizing: fixed, adaptive, observed_rate"
                 + (", predicted" if predicts else "") + ", exact); the default is its paper's")


def make_sizer(name: str, passes, **bounds) -> PassSizer:
    """The sizer registered as `name` for `passes` (a PassConfig); bounds: margin, max_pass_factor."""
    return SIZERS.get(name)(passes, **bounds)
