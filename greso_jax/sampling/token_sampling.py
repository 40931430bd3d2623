"""Pure next-token choice from logits: temperature, top-k, top-p, greedy, and the log-probabilities reported.

Reported log-probability (the learner uses the same definition for its importance ratio):
log softmax(logits / temperature)[token], i.e. the tempered policy *before* any top-k / top-p
truncation; at temperature 0 (greedy) it is log softmax(logits)[token].
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class SamplingMode:
    """The static (compile-time) part of a sampling configuration; the values of temperature and
    top_p are runtime scalars so that changing them does not recompile."""

    greedy: bool
    top_k: int  # 0: off
    use_top_p: bool


def mode_of(temperature: float, top_p: float, top_k: int) -> SamplingMode:
    greedy = temperature == 0
    return SamplingMode(greedy=greedy, top_k=0 if greedy else int(top_k),
                        use_top_p=(not greedy) and top_p < 1.0)


def truncate_top_k(scaled_logits, k: int):
    """scaled_logits [R, V] -> same with everything below the k-th largest set to -inf (ties kept)."""
    if k <= 0 or k >= scaled_logits.shape[-1]:
        return scaled_logits
    kth = jax.lax.top_k(scaled_logits, k)[0][:, -1:]
    return jnp.where(scaled_logits < kth, NEG_INF, scaled_logits)


def truncate_top_p(scaled_logits, top_p):
    """scaled_logits [R, V] -> the smallest set of most likely tokens whose probability reaches
    top_p kept, the rest -inf. A token is kept when the mass strictly before it (in descending
    order) is below top_p, so the most likely token is always kept."""
    sorted_desc = -jnp.sort(-scaled_logits, axis=-1)
    probs = jax.nn.softmax(sorted_desc, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    kept = mass_before < top_p
    # kept is a prefix of the sorted order: its last element is the cut-off logit.
    cutoff = jnp.min(jnp.where(kept, sorted_desc, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(scaled_logits < cutoff, NEG_INF, scaled_logits)


def _upper_triangular(n: int):
    """[n, n] float32 with ones on and above the diagonal: x @ it is the inclusive cumsum of x."""
    return jnp.triu(jnp.ones((n, n), jnp.float32))


def _first_reaching(cdf, mass, target):
    """Per row, the first index whose cumulative mass reaches target among entries of positive
    mass; float rounding can leave none, then the last positive entry. cdf, mass [R, W], target [R]."""
    width = cdf.shape[-1]
    hit = (cdf >= target[:, None]) & (mass > 0)
    last_positive = width - 1 - jnp.argmax((mass > 0)[:, ::-1], axis=-1)
    return jnp.where(hit.any(-1), jnp.argmax(hit, axis=-1), last_positive)


def sample_inverse_cdf(probs, uniforms):
    """probs float32 [R, V] (rows sum to ~1, zeros allowed), uniforms [R] in (0, 1] -> tokens int32 [R].

    Inverse-CDF draw in two levels (blocks of ~sqrt(V) tokens, then the token inside the chosen
    block) with the prefix sums done as small triangular matmuls: one uniform per row instead
    of V Gumbel variates, and no length-V cumsum (slow on XLA:CPU)."""
    rows, vocab = probs.shape
    width = 1 << max(1, math.ceil(math.log2(math.sqrt(vocab))))
    blocks = -(-vocab // width)
    padded = jnp.pad(probs, ((0, 0), (0, blocks * width - vocab))).reshape(rows, blocks, width)
    block_mass = padded.sum(-1)  # [R, B]
    block_cdf = block_mass @ _upper_triangular(blocks)
    target = uniforms * block_cdf[:, -1]
    block = _first_reaching(block_cdf, block_mass, target)
    inner = jnp.take_along_axis(padded, block[:, None, None], axis=1)[:, 0]  # [R, W]
    before = jnp.take_along_axis(block_cdf - block_mass, block[:, None], axis=1)[:, 0]
    inner_cdf = before[:, None] + inner @ _upper_triangular(width)
    return (block * width + _first_reaching(inner_cdf, inner, target)).astype(jnp.int32)


def is_eos(tokens, eos_ids):
    """tokens int32 [R], eos_ids int32 [E] -> bool [R]: the token is one of the EOS ids."""
    return jnp.any(tokens[:, None] == eos_ids[None, :], axis=-1)


def row_keys(key, step, row_ids):
    """One key per row [R] for this step: fold_in(fold_in(key, step), row). A row's draws depend
    only on (key, step, row index), not on how many padding rows the bucket added nor on when its
    prompt was scheduled. step: a scalar, or int32 [R] (each row's own step, under refill)."""
    if jnp.ndim(step) == 0:
        step_key = jax.random.fold_in(key, step)
        return jax.vmap(lambda r: jax.random.fold_in(step_key, r))(row_ids)
    return jax.vmap(lambda s, r: jax.random.fold_in(jax.random.fold_in(key, s), r))(step, row_ids)


def choose_tokens(logits, keys, mode: SamplingMode, temperature, top_p):
    """logits float32 [R, V], keys [R] -> (tokens int32 [R], logprobs float32 [R])."""
    if mode.greedy:
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        logprobs = jax.nn.log_softmax(logits, axis=-1)
    else:
        scaled = logits / temperature
        logprobs = jax.nn.log_softmax(scaled, axis=-1)
        truncated = truncate_top_k(scaled, mode.top_k)
        if mode.use_top_p:
            truncated = truncate_top_p(truncated, top_p)
        uniforms = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)  # (0, 1]
        tokens = sample_inverse_cdf(jax.nn.softmax(truncated, axis=-1), uniforms)
    chosen = jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]
    return tokens, chosen
