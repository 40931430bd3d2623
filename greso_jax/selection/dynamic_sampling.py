"""DAPO Dynamic Sampling: roll out passes of prompts, drop zero-variance groups, repeat until the batch is full."""

from __future__ import annotations

import dataclasses

from greso_jax.selection.base import PassConfig, Selector, StrategySettings
from greso_jax.selection.groups import Group, PassRequest
from greso_jax.selection.pass_sizing import next_pass_size
from greso_jax.selection.registry import register_strategy
from greso_jax.core.specs import STR, Spec, field

PASS_SIZINGS = ("adaptive", "fixed")


@dataclasses.dataclass(frozen=True)
class DynamicSamplingSettings(StrategySettings):
    """`selection.dynamic_sampling.*`: how follow-up passes are sized."""

    pass_sizing: str = field("adaptive", Spec(STR, choices=PASS_SIZINGS),
                             "fixed: every pass pulls selection.rollout_batch_size prompts (the GRESO paper's DS "
                             "baseline and DAPO's generation batches); adaptive: follow-up passes sized from the "
                             "last pass's zero-variance rate (cheaper; GRESO's own sizing)")


@register_strategy("dynamic_sampling")
class DynamicSamplingSelector(Selector):
    """Keeps every prompt before rollout; only groups with reward variance are usable.

    The first pass pulls selection.rollout_batch_size prompts. Follow-up passes pull the same
    number again (`pass_sizing="fixed"`, as the papers ran DS) or a number sized from the last
    pass's zero-variance rate (`"adaptive"`, `pass_sizing.next_pass_size`), until
    train_batch_size usable groups are collected or selection.max_passes is hit. GRESO and the
    oracle share this step shape, always adaptive, and add pre-rollout skipping.
    """

    Settings = DynamicSamplingSettings

    def __init__(self, num_prompts: int, *, pass_sizing: str = "adaptive", group_size: int = 8,
                 pass_config: PassConfig | None = None, seed: int = 0):
        super().__init__(num_prompts, group_size=group_size, pass_config=pass_config, seed=seed)
        self.pass_sizing = DynamicSamplingSettings(pass_sizing).checked("selection.dynamic_sampling").pass_sizing

    def first_pass(self, train_batch_size: int) -> PassRequest:
        return PassRequest(num_samples=self.group_size, pull=self.pass_config.rollout_batch_size)

    def usable(self, group: Group) -> bool:
        return group.has_variance

    def follow_up_pass_size(self, remaining: int, last_pass: list[Group]) -> int:
        if self.pass_sizing == "fixed":
            return self.pass_config.rollout_batch_size
        return next_pass_size(remaining=remaining, pass_groups=len(last_pass),
                              pass_zero_variance=sum(not g.has_variance for g in last_pass),
                              min_pass_size=self.pass_config.min_pass_size,
                              max_pass_size=self.pass_config.rollout_batch_size)
