"""DAPO Dynamic Sampling: roll out passes of prompts, drop zero-variance groups, repeat until the batch is full."""

from __future__ import annotations

from greso_jax.selection.base import Selector
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.pass_sizing import next_pass_size
from greso_jax.selection.registry import register_strategy


@register_strategy("dynamic_sampling")
class DynamicSamplingSelector(Selector):
    """Keeps every prompt before rollout; only groups with reward variance are usable.

    The first pass pulls selection.rollout_batch_size prompts; each follow-up pass is sized
    from the last pass's zero-variance rate (`pass_sizing.next_pass_size`), until
    train_batch_size usable groups are collected or selection.max_passes is hit. GRESO and the
    oracle share this step shape and add pre-rollout skipping.
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
