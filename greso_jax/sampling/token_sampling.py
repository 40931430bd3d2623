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


# Bit patterns of non-negative float32 values order as the values do, so a threshold on the
# weights exp(logit - max) in [0, 1] can be found by bisecting integers in [0, bits(1.0)].
_ONE_BITS = 0x3F800000
_BISECTION_STEPS = (_ONE_BITS + 1).bit_length()  # halvings that take [0, bits(1.0) + 1) to one value


def _largest_threshold(weights, holds):
    """weights float32 [R, V] in [0, 1], holds(weights, t [R, 1]) -> bool [R], True at t = 0 and
    never again once False as t grows -> t [R, 1]: per row, the largest float32 t for which it
    holds (exact: a bisection over the values' bit patterns, one pass over [R, V] a step)."""
    rows = weights.shape[0]

    def halve(_, bounds):
        low, high = bounds  # holds at low, not at high
        middle = (low + high) // 2
        ok = holds(weights, jax.lax.bitcast_convert_type(middle, jnp.float32)[:, None])
        return jnp.where(ok, middle, low), jnp.where(ok, high, middle)

    bounds = (jnp.zeros((rows,), jnp.int32), jnp.full((rows,), _ONE_BITS + 1, jnp.int32))
    low, _ = jax.lax.fori_loop(0, _BISECTION_STEPS, halve, bounds)
    return jax.lax.bitcast_convert_type(low, jnp.float32)[:, None]


def truncate(logits, top, k: int, top_p=None, scale=1.0):
    """logits [R, V], top [R, 1] each row's max, scale (1 / temperature) -> the logits with the tokens
    outside the top-k (k <= 0: off; ties kept, judged on the float32 weights exp((logits - top) *
    scale), so logits within their rounding tie), then outside the top-p nucleus of the tempered
    policy (None: off), set to -inf.

    The nucleus is the smallest set of most likely tokens whose probability reaches top_p (within
    the top-k, renormalised): every token at or above the largest weight threshold whose kept mass
    reaches top_p, ties kept, so the most likely token always is. Both cut-offs are found by
    bisection on the weights rather than by sorting the vocabulary, which XLA does slowly (on CPU,
    at Qwen's vocabulary, top_k or a sort costs many times the bisection's 30 passes). The nucleus
    test sums the excluded tail, which float32 resolves even for top_p within 1e-6 of 1. A token whose weight underflows to 0 is never drawn
    whichever side of a cut-off it falls."""
    if (k <= 0 or k >= logits.shape[-1]) and top_p is None:
        return logits
    weights = jnp.exp((logits - top) * scale)
    kept = jnp.ones(weights.shape, bool)
    if 0 < k < logits.shape[-1]:
        kth = _largest_threshold(weights, lambda w, t: jnp.sum(w >= t, axis=-1) >= k)
        kept = weights >= kth
        weights = jnp.where(kept, weights, 0.0)
    if top_p is not None:
        # mass(w >= t) >= top_p * total, as the excluded mass: mass(w < t) <= (1 - top_p) * total.
        allowed = (1.0 - top_p) * jnp.sum(weights, axis=-1)
        cutoff = _largest_threshold(weights, lambda w, t: jnp.sum(jnp.where(w < t, w, 0.0), axis=-1) <= allowed)
        kept = kept & (weights >= cutoff)
    return jnp.where(kept, logits, NEG_INF)


def _prefix_sums(x):
    """x float32 [R, W] -> its inclusive cumulative sums along W, as a matmul with an upper-triangular
    matrix of ones (XLA:CPU runs a cumsum slowly). At full float32 precision: a GPU's default for
    float32 matmuls may round the operands (TF32), which moves draws across token boundaries."""
    ones = jnp.triu(jnp.ones((x.shape[-1],) * 2, jnp.float32))
    return jnp.matmul(x, ones, precision=jax.lax.Precision.HIGHEST)


def _first_reaching(cdf, mass, target):
    """Per row, the first index whose cumulative mass reaches target among entries of positive
    mass; float rounding can leave none, then the last positive entry. cdf, mass [R, W], target [R]."""
    width = cdf.shape[-1]
    hit = (cdf >= target[:, None]) & (mass > 0)
    last_positive = width - 1 - jnp.argmax((mass > 0)[:, ::-1], axis=-1)
    return jnp.where(hit.any(-1), jnp.argmax(hit, axis=-1), last_positive)


def sample_inverse_cdf(logits, uniforms, top, scale=1.0):
    """logits float32 [R, V] (-inf: never drawn), uniforms [R] in (0, 1], top [R, 1] each row's max,
    scale (1 / temperature) -> (tokens int32 [R], mass float32 [R]: the row's sum of the weights
    exp((logits - top) * scale)).

    Inverse-CDF draw from those unnormalised weights, in two levels (blocks of
    ~sqrt(V) tokens, then the token inside the chosen block), with the prefix sums done as small
    triangular matmuls: one uniform per row instead of V Gumbel variates, no length-V cumsum (slow
    on XLA:CPU), and no [R, V] array written: the weights are summed per block as they are
    computed, and only the chosen block is read again. Softmax-normalising first cost three more
    passes over [R, V] (2.3x the time at 512 rows x 151,936 tokens on CPU). The temperature is
    applied inside each pass: logits / temperature as an array of its own was written out whole
    when the temperature is traced."""
    rows, vocab = logits.shape
    width = 1 << max(1, math.ceil(math.log2(math.sqrt(vocab))))
    blocks = -(-vocab // width)
    padded = jnp.pad(logits, ((0, 0), (0, blocks * width - vocab)), constant_values=NEG_INF)
    block_mass = jnp.exp((padded - top) * scale).reshape(rows, blocks, width).sum(-1)  # [R, B]
    block_cdf = _prefix_sums(block_mass)
    mass = block_cdf[:, -1]
    target = uniforms * mass
    block = _first_reaching(block_cdf, block_mass, target)
    index = block[:, None] * width + jnp.arange(width)  # [R, W]: the chosen block's tokens
    inner_logits = jnp.take_along_axis(logits, jnp.minimum(index, vocab - 1), axis=1)
    inner = jnp.where(index < vocab, jnp.exp((inner_logits - top) * scale), 0.0)
    before = jnp.take_along_axis(block_cdf - block_mass, block[:, None], axis=1)[:, 0]
    inner_cdf = before[:, None] + _prefix_sums(inner)
    # A row without positive mass (all -inf, NaN) would land on padding: it gets the last token.
    tokens = jnp.minimum(block * width + _first_reaching(inner_cdf, inner, target), vocab - 1)
    return tokens.astype(jnp.int32), mass


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
    """logits float32 [R, V], keys [R] -> (tokens int32 [R], logprobs float32 [R]).

    The log-probability is taken from the row's log-sum-exp, not from a materialised [R, V]
    log-softmax; top-k and top-p keep the most likely token, so one row max serves both the
    draw and the log-probability."""
    if mode.greedy:
        scale = 1.0
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        top = jnp.take_along_axis(logits, tokens[:, None], axis=-1)  # the max, without another pass
        mass = jnp.exp(logits - top).sum(-1)
    else:
        scale = 1.0 / temperature  # max(logits / T) = max(logits) / T: the max is taken untempered
        top = jnp.max(logits, axis=-1, keepdims=True)
        truncated = truncate(logits, top, mode.top_k, top_p if mode.use_top_p else None, scale)
        uniforms = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)  # (0, 1]
        tokens, mass = sample_inverse_cdf(truncated, uniforms, top, scale)
        if truncated is not logits:  # the log-probability is the untruncated policy's
            mass = jnp.exp((logits - top) * scale).sum(-1)
    chosen = (jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] - top[:, 0]) * scale - jnp.log(mass)
    return tokens, chosen
