"""Vanilla GRPO: no selection, no filtering; zero-variance groups are trained on and contribute nothing."""

from __future__ import annotations

from greso_jax.selection.base import Selector
from greso_jax.selection.registry import register_strategy


@register_strategy("vanilla")
class VanillaSelector(Selector):
    """Keeps every prompt and every group: one pass of exactly train_batch_size prompts per step
    (the base class's step shape)."""
