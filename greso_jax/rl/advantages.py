"""Group-relative advantages (GRPO, Dr. GRPO, batch-std) with per-group baseline/scale overrides and masks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ADVANTAGE_MODES = ("grpo", "drgrpo", "batch_std")


def _as_array(x):
    """JAX arrays (and tracers) go through jnp; NumPy arrays and lists stay on the host with NumPy."""
    return jnp if isinstance(x, jax.Array) else np


def compute_advantages(rewards, mode: str, *, response_mask=None, baseline=None, scale=None, eps: float = 1e-6):
    """rewards [N, G] -> advantages [N, G] float32, one per response of each of N groups of G.

    mode "grpo": (r - mean) / (std + eps), mean and unbiased std over the group's masked responses;
    "drgrpo": r - mean; "batch_std": (r - group mean) / (std over every masked response of the
    batch + eps). `response_mask` [N, G] bool marks responses that exist / enter the loss (the
    trainer pads ragged groups with False); masked-out responses get advantage 0. `baseline` [N]
    and `scale` [N] override the group mean and the std per group (NaN = not given for that group):
    AERO's Beta-posterior baseline ũ and scale √(ũ(1-ũ)). A group with fewer than two masked
    responses has std 0 (so its advantage is (r - mean) / eps = 0 unless a baseline is given).
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"compute_advantages: mode {mode!r} is not one of {', '.join(ADVANTAGE_MODES)}")
    xp = _as_array(rewards)
    rewards = xp.asarray(rewards, dtype=xp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"compute_advantages: rewards must be [N, G], got shape {tuple(rewards.shape)}")
    n, g = rewards.shape
    mask = xp.ones((n, g), bool) if response_mask is None else xp.asarray(response_mask).astype(bool)
    if tuple(mask.shape) != (n, g):
        raise ValueError(f"compute_advantages: response_mask shape {tuple(mask.shape)} != rewards shape {(n, g)}")
    weights = mask.astype(xp.float32)
    count = weights.sum(axis=1)  # [N]
    mean = (rewards * weights).sum(axis=1) / xp.maximum(count, 1.0)
    squared = ((rewards - mean[:, None]) ** 2) * weights
    group_std = xp.sqrt(squared.sum(axis=1) / xp.maximum(count - 1.0, 1.0))  # unbiased; 0 for a lone response

    if mode == "batch_std":
        total = weights.sum()
        batch_mean = (rewards * weights).sum() / xp.maximum(total, 1.0)
        batch_var = (((rewards - batch_mean) ** 2) * weights).sum() / xp.maximum(total - 1.0, 1.0)
        divisor = xp.broadcast_to(xp.sqrt(batch_var) + eps, (n,))
    elif mode == "grpo":
        divisor = group_std + eps
    else:  # drgrpo: no normalisation
        divisor = xp.ones((n,), xp.float32)

    if baseline is not None:
        baseline = xp.asarray(baseline, dtype=xp.float32)
        _check_per_group("baseline", baseline, n)
        mean = xp.where(xp.isnan(baseline), mean, baseline)
    if scale is not None:
        scale = xp.asarray(scale, dtype=xp.float32)
        _check_per_group("scale", scale, n)
        divisor = xp.where(xp.isnan(scale), divisor, scale + eps)

    advantages = (rewards - mean[:, None]) / divisor[:, None]
    return xp.where(mask, advantages, 0.0).astype(xp.float32)


def _check_per_group(name: str, values, n: int) -> None:
    if tuple(values.shape) != (n,):
        raise ValueError(f"compute_advantages: {name} must have shape [N] = ({n},), got {tuple(values.shape)}")
