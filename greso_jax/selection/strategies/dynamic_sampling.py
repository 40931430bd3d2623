"""DAPO Dynamic Sampling: roll out passes of prompts, drop zero-variance groups, repeat until the batch is full.

`FilteringSelector` is that step shape with adaptive passes, which GRESO, MoPPS, the posterior
and the oracle share; Dynamic Sampling adds the papers' fixed passes, registered as the
comparison baseline `ds_fixed`.
"""

from __future__ import annotations

import dataclasses

from greso_jax.core.specs import STR, Spec, field
from greso_jax.selection.base import Selector
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.pass_sizing import next_pass_size
from greso_jax.selection.registry import register_strategy, register_variant
from greso_jax.selection.settings import StrategySettings

PASS_SIZINGS = ("adaptive", "fixed")


@dataclasses.dataclass(frozen=True)
class DynamicSamplingSettings(StrategySettings):
    """`selection.dynamic_sampling.*`: how follow-up passes are sized."""

    pass_sizing: str = field("adaptive", Spec(STR, choices=PASS_SIZINGS),
                             "fixed: every pass pulls selection.rollout_batch_size prompts (the GRESO paper's DS "
                             "baseline and DAPO's generation batches); adaptive: follow-up passes sized from the "
                             "last pass's zero-variance rate (cheaper; GRESO's own sizing)")


class FilteringSelector(Selector):
    """Keeps every prompt before rollout; only groups with reward variance are usable.

    The first pass pulls selection.rollout_batch_size prompts; follow-up passes pull a number
    sized from the last pass's zero-variance rate (`pass_sizing.next_pass_size`), until
    train_batch_size usable groups are collected or selection.max_passes is hit. Subclasses add
    pre-rollout skipping.
    """

    def first_pass(self, train_batch_size: int) -> PassRequest:
        return PassRequest(num_samples=self.group_size, pull=self.pass_config.rollout_batch_size)

    def usable(self, group: Group) -> bool:
        return group.has_variance

    def follow_up_pass_size(self, remaining: int, last_pass: list[Group]) -> int:
        return next_pass_size(remaining=remaining, pass_groups=len(last_pass),
                              pass_zero_variance=sum(not g.has_variance for g in last_pass),
                              min_pass_size=self.pass_config.min_pass_size,
                              max_pass_size=self.pass_config.rollout_batch_size)


@register_strategy("dynamic_sampling", aliases=("ds",))
class DynamicSamplingSelector(FilteringSelector):
    """The filtering step shape, with follow-up passes of selection.rollout_batch_size prompts
    (`pass_sizing="fixed"`, as the papers ran DS) or adaptive ones (the default)."""

    Settings = DynamicSamplingSettings

    def follow_up_pass_size(self, remaining: int, last_pass: list[Group]) -> int:
        if self.settings.pass_sizing == "fixed":
            return self.pass_config.rollout_batch_size
        return super().follow_up_pass_size(remaining, last_pass)


# The GRESO paper's DS baseline, against which the comparison measures every strategy.
register_variant("ds_fixed", "dynamic_sampling", baseline=True, pass_sizing="fixed")
