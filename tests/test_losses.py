"""Loss terms and aggregations against independent NumPy references; log-probs against full logits; masks from lengths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from greso_jax.models import PRESETS, init_model
from greso_jax.rl.batch import make_train_batch
from greso_jax.rl.logprobs import token_logprobs, token_logprobs_and_entropy
from greso_jax.rl.losses import LossConfig, aggregate, kl_penalty, loss_sums, policy_gradient_loss

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def np_pg_loss(logp, old, adv, clip_low, clip_high, dual_clip):
    """Per token, by cases on the sign of A (a different formulation from max(-Aρ, -A·clip(ρ)))."""
    out = np.zeros_like(logp, dtype=np.float64)
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            a, r = float(adv[b]), float(np.exp(np.float64(logp[b, t]) - old[b, t]))
            if a >= 0:
                value = -a * min(r, 1 + clip_high)
            else:
                value = -a * max(r, 1 - clip_low)
                if dual_clip:
                    value = min(value, -a * dual_clip)
            out[b, t] = value
    return out


def np_kl(logp, ref, estimator):
    logp, ref = logp.astype(np.float64), ref.astype(np.float64)
    if estimator == "k1":
        return logp - ref
    ratio = np.exp(ref - logp)
    return ratio - np.log(ratio) - 1


def np_aggregate(values, mask, mode, norm):
    rows = []
    for b in range(values.shape[0]):
        n = mask[b].sum()
        if n == 0:
            continue
        if mode == "token-mean":
            rows.append(((values[b] * mask[b]).sum(), n))
        elif mode == "seq-mean-token-mean":
            rows.append(((values[b] * mask[b]).sum() / n, 1))
        else:
            rows.append(((values[b] * mask[b]).sum() / norm, 1))
    if not rows:
        return 0.0
    return sum(s for s, _ in rows) / sum(d for _, d in rows)


def random_inputs(seed=0, b=6, t=9):
    rng = np.random.default_rng(seed)
    old = rng.normal(-2, 0.5, (b, t)).astype(np.float32)
    logp = (old + rng.normal(0, 0.4, (b, t))).astype(np.float32)  # ratios well outside [0.8, 1.28]
    ref = (old + rng.normal(0, 0.3, (b, t))).astype(np.float32)
    adv = rng.normal(size=b).astype(np.float32)
    adv[0] = 0.0
    adv[3] = -1.0
    logp[3, :2] = old[3, :2] + 1.5  # ratio e^1.5 > 3: the dual clip binds
    mask = (rng.random((b, t)) > 0.3).astype(np.float32)
    mask[2] = 0.0  # a row outside the loss
    entropy = rng.uniform(0, 3, (b, t)).astype(np.float32)
    return logp, old, ref, adv, mask, entropy


@pytest.mark.parametrize("dual_clip", [0.0, 3.0])
def test_policy_gradient_loss_matches_reference_with_both_clips(dual_clip):
    logp, old, _, adv, _, _ = random_inputs()
    loss, clipped_low, clipped_high = policy_gradient_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                                                           clip_low=0.2, clip_high=0.28, dual_clip=dual_clip)
    np.testing.assert_allclose(np.asarray(loss), np_pg_loss(logp, old, adv, 0.2, 0.28, dual_clip), rtol=1e-5,
                               atol=1e-6)
    ratio = np.exp(logp.astype(np.float64) - old)
    assert np.array_equal(np.asarray(clipped_high), (adv[:, None] > 0) & (ratio > 1.28))
    assert np.array_equal(np.asarray(clipped_low), (adv[:, None] < 0) & (ratio < 0.8))
    assert np.asarray(clipped_high).any() and np.asarray(clipped_low).any()  # both sides exercised
    if dual_clip:
        np.testing.assert_allclose(np.asarray(loss)[3, :2], dual_clip, rtol=1e-6)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_estimators(estimator):
    logp, _, ref, _, _, _ = random_inputs(1)
    got = np.asarray(kl_penalty(jnp.asarray(logp), jnp.asarray(ref), estimator))
    np.testing.assert_allclose(got, np_kl(logp, ref, estimator), rtol=1e-5, atol=1e-6)
    if estimator == "k3":
        assert np.all(got >= -1e-7)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_full_loss_and_micro_sums_match_reference(aggregation, estimator):
    logp, old, ref, adv, mask, entropy = random_inputs(2)
    cfg = LossConfig(aggregation=aggregation, clip_low=0.2, clip_high=0.28, dual_clip=3.0, kl_coef=0.05,
                     kl_estimator=estimator, entropy_coef=0.01, token_sum_norm=12.0)
    per_token = (np_pg_loss(logp, old, adv, 0.2, 0.28, 3.0) + 0.05 * np_kl(logp, ref, estimator)
                 - 0.01 * entropy.astype(np.float64))
    expected = np_aggregate(per_token, mask, aggregation, 12.0)
    _, denominator = aggregate(jnp.zeros_like(mask), jnp.asarray(mask), aggregation, 12.0)
    # Micro-batches of 2 rows: sums add up, the denominator is the whole batch's.
    total = 0.0
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):
        sums = loss_sums(*(jnp.asarray(x[rows]) for x in (logp, old, adv, mask)), cfg,
                         ref_logprobs=jnp.asarray(ref[rows]), entropy=jnp.asarray(entropy[rows]))
        total += float(sums.loss)
    np.testing.assert_allclose(total / float(denominator), expected, rtol=1e-5, atol=1e-6)
    for term, values in (("pg", np_pg_loss(logp, old, adv, 0.2, 0.28, 3.0)), ("kl", np_kl(logp, ref, estimator)),
                         ("entropy", entropy)):
        s, d = aggregate(jnp.asarray(values, jnp.float32), jnp.asarray(mask), aggregation, 12.0)
        np.testing.assert_allclose(float(s) / float(d), np_aggregate(values, mask, aggregation, 12.0), rtol=1e-5,
                                   atol=1e-6, err_msg=term)


def test_loss_config_rejects_bad_values():
    with pytest.raises(ValueError, match="rl.loss_aggregation"):
        LossConfig(aggregation="sum")
    with pytest.raises(ValueError, match="rl.kl_estimator"):
        LossConfig(kl_estimator="k2")
    with pytest.raises(ValueError, match="rl.dual_clip"):
        LossConfig(dual_clip=0.5)


# ------------------------------------------------------------------------------------ log-probs


@pytest.fixture(scope="module")
def model():
    return init_model(PRESETS["tiny-test"], seed=1)


def full_logits_reference(model, ids, mask, temperature):
    logits = np.asarray(model(ids, mask), np.float64) / (temperature or 1.0)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    logp = logits - logz[..., None]
    b, t = ids.shape
    out = np.zeros((b, t))
    ent = np.zeros((b, t))
    for i in range(b):
        for j in range(1, t):
            out[i, j] = logp[i, j - 1, ids[i, j]]
            ent[i, j] = -(np.exp(logp[i, j - 1]) * logp[i, j - 1]).sum()
    return out, ent


@pytest.mark.parametrize("chunk_size,temperature", [(1, 1.0), (3, 0.7), (128, 0.0)])
def test_token_logprobs_match_full_logits(model, chunk_size, temperature):
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, 64, (3, 11)), jnp.int32)
    mask = jnp.asarray(np.arange(11)[None] < np.array([[11], [7], [9]]), jnp.int32)
    from flax import nnx

    graphdef, params = nnx.split(model, nnx.Param)
    forward = jax.jit(lambda p: token_logprobs_and_entropy(nnx.merge(graphdef, p), ids, mask, temperature,
                                                           chunk_size=chunk_size))
    logprobs, entropy = forward(params.to_pure_dict())
    ref_lp, ref_ent = full_logits_reference(model, ids, mask, temperature)
    np.testing.assert_allclose(np.asarray(logprobs), ref_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(entropy), ref_ent, rtol=1e-5, atol=1e-5)


def test_chunked_gradient_matches_full_logits_gradient(model):
    from flax import nnx

    graphdef, params = nnx.split(model, nnx.Param)
    params = params.to_pure_dict()
    rng = np.random.default_rng(1)
    ids = jnp.asarray(rng.integers(0, 64, (2, 10)), jnp.int32)
    mask = jnp.ones((2, 10), jnp.int32)
    weights = jnp.asarray(rng.normal(size=(2, 10)), jnp.float32)

    def chunked(p):
        return jnp.sum(weights * token_logprobs(nnx.merge(graphdef, p), ids, mask, 0.8, chunk_size=4))

    def full(p):
        logits = nnx.merge(graphdef, p)(ids, mask)[:, :-1] / 0.8
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), ids[:, 1:, None], -1)[..., 0]
        return jnp.sum(weights[:, 1:] * lp)

    grads_chunked, grads_full = jax.jit(jax.grad(chunked))(params), jax.jit(jax.grad(full))(params)
    for a, b in zip(jax.tree.leaves(grads_chunked), jax.tree.leaves(grads_full)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_logprobs_never_build_full_vocab_logits():
    """With a vocabulary of 151,936, no [B, T, V] float32 appears in the compiled forward+backward."""
    cfg = PRESETS["tiny-test"].replace(vocab_size=151936)
    from flax import nnx

    abstract = nnx.eval_shape(lambda: init_model(cfg))
    graphdef, params = nnx.split(abstract, nnx.Param)
    b, t, chunk = 2, 64, 8

    def loss(p, ids):
        return jnp.sum(token_logprobs(nnx.merge(graphdef, p), ids, jnp.ones_like(ids), 1.0, chunk_size=chunk))

    hlo = jax.jit(jax.grad(loss)).lower(params.to_pure_dict(),
                                        jax.ShapeDtypeStruct((b, t), jnp.int32)).as_text()
    assert "151936" in hlo
    assert f"f32[{b},{t - 1},151936]" not in hlo and f"f32[{b},{t},151936]" not in hlo
    assert f"f32[{t // chunk},{b},{chunk},151936]" not in hlo


# ---------------------------------------------------------------------------------- batch layout


def test_train_batch_masks_come_from_lengths_even_when_pad_is_eos():
    eos = pad = 0
    prompts = [[5, 6, 7], [8, 9]]
    responses = np.array([[11, 12, eos, pad, pad], [13, 14, 15, 16, 17]], np.int32)  # row 0 ends with EOS
    lengths = np.array([3, 5])  # EOS counted; row 1 truncated
    logprobs = -np.arange(1, 11, dtype=np.float32).reshape(2, 5)
    batch = make_train_batch(prompts, responses, lengths, logprobs, np.array([1.0, -1.0]), pad_id=pad,
                             total_length=9)
    np.testing.assert_array_equal(batch.input_ids, [[5, 6, 7, 11, 12, 0, 0, 0, 0], [8, 9, 13, 14, 15, 16, 17, 0, 0]])
    np.testing.assert_array_equal(batch.attention_mask, [[1] * 6 + [0] * 3, [1] * 7 + [0] * 2])
    np.testing.assert_array_equal(batch.response_mask, [[0, 0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(batch.old_logprobs[0], [0, 0, 0, -1, -2, -3, 0, 0, 0])
    np.testing.assert_array_equal(batch.old_logprobs[1], [0, 0, -6, -7, -8, -9, -10, 0, 0])
    np.testing.assert_array_equal(batch.response_lengths, [3, 5])
    masked = make_train_batch(prompts, responses, lengths, logprobs, np.array([1.0, -1.0]), pad_id=pad,
                              total_length=9, loss_mask=np.array([True, False]))
    assert masked.response_mask[1].sum() == 0 and masked.old_logprobs[1].sum() == 0
    np.testing.assert_array_equal(masked.attention_mask, batch.attention_mask)


def test_train_batch_errors_name_the_row():
    ok = dict(pad_id=0, total_length=6)
    with pytest.raises(ValueError, match="row 1: prompt 3 \\+ response 4 tokens exceed total_length 6"):
        make_train_batch([[1], [1, 2, 3]], np.ones((2, 4)), [2, 4], np.zeros((2, 4)), [0.0, 0.0], **ok)
    with pytest.raises(ValueError, match="row 0: response length 5 outside"):
        make_train_batch([[1]], np.ones((1, 4)), [5], np.zeros((1, 4)), [0.0], **ok)
    with pytest.raises(ValueError, match="row 0: empty prompt"):
        make_train_batch([[]], np.ones((1, 4)), [1], np.zeros((1, 4)), [0.0], **ok)
    with pytest.raises(ValueError, match="row 0: advantage nan"):
        make_train_batch([[1]], np.ones((1, 4)), [1], np.zeros((1, 4)), [np.nan], **ok)
    with pytest.raises(ValueError, match="response_logprobs shape"):
        make_train_batch([[1]], np.ones((1, 4)), [1], np.zeros((1, 3)), [0.0], **ok)


def test_entropy_of_peaked_logits_matches_float64():
    """|logits / T| around 37: the entropy from max-shifted, renormalised probabilities stays within 1e-5
    of a float64 reference (exp(logits - lse) alone drifted by 5e-5 there)."""
    from greso_jax.rl.logprobs import _chunk_stats

    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(2, 3, 8)), jnp.float32)
    unembedding = jnp.asarray(rng.normal(size=(8, 50)) * 9.0, jnp.float32)
    targets = jnp.zeros((2, 3), jnp.int32)
    _, entropy = _chunk_stats(unembedding, hidden, targets, 1.0, jnp.float32)
    logits = np.einsum("bcd,dv->bcv", np.asarray(hidden, np.float64), np.asarray(unembedding, np.float64))
    assert np.abs(logits).max() > 30
    shifted = logits - logits.max(-1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    reference = -(p * np.log(np.clip(p, 1e-300, None))).sum(-1)
    np.testing.assert_allclose(np.asarray(entropy), reference, atol=1e-5)
