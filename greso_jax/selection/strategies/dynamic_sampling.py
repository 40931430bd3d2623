"""DAPO Dynamic Sampling: roll out passes of prompts, drop zero-variance groups, repeat until the batch is full.

`FilteringSelector` is that step shape with adaptive passes, which GRESO, MoPPS, the posterior
and the oracle share; Dynamic Sampling adds the papers' fixed passes, registered as the
comparison baseline `ds_fixed`.
"""

from __future__ import annotations

import dataclasses

from greso_jax.selection.base import Selector
from greso_jax.selection.groups import Group
from greso_jax.selection.pass_sizing import sizing_field
from greso_jax.selection.registry import register_strategy, register_variant
from greso_jax.selection.settings import StrategySettings


@dataclasses.dataclass(frozen=True)
class DynamicSamplingSettings(StrategySettings):
    """`selection.dynamic_sampling.*`: how its passes are sized."""

    # fixed: the GRESO paper's DS baseline and DAPO's generation batches; adaptive (the default): follow-ups from
    # the last pass's zero-variance rate (cheaper; GRESO's own sizing).
    pass_sizing: str = sizing_field("adaptive")


class FilteringSelector(Selector):
    """Keeps every prompt before rollout; only groups with reward variance are usable.

    Passes are sized by the strategy's sizer (`pass_sizing`; adaptive unless its settings say
    otherwise: a first pass of selection.rollout_batch_size, follow-ups from the last pass's
    zero-variance rate), until train_batch_size usable groups are collected or
    selection.max_passes is hit. Subclasses add pre-rollout skipping.
    """

    default_pass_sizing = "adaptive"

    def usable(self, group: Group) -> bool:
        return group.has_variance


@register_strategy("dynamic_sampling", aliases=("ds",))
class DynamicSamplingSelector(FilteringSelector):
    """The filtering step shape, with passes of selection.rollout_batch_size prompts (`pass_sizing="fixed"`, as
    the papers ran DS) or adaptive ones (the default)."""

    Settings = DynamicSamplingSettings


# The GRESO paper's DS baseline, against which the comparison measures every strategy.
register_variant("ds_fixed", "dynamic_sampling", baseline=True, pass_sizing="fixed")
