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
    """One mini-batch split into M micro-batches of m rows: [M, m, T] ([M, m] for advantages).
    ref_logprobs is None when the KL term is off."""

    input_ids: jax.Array
    attention_mask: jax.Array
    response_mask: jax.Array
    old_logprobs: jax.Array
    advantages: jax.Array
    ref_logprobs: jax.Array | None = None


class StepStats(NamedTuple):
    """Mini-batch level results of `accumulate_gradients` (all scalars)."""

    loss: jax.Array
    pg_loss: jax.Array
    kl: jax.Array
    entropy: jax.Array
    clipfrac_low: jax.Array
    clipfrac_high: jax.Array
    tokens: jax.Array


def accumulate_gradients(graphdef: nnx.GraphDef, params, micro: MicroBatches, cfg: LossConfig, *,
                         temperature: float, chunk_size: int):
    """Gradient of the mini-batch loss, summed over micro-batches with lax.scan. Exact: every
    micro-batch's sums are divided by the whole mini-batch's denominator, which the masks fix
    before any parameter is read. Returns (grads like params, StepStats)."""
    num_micro, rows, length = micro.input_ids.shape
    _, denominator = aggregation_weights(micro.response_mask.reshape(num_micro * rows, length), cfg.aggregation,
                                         cfg.token_sum_norm)
    inv_denominator = 1.0 / jnp.maximum(denominator, 1.0)

    def micro_loss(p, batch: MicroBatches):
        model = nnx.merge(graphdef, p)
        logprobs, entropy = token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, temperature,
                                                       chunk_size=chunk_size)
        sums = loss_sums(logprobs, batch.old_logprobs, batch.advantages, batch.response_mask, cfg,
                         ref_logprobs=batch.ref_logprobs, entropy=entropy)
        return sums.loss * inv_denominator, sums

    grad_fn = jax.grad(micro_loss, has_aux=True)

    def body(carry, batch):
        grads_acc, sums_acc = carry
        grads, sums = grad_fn(params, batch)
        return (jax.tree.map(jnp.add, grads_acc, grads), jax.tree.map(jnp.add, sums_acc, sums)), None

    zero_grads = jax.tree.map(jnp.zeros_like, params)
    zero_sums = LossSums(*([jnp.zeros((), jnp.float32)] * len(LossSums._fields)))
    (grads, sums), _ = jax.lax.scan(body, (zero_grads, zero_sums), micro)
    tokens = jnp.maximum(sums.tokens, 1.0)
    stats = StepStats(loss=sums.loss * inv_denominator, pg_loss=sums.pg * inv_denominator,
                      kl=sums.kl * inv_denominator, entropy=sums.entropy * inv_denominator,
                      clipfrac_low=sums.clipped_low / tokens, clipfrac_high=sums.clipped_high / tokens,
                      tokens=sums.tokens)
    return grads, stats


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
