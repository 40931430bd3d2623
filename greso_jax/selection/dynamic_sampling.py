"""Vanilla GRPO (no selection) and DAPO Dynamic Sampling (roll out, then drop zero-variance groups)."""

from __future__ import annotations

from greso_jax.selection.base import Selector


class VanillaSelector(Selector):
    """Keeps every prompt and every group: one pass of exactly train_batch_size prompts per step."""

    strategy = "vanilla"
    filters_zero_variance = False

    def first_pass_size(self, train_batch_size: int) -> int:
        return train_batch_size


class DynamicSamplingSelector(Selector):
    """Keeps every prompt before rollout; the driver drops zero-variance groups and runs more passes."""

    strategy = "dynamic_sampling"
