"""The next-token draw against float64 references: inverse-CDF sampling, top-k / top-p cut-offs, log-probs."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from greso_jax.sampling.token_sampling import SamplingMode, choose_tokens, sample_inverse_cdf, truncate


def _logits(rows, vocab, seed=0, scale=3.0):
    return np.array(jax.random.normal(jax.random.key(seed), (rows, vocab)) * scale, np.float32)


def _sorted_nucleus(logits, k, top_p):
    """Reference cut-offs by sorting (float64): top-k (ties kept), then the tokens whose mass strictly
    before them in descending order is below top_p, ties at the cut-off kept. bool [R, V]."""
    kept = np.ones(logits.shape, bool)
    if k > 0:
        kept &= logits >= np.sort(logits, axis=-1)[:, -k][:, None]
    if top_p is not None:
        probs = np.where(kept, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
        probs /= probs.sum(-1, keepdims=True)
        order = np.argsort(-logits, axis=-1, kind="stable")
        ordered = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(ordered, axis=-1) - ordered
        cutoff = np.min(np.where(before < top_p, np.take_along_axis(logits, order, axis=-1), np.inf), axis=-1)
        kept &= logits >= cutoff[:, None]
    return kept


@pytest.mark.parametrize("vocab", [1000, 4096])
def test_inverse_cdf_draw_matches_the_exact_float64_draw(vocab):
    rows = 512
    logits = _logits(rows, vocab)
    uniforms = 1.0 - np.asarray(jax.random.uniform(jax.random.key(1), (rows,)), np.float32)
    top = logits.max(-1, keepdims=True)
    tokens, mass = sample_inverse_cdf(jnp.asarray(logits), jnp.asarray(uniforms), jnp.asarray(top))
    tokens = np.asarray(tokens)
    weights = np.exp(logits.astype(np.float64) - top)
    np.testing.assert_allclose(np.asarray(mass), weights.sum(-1), rtol=1e-5)
    cdf = np.cumsum(weights / weights.sum(-1, keepdims=True), axis=-1)
    exact = np.array([np.searchsorted(cdf[r], uniforms[r]) for r in range(rows)])
    assert tokens.min() >= 0 and tokens.max() < vocab  # never a padding slot of the last block
    assert np.mean(tokens == exact) >= 0.99
    # Where float32 rounding moved the draw, it moved across a boundary within rounding of u.
    off = tokens != exact
    boundary = np.minimum(tokens, exact)[off]  # the cumulative mass at the boundary the draw crossed
    assert np.all(np.abs(cdf[off, boundary] - uniforms[off]) < 1e-4)


def test_excluded_tokens_are_never_drawn():
    rows, vocab = 4096, 300
    logits = np.tile(_logits(1, vocab, seed=2, scale=1.0), (rows, 1))
    logits[:, ::2] = -np.inf
    uniforms = jax.random.uniform(jax.random.key(3), (rows,), minval=1e-6, maxval=1.0)
    top = jnp.asarray(logits).max(-1, keepdims=True)
    tokens = np.asarray(sample_inverse_cdf(jnp.asarray(logits), uniforms, top)[0])
    assert np.all(tokens % 2 == 1) and tokens.max() < vocab  # 300 tokens in blocks of 32: 20 padding slots
    assert len(np.unique(tokens)) > vocab // 4
    # The last real tokens excluded and u = 1: the draw stops at the last token with mass, not in padding.
    tail = logits[:1].copy()
    tail[:, 250:] = -np.inf
    token = sample_inverse_cdf(jnp.asarray(tail), jnp.ones((1,)), jnp.asarray(tail.max(-1, keepdims=True)))[0]
    assert int(token[0]) == 249


@pytest.mark.parametrize("k,top_p", [(1, None), (5, None), (50, None), (1000, None), (0, 1e-6), (0, 0.5), (0, 0.9),
                                     (20, 0.8), (0, 0.999), (0, 0.9999999), (1000, 0.9)])
def test_bisected_cutoffs_keep_the_sorted_reference_set(k, top_p):
    logits = _logits(256, 1000, seed=4)
    logits[:8, :10] = logits[:8].max(-1, keepdims=True)  # ten tokens tied at the top: cut-offs keep them all
    kept = np.isfinite(np.asarray(truncate(jnp.asarray(logits), jnp.asarray(logits.max(-1, keepdims=True)),
                                           k, None if top_p is None else jnp.float32(top_p))))
    reference = _sorted_nucleus(logits.astype(np.float64), k, None if top_p is None else float(np.float32(top_p)))
    differs = np.any(kept != reference, axis=-1)
    if top_p is not None and differs.any():
        # Only float32 rounding of the kept mass may move a nucleus, and only at its boundary.
        in_top_k = _sorted_nucleus(logits.astype(np.float64), k, None)
        probs = np.where(in_top_k, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
        probs /= probs.sum(-1, keepdims=True)
        for r in np.flatnonzero(differs):
            moved = kept[r] != reference[r]
            assert moved.sum() == 1
            assert abs(probs[r][reference[r]].sum() - probs[r, moved].sum() - top_p) < 1e-5 \
                or abs(probs[r][reference[r]].sum() - top_p) < 1e-5
        assert differs.mean() < 0.02
    else:
        assert not differs.any()
    if k and top_p is None:
        assert np.all(kept.sum(-1) >= k) and np.all(kept[:8].sum(-1) >= 10)


@pytest.mark.parametrize("mode", [SamplingMode(True, 0, False), SamplingMode(False, 0, False),
                                  SamplingMode(False, 7, True)])
def test_logprobs_are_the_untruncated_tempered_policy(mode):
    logits = _logits(64, 4096, seed=5)
    temperature = 0.7
    keys = jax.random.split(jax.random.key(6), 64)
    tokens, logprobs = choose_tokens(jnp.asarray(logits), keys, mode, jnp.float32(temperature), jnp.float32(0.6))
    tempered = logits.astype(np.float64) / (1.0 if mode.greedy else temperature)
    reference = tempered - np.log(np.exp(tempered - tempered.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - tempered.max(-1, keepdims=True)
    tokens = np.asarray(tokens)
    np.testing.assert_allclose(np.asarray(logprobs), reference[np.arange(64), tokens], atol=1e-5)
    if mode.greedy:
        np.testing.assert_array_equal(tokens, logits.argmax(-1))
    if mode.top_k:
        assert np.all((np.argsort(-logits, axis=-1)[:, :mode.top_k] == tokens[:, None]).any(-1))


def test_draw_benchmark_prints_every_mode():
    """experiments/bench/token_draw.py (a part of the GPU check) at a tiny shape."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, os.path.join(root, "experiments", "bench", "token_draw.py"), "--shapes",
                          "8x1000", "--hidden", "32", "--repeats", "1"], capture_output=True, text=True, check=True,
                         cwd=root, timeout=120).stdout
    for mode in ("logits matmul", "sample", "greedy", "top_k 50", "top_p 0.7", "top_k 50 + top_p 0.7"):
        assert f"8x1000  {mode}" in out, out
