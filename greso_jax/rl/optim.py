"""The optimiser: AdamW with global-norm clipping, and the learning-rate schedule indexed by training step.

The schedule advances once per training step (one `Learner.update` call), not per optimiser
update, as verl's actor does; `warmup_steps` and `num_steps` are training steps. The learning
rate is applied outside the optax chain so that it is a runtime scalar (metrics report it; a
schedule change never recompiles).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

LR_SCHEDULES = ("constant", "warmup_cosine")


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """AdamW and learning-rate schedule hyper-parameters; the defaults are the base config's
    (grad_clip 0 and weight_decay 0 turn those parts off)."""

    learning_rate: float = 3e-4
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    num_steps: int = 100  # training steps the cosine decays over
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    weight_decay: float = 0.01
    grad_clip: float = 1.0

    def __post_init__(self):
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"train.lr_schedule: {self.lr_schedule!r} is not one of {', '.join(LR_SCHEDULES)}")


def make_optimizer(settings: OptimizerSettings) -> optax.GradientTransformation:
    """clip_by_global_norm(grad_clip) -> Adam(b1, b2) -> decoupled weight decay on matrices only
    (norm weights and biases are not decayed). Multiply the result by -lr."""
    parts = []
    if settings.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(settings.grad_clip))
    parts.append(optax.scale_by_adam(b1=settings.adam_b1, b2=settings.adam_b2))
    if settings.weight_decay > 0:
        parts.append(optax.add_decayed_weights(settings.weight_decay, mask=lambda params: jax.tree.map(
            lambda p: p.ndim >= 2, params)))
    return optax.chain(*parts)


def learning_rate_at(step, settings: OptimizerSettings):
    """Learning rate for training step `step` (0-based, int scalar, may be traced). constant: lr.
    warmup_cosine: lr·(step+1)/warmup during warmup, then cosine from lr to 0 over the remaining
    num_steps - warmup_steps steps (held at 0 afterwards)."""
    peak = float(settings.learning_rate)
    step = jnp.asarray(step, jnp.float32)
    if settings.lr_schedule == "constant":
        return jnp.full((), peak, jnp.float32)
    warmup = float(settings.warmup_steps)
    decay_steps = float(max(settings.num_steps - settings.warmup_steps, 1))
    progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
    cosine = peak * 0.5 * (1.0 + jnp.cos(math.pi * progress))
    if warmup == 0:
        return cosine
    return jnp.where(step < warmup, peak * (step + 1.0) / warmup, cosine)
