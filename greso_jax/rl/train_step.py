"""Pure pieces of one optimiser update: exact micro-batch gradient accumulation and the guarded parameter update.

Parameters travel as the model's pure dict of arrays (`nnx.State.to_pure_dict()`), merged with
the static graph definition inside the traced function.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from greso_jax.rl.logprobs import token_logprobs_and_entropy
from greso_jax.rl.losses import LossConfig, LossSums, aggregation_weights, loss_sums


class MicroBatches(NamedTuple):
    """One mini-batch split into M micro-batches of m rows: [M, m, T] ([M, m] for advantages); or one
    micro-batch, the same fields without the leading M axis ([m, L], [m]). ref_logprobs is None when
    the KL term is off."""

    input_ids: jax.Array
    attention_mask: jax.Array
    response_mask: jax.Array
    old_logprobs: jax.Array
    advantages: jax.Array
    ref_logprobs: jax.Array | None = None


class Mismatch(NamedTuple):
    """|sampler log-prob - learner log-prob| over response tokens: its sum, its max and the token count."""

    abs_sum: jax.Array
    abs_max: jax.Array
    tokens: jax.Array

    @staticmethod
    def zero() -> "Mismatch":
        return Mismatch(*([jnp.zeros((), jnp.float32)] * 3))

    def combine(self, other: "Mismatch") -> "Mismatch":
        return Mismatch(self.abs_sum + other.abs_sum, jnp.maximum(self.abs_max, other.abs_max),
                        self.tokens + other.tokens)


class StepStats(NamedTuple):
    """Mini-batch level results of one optimiser update's gradient (all scalars). The log-prob
    mismatch compares the learner's log-probs at the parameters the gradient is taken at with the
    sampler's (old_logprobs): before a step's first update, that is the two engines' numerics."""

    loss: jax.Array
    pg_loss: jax.Array
    kl: jax.Array
    entropy: jax.Array
    clipfrac_low: jax.Array
    clipfrac_high: jax.Array
    tokens: jax.Array
    logprob_mismatch: jax.Array
    logprob_mismatch_max: jax.Array


def inverse_denominator(response_mask, cfg: LossConfig):
    """response_mask [N, T] of a whole mini-batch -> 1 / its aggregation denominator (at least 1).
    Fixed by the masks before any parameter is read; trimming padding columns leaves it unchanged."""
    _, denominator = aggregation_weights(response_mask, cfg.aggregation, cfg.token_sum_norm)
    return 1.0 / jnp.maximum(denominator, 1.0)


def micro_batch_gradient(graphdef: nnx.GraphDef, params, batch: MicroBatches, cfg: LossConfig, inv_denominator, *,
                         temperature: float, chunk_size: int):
    """One micro-batch ([m, L]): gradient of its sums / the mini-batch's denominator. Returns
    (grads like params, LossSums, Mismatch)."""

    def micro_loss(p):
        model = nnx.merge(graphdef, p)
        logprobs, entropy = token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, temperature,
                                                       chunk_size=chunk_size)
        sums = loss_sums(logprobs, batch.old_logprobs, batch.advantages, batch.response_mask, cfg,
                         ref_logprobs=batch.ref_logprobs, entropy=entropy)
        mask = batch.response_mask > 0
        gap = jnp.where(mask, jnp.abs(jax.lax.stop_gradient(logprobs) - batch.old_logprobs), 0.0)
        mismatch = Mismatch(jnp.sum(gap), jnp.max(gap), jnp.sum(mask.astype(jnp.float32)))
        return sums.loss * inv_denominator, (sums, mismatch)

    grads, (sums, mismatch) = jax.grad(micro_loss, has_aux=True)(params)
    return grads, sums, mismatch


def zero_sums() -> LossSums:
    return LossSums(*([jnp.zeros((), jnp.float32)] * len(LossSums._fields)))


def step_stats(sums: LossSums, mismatch: Mismatch, inv_denominator) -> StepStats:
    """A mini-batch's summed LossSums and Mismatch -> its StepStats."""
    tokens = jnp.maximum(sums.tokens, 1.0)
    return StepStats(loss=sums.loss * inv_denominator, pg_loss=sums.pg * inv_denominator,
                     kl=sums.kl * inv_denominator, entropy=sums.entropy * inv_denominator,
                     clipfrac_low=sums.clipped_low / tokens, clipfrac_high=sums.clipped_high / tokens,
                     tokens=sums.tokens, logprob_mismatch=mismatch.abs_sum / jnp.maximum(mismatch.tokens, 1.0),
                     logprob_mismatch_max=mismatch.abs_max)


def accumulate_gradients(graphdef: nnx.GraphDef, params, micro: MicroBatches, cfg: LossConfig, *,
                         temperature: float, chunk_size: int):
    """Gradient of the mini-batch loss ([M, m, T] micro-batches), summed over micro-batches with
    lax.scan. Exact: every micro-batch's sums are divided by the whole mini-batch's denominator.
    Returns (grads like params, StepStats)."""
    num_micro, rows, length = micro.input_ids.shape
    inv_denominator = inverse_denominator(micro.response_mask.reshape(num_micro * rows, length), cfg)

    def body(carry, batch):
        grads_acc, sums_acc, mismatch_acc = carry
        grads, sums, mismatch = micro_batch_gradient(graphdef, params, batch, cfg, inv_denominator,
                                                     temperature=temperature, chunk_size=chunk_size)
        return (jax.tree.map(jnp.add, grads_acc, grads), jax.tree.map(jnp.add, sums_acc, sums),
                mismatch_acc.combine(mismatch)), None

    zero_grads = jax.tree.map(jnp.zeros_like, params)
    (grads, sums, mismatch), _ = jax.lax.scan(body, (zero_grads, zero_sums(), Mismatch.zero()), micro)
    return grads, step_stats(sums, mismatch, inv_denominator)


def guarded_update(tx: optax.GradientTransformation, params, opt_state, grads, learning_rate, loss):
    """One AdamW step (updates scaled by -learning_rate). If the loss or the gradient norm is not
    finite, params and opt_state come back unchanged. Returns (params, opt_state, grad_norm, skipped)."""
    grad_norm = optax.global_norm(grads)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = jax.tree.map(lambda p, u: p - learning_rate * u.astype(p.dtype), params, updates)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
    return (jax.tree.map(keep, new_params, params), jax.tree.map(keep, new_opt_state, opt_state), grad_norm,
            jnp.logical_not(finite).astype(jnp.int32))
