"""The optimiser: AdamW with global-norm clipping, and the learning-rate schedule indexed by training step.

The schedule advances once per training step (one `Learner.update` call), not per optimiser
update, as verl's actor does; `train.warmup_steps` and `train.num_steps` are training steps.
The learning rate is applied outside the optax chain so that it is a runtime scalar (metrics
report it; a schedule change never recompiles).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax


def make_optimizer(config) -> optax.GradientTransformation:
    """clip_by_global_norm(train.grad_clip; 0 = off) -> Adam(b1, b2) -> decoupled weight decay on
    matrices only (norm weights and biases are not decayed). Multiply the result by -lr."""
    train = config.train
    parts = []
    if train.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(train.grad_clip))
    parts.append(optax.scale_by_adam(b1=train.adam_b1, b2=train.adam_b2))
    if train.weight_decay > 0:
        parts.append(optax.add_decayed_weights(train.weight_decay, mask=lambda params: jax.tree.map(
            lambda p: p.ndim >= 2, params)))
    return optax.chain(*parts)


def learning_rate_at(step, config):
    """Learning rate for training step `step` (0-based, int scalar, may be traced). constant: lr.
    warmup_cosine: lr·(step+1)/warmup during warmup, then cosine from lr to 0 over the remaining
    num_steps - warmup_steps steps (held at 0 afterwards)."""
    train = config.train
    peak = float(train.learning_rate)
    step = jnp.asarray(step, jnp.float32)
    if train.lr_schedule == "constant":
        return jnp.full((), peak, jnp.float32)
    if train.lr_schedule != "warmup_cosine":
        raise ValueError(f"train.lr_schedule: {train.lr_schedule!r} is not one of constant, warmup_cosine")
    warmup = float(train.warmup_steps)
    decay_steps = float(max(train.num_steps - train.warmup_steps, 1))
    progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
    cosine = peak * 0.5 * (1.0 + jnp.cos(math.pi * progress))
    if warmup == 0:
        return cosine
    return jnp.where(step < warmup, peak * (step + 1.0) / warmup, cosine)
