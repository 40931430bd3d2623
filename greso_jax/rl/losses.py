"""GRPO/PPO loss terms as pure functions: clipped policy gradient, KL (k1/k3), aggregation into (sum, denominator).

Every aggregated quantity is returned as a (sum, denominator) pair whose denominator does not
depend on the parameters, so a mini-batch split into micro-batches accumulates exactly:
loss = Σ_micro sum_micro / Σ_micro denominator_micro. Aggregation modes (per-token loss l[b, t],
response mask m[b, t], n_b = Σ_t m[b, t], S = rows with n_b > 0):
  token-mean               Σ_bt l·m / Σ_bt m                      (DAPO)
  seq-mean-token-mean      Σ_{b∈S} (Σ_t l·m / n_b) / |S|          (GRPO paper)
  seq-mean-token-sum-norm  Σ_{b∈S} (Σ_t l·m / C) / |S|            (Dr. GRPO; C constant, e.g. max response length)
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp

from greso_jax.core.registry import Registry

# (float mask [B, T], token_sum_norm) -> (per-token weights [B, T], denominator scalar)
LOSS_AGGREGATIONS: Registry = Registry("loss aggregation")
# (logprobs [B, T], ref_logprobs [B, T]) -> per-token KL estimate [B, T]
KL_ESTIMATORS: Registry = Registry("KL estimator")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Static loss hyper-parameters (greso_jax.run.build maps config.rl onto them); `token_sum_norm` is
    Dr. GRPO's constant C."""

    aggregation: str = "token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 0.0  # 0: off; else c > 1, bounds the loss of negative-advantage tokens by -c·A
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    token_sum_norm: float = 1.0

    def __post_init__(self):
        if self.aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"rl.loss_aggregation: {self.aggregation!r} is not one of {', '.join(LOSS_AGGREGATIONS)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"rl.kl_estimator: {self.kl_estimator!r} is not one of {', '.join(KL_ESTIMATORS)}")
        if self.dual_clip != 0 and self.dual_clip <= 1:
            raise ValueError(f"rl.dual_clip: must be 0 (off) or > 1, got {self.dual_clip}")
        if self.token_sum_norm <= 0:
            raise ValueError(f"token_sum_norm: must be > 0, got {self.token_sum_norm}")


def policy_gradient_loss(logprobs, old_logprobs, advantages, *, clip_low: float, clip_high: float,
                         dual_clip: float = 0.0):
    """Per-token clipped surrogate loss. logprobs, old_logprobs [B, T]; advantages [B].

    Returns (loss [B, T], clipped_low [B, T] bool, clipped_high [B, T] bool): loss =
    max(-A·ρ, -A·clip(ρ, 1-ε_low, 1+ε_high)), with dual clip min(that, -c·A) where A < 0.
    clipped_high: A > 0 and ρ > 1+ε_high (the upper clip zeroes the token's gradient);
    clipped_low: A < 0 and ρ < 1-ε_low.
    """
    adv = advantages[:, None]
    ratio = jnp.exp(logprobs - old_logprobs)
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = jnp.maximum(unclipped, clipped)
    if dual_clip:
        loss = jnp.where(adv < 0, jnp.minimum(loss, -adv * dual_clip), loss)
    clipped_high = (adv > 0) & (ratio > 1.0 + clip_high)
    clipped_low = (adv < 0) & (ratio < 1.0 - clip_low)
    return loss, clipped_low, clipped_high


@KL_ESTIMATORS.register("k1")
def kl_k1(logprobs, ref_logprobs):
    """log π - log π_ref."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k3")
def kl_k3(logprobs, ref_logprobs):
    """exp(log π_ref - log π) - (log π_ref - log π) - 1: unbiased and, unlike k1, never negative."""
    delta = ref_logprobs - logprobs
    return jnp.exp(delta) - delta - 1.0


def kl_penalty(logprobs, ref_logprobs, estimator: str = "k3"):
    """Per-token estimate of KL(π ‖ π_ref) from samples of π with the KL_ESTIMATORS entry `estimator`."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"rl.kl_estimator: {estimator!r} is not one of {', '.join(KL_ESTIMATORS)}")
    return KL_ESTIMATORS.get(estimator)(logprobs, ref_logprobs)


def _rows_with_tokens(mask):
    return jnp.sum((jnp.sum(mask, axis=1, keepdims=True) > 0).astype(jnp.float32))


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(mask, token_sum_norm: float):
    return mask, jnp.sum(mask)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(mask, token_sum_norm: float):
    tokens = jnp.sum(mask, axis=1, keepdims=True)  # [B, 1]
    return mask / jnp.maximum(tokens, 1.0), _rows_with_tokens(mask)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(mask, token_sum_norm: float):
    return mask / token_sum_norm, _rows_with_tokens(mask)


def aggregation_weights(response_mask, aggregation: str, token_sum_norm: float = 1.0):
    """response_mask [B, T] -> (per-token weights w [B, T], denominator scalar) with
    aggregated = Σ w·l / denominator (see the module docstring)."""
    if aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(f"rl.loss_aggregation: {aggregation!r} is not one of {', '.join(LOSS_AGGREGATIONS)}")
    return LOSS_AGGREGATIONS.get(aggregation)(response_mask.astype(jnp.float32), token_sum_norm)


def aggregate(values, response_mask, aggregation: str, token_sum_norm: float = 1.0):
    """values [B, T] -> (sum, denominator): the aggregated value is sum / max(denominator, 1)."""
    weights, denominator = aggregation_weights(response_mask, aggregation, token_sum_norm)
    return jnp.sum(values * weights), denominator


class LossSums(NamedTuple):
    """Sums of one micro-batch; divide by the mini-batch's denominators (`tokens` for clip fractions)."""

    loss: jnp.ndarray  # pg + β·kl - entropy_coef·entropy, aggregated-weighted sum
    pg: jnp.ndarray
    kl: jnp.ndarray
    entropy: jnp.ndarray
    clipped_low: jnp.ndarray  # token counts
    clipped_high: jnp.ndarray
    tokens: jnp.ndarray


def loss_sums(logprobs, old_logprobs, advantages, response_mask, cfg: LossConfig, *, ref_logprobs=None,
              entropy=None) -> LossSums:
    """The micro-batch's weighted sums of every loss term. ref_logprobs is required when
    cfg.kl_coef > 0 and ignored otherwise; entropy [B, T] enters the loss only when
    cfg.entropy_coef > 0 (otherwise it is a metric only)."""
    mask = response_mask.astype(jnp.float32)
    weights, _ = aggregation_weights(mask, cfg.aggregation, cfg.token_sum_norm)
    pg, clipped_low, clipped_high = policy_gradient_loss(
        logprobs, old_logprobs, advantages, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
        dual_clip=cfg.dual_clip)
    pg_sum = jnp.sum(pg * weights)
    total = pg_sum
    kl_sum = jnp.zeros((), jnp.float32)
    if cfg.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("loss_sums: rl.kl_coef > 0 needs ref_logprobs")
        kl_sum = jnp.sum(kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator) * weights)
        total = total + cfg.kl_coef * kl_sum
    entropy_sum = jnp.zeros((), jnp.float32)
    if entropy is not None:
        entropy_sum = jnp.sum(entropy * weights)
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * entropy_sum
    return LossSums(loss=total, pg=pg_sum, kl=kl_sum, entropy=entropy_sum,
                    clipped_low=jnp.sum(clipped_low * mask), clipped_high=jnp.sum(clipped_high * mask),
                    tokens=jnp.sum(mask))
