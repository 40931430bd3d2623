"""Per-token log-probabilities and entropies of a sequence under the tempered policy, chunked over the sequence.

Definition shared with the sampler (greso_jax.sampling.token_sampling): the log-prob of token
t is log softmax(logits[t - 1] / temperature)[token t] — the tempered policy before any top-k /
top-p truncation; temperature 0 (greedy) means temperature 1 here. Position 0 has no
prediction and gets 0.

Memory: logits are produced one chunk of positions at a time (hidden [B, c, D] x unembedding
[D, V]) inside a rematerialised lax.map body, so neither the forward nor the backward pass
holds more than one float32 [B, c, V] block — Qwen's V = 151,936 never meets a full [B, T, V].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from greso_jax.models.qwen2 import dense

DEFAULT_CHUNK_SIZE = 128


def _chunk_stats(unembedding, hidden, targets, inv_temperature: float, compute_dtype):
    """hidden [B, c, D], targets [B, c] -> (log-prob of targets [B, c], entropy [B, c]), float32."""
    logits = dense(hidden, unembedding.astype(compute_dtype), preferred_element_type=jnp.float32) * inv_temperature
    log_normaliser = jax.nn.logsumexp(logits, axis=-1)  # [B, c]
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 2)
    # A masked sum instead of a gather: stays local when the vocabulary axis is sharded.
    target_logit = jnp.sum(jnp.where(vocab == targets[..., None], logits, 0.0), axis=-1)
    # Entropy from max-shifted, renormalised probabilities: exp(logits - lse) alone drifts from summing
    # to 1 at large |logits / T| (error 5e-5 at 37), and the entropy inherits that drift.
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
    weights = jnp.exp(shifted)
    total = jnp.sum(weights, axis=-1)
    entropy = jnp.log(total) - jnp.sum(weights * shifted, axis=-1) / total
    return target_logit - log_normaliser, entropy


def token_logprobs_and_entropy(model, input_ids, attention_mask, temperature: float, *,
                               chunk_size: int = DEFAULT_CHUNK_SIZE):
    """input_ids, attention_mask [B, T] -> (logprobs [B, T], entropy [B, T]) float32.

    out[b, t] is about the distribution softmax(logits[b, t - 1] / temperature) that predicted
    input_ids[b, t]; column 0 is 0. Differentiable; remat keeps the backward pass chunk-sized.
    """
    if temperature < 0:
        raise ValueError(f"token_logprobs: temperature must be >= 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"token_logprobs: chunk_size must be >= 1, got {chunk_size}")
    b, t = input_ids.shape
    inv_temperature = 1.0 / temperature if temperature > 0 else 1.0
    hidden = model.hidden_states(input_ids, attention_mask)[:, :-1]  # [B, T-1, D] predicts tokens 1..T-1
    targets = input_ids[:, 1:]
    steps = t - 1
    if steps == 0:
        zeros = jnp.zeros((b, t), jnp.float32)
        return zeros, zeros
    chunk = min(chunk_size, steps)
    num_chunks = -(-steps // chunk)
    pad = num_chunks * chunk - steps
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    d = hidden.shape[-1]
    hidden_chunks = hidden.reshape(b, num_chunks, chunk, d).transpose(1, 0, 2, 3)  # [n, B, c, D]
    target_chunks = targets.reshape(b, num_chunks, chunk).transpose(1, 0, 2)  # [n, B, c]
    unembedding = model.unembedding()
    compute_dtype = jnp.dtype(model.cfg.dtype)

    @jax.checkpoint
    def one_chunk(args):
        h, tgt = args
        return _chunk_stats(unembedding, h, tgt, inv_temperature, compute_dtype)

    logprobs, entropy = jax.lax.map(one_chunk, (hidden_chunks, target_chunks))  # [n, B, c] each

    def unchunk(x):
        x = x.transpose(1, 0, 2).reshape(b, num_chunks * chunk)[:, :steps]
        return jnp.concatenate([jnp.zeros((b, 1), jnp.float32), x], axis=1)

    return unchunk(logprobs), unchunk(entropy)


def token_logprobs(model, input_ids, attention_mask, temperature: float, *, chunk_size: int = DEFAULT_CHUNK_SIZE):
    """input_ids, attention_mask [B, T] -> float32 [B, T]: log softmax(logits[b, t-1] / T)[input_ids[b, t]], 0 at t=0."""
    return token_logprobs_and_entropy(model, input_ids, attention_mask, temperature, chunk_size=chunk_size)[0]
