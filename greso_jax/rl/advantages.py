"""Group-relative advantages (GRPO, Dr. GRPO, batch-std) with per-group baseline/scale overrides and masks."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from greso_jax.core.registry import Registry

# An estimator maps (GroupStats, *, xp, eps) to the per-group divisor [N]; xp is numpy or
# jax.numpy, whichever the rewards came in, so one definition serves host and traced code. An
# estimator that divides by the group's own std says so with `divides_by_group_std = True`: a
# per-group `scale` (AERO's posterior) replaces that std, and only there.
ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")


class GroupStats(NamedTuple):
    """What an estimator may normalise by: rewards and mask weights [N, G], group std [N] (unbiased)."""

    rewards: object
    weights: object
    group_std: object


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_divisor(stats: GroupStats, *, xp, eps: float):
    """(r - mean) / (group std + eps)."""
    return stats.group_std + eps


grpo_divisor.divides_by_group_std = True


@ADVANTAGE_ESTIMATORS.register("drgrpo")
def drgrpo_divisor(stats: GroupStats, *, xp, eps: float):
    """Dr. GRPO: r - mean (dividing by the std over-weights groups that are nearly all right or all wrong)."""
    return xp.ones(stats.group_std.shape, xp.float32)


@ADVANTAGE_ESTIMATORS.register("batch_std")
def batch_std_divisor(stats: GroupStats, *, xp, eps: float):
    """(r - group mean) / (std over every masked response of the batch + eps)."""
    rewards, weights = stats.rewards, stats.weights
    total = weights.sum()
    batch_mean = (rewards * weights).sum() / xp.maximum(total, 1.0)
    batch_var = (((rewards - batch_mean) ** 2) * weights).sum() / xp.maximum(total - 1.0, 1.0)
    return xp.broadcast_to(xp.sqrt(batch_var) + eps, stats.group_std.shape)


def _as_array(x):
    """JAX arrays (and tracers) go through jnp; NumPy arrays and lists stay on the host with NumPy."""
    return jnp if isinstance(x, jax.Array) else np


def compute_advantages(rewards, mode: str, *, response_mask=None, baseline=None, scale=None, eps: float = 1e-6):
    """rewards [N, G] -> advantages [N, G] float32, one per response of each of N groups of G.

    `mode` names an entry of ADVANTAGE_ESTIMATORS, which supplies the per-group divisor:
    "grpo": (r - mean) / (std + eps), mean and unbiased std over the group's masked responses;
    "drgrpo": r - mean; "batch_std": (r - group mean) / (std over every masked response of the
    batch + eps). `response_mask` [N, G] bool marks responses that exist / enter the loss (the
    trainer pads ragged groups with False); masked-out responses get advantage 0. `baseline` [N]
    and `scale` [N] override the group mean and the group std per group (NaN = not given for that
    group): AERO's Beta-posterior baseline ũ and scale √(ũ(1-ũ)); the scale applies only with an
    estimator that divides by the group std ("grpo"), so "drgrpo" and "batch_std" treat every group
    alike. A group whose masked rewards are all equal (one response, or zero variance) gets
    advantage exactly 0 unless a baseline is given: decided by comparing rewards, not by a float32
    std that can come out one ulp off zero and be divided by eps.
    """
    if mode not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"compute_advantages: mode {mode!r} is not one of {', '.join(ADVANTAGE_ESTIMATORS)}")
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
    estimator = ADVANTAGE_ESTIMATORS.get(mode)
    divisor = estimator(GroupStats(rewards, weights, group_std), xp=xp, eps=eps)
    highest = xp.max(xp.where(mask, rewards, -xp.inf), axis=1)
    lowest = xp.min(xp.where(mask, rewards, xp.inf), axis=1)
    constant = highest <= lowest  # [N]: no reward variance among the masked responses (or none masked)

    if baseline is not None:
        baseline = xp.asarray(baseline, dtype=xp.float32)
        _check_per_group("baseline", baseline, n)
        mean = xp.where(xp.isnan(baseline), mean, baseline)
        constant = constant & xp.isnan(baseline)
    if scale is not None:
        scale = xp.asarray(scale, dtype=xp.float32)
        _check_per_group("scale", scale, n)
        if getattr(estimator, "divides_by_group_std", False):
            divisor = xp.where(xp.isnan(scale), divisor, scale + eps)

    advantages = (rewards - mean[:, None]) / divisor[:, None]
    return xp.where(mask & ~constant[:, None], advantages, 0.0).astype(xp.float32)


def _check_per_group(name: str, values, n: int) -> None:
    if tuple(values.shape) != (n,):
        raise ValueError(f"compute_advantages: {name} must have shape [N] = ({n},), got {tuple(values.shape)}")
