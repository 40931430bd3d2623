"""Length-bucketed micro-batches: the bucket ladder, the plan, and an update equal to the padded one for every loss aggregation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from greso_jax.config import get_config
from greso_jax.models import PRESETS, init_model
from greso_jax.rl import make_train_batch
from greso_jax.rl.losses import LOSS_AGGREGATIONS, LossConfig
from greso_jax.rl.micro_batches import (bucket_lengths, bucketed_micro_batches, computed_tokens,
                                        row_lengths)
from greso_jax.rl.train_step import (MicroBatches, Mismatch, accumulate_gradients, inverse_denominator,
                                     micro_batch_gradient, zero_sums)
from greso_jax.run.build import learner_from_config

VOCAB = 64
ONE_LAYER = PRESETS["tiny-test"].replace(num_layers=1)
TOTAL = 24


def spread_batch(seed=0, rows=16, uniform=False):
    """Rows of 2-5 prompt tokens and 1-18 response tokens in a 24-wide batch: several buckets
    (uniform: every row 3 + 15 tokens, one bucket)."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, VOCAB, 3 if uniform else rng.integers(2, 6))) for _ in range(rows)]
    lengths = np.full(rows, 15) if uniform else rng.integers(1, 19, rows)
    loss_mask = np.ones(rows, bool)
    loss_mask[3] = False  # generated, kept out of the loss: a row with no response token in the mask
    return make_train_batch(prompts, rng.integers(1, VOCAB, (rows, 18)), lengths, rng.normal(-4.2, 0.3, (rows, 18)),
                            rng.normal(size=rows).astype(np.float32), pad_id=0, total_length=TOTAL,
                            loss_mask=loss_mask)


def test_bucket_ladder_ends_at_the_width_and_its_neighbours_are_at_most_the_ratio_apart():
    for width, ratio in ((4096, 1.25), (20, 1.25), (1000, 1.5), (64, 1.1)):
        ladder = bucket_lengths(width, ratio)
        assert ladder[-1] == width and list(ladder) == sorted(set(ladder))
        assert all(b / a <= ratio + 1e-12 for a, b in zip(ladder, ladder[1:]))
        assert all(b % 8 == 0 for b in ladder[:-1] if b >= 64)
    with pytest.raises(ValueError):
        bucket_lengths(16, 1.0)


def test_plan_keeps_rows_in_their_mini_batch_and_trims_each_micro_batch_to_its_bucket():
    lengths = np.array([3, 9, 5, 1, 7, 2, 8, 4, 9, 9, 6, 6])
    buckets = bucket_lengths(10, 1.25)
    plan = bucketed_micro_batches(lengths, num_minibatches=2, micro_rows=2, buckets=buckets)
    for index, mini in enumerate(plan):
        rows = np.concatenate([mb.rows for mb in mini])
        np.testing.assert_array_equal(np.sort(rows), np.arange(6 * index, 6 * index + 6))
        assert list(lengths[rows]) == sorted(lengths[rows], reverse=True)  # longest first
        for mb in mini:
            longest = lengths[mb.rows].max()
            assert mb.length == min(b for b in buckets if b >= longest)
    np.testing.assert_array_equal(plan[1][0].rows, [8, 9])  # ties keep batch order
    assert computed_tokens(plan) == sum(mb.rows.size * mb.length for mini in plan for mb in mini)
    np.testing.assert_array_equal(row_lengths(np.array([[1, 1, 0], [0, 0, 0], [1, 1, 1]])), [2, 0, 3])
    with pytest.raises(ValueError, match="exceeds the longest bucket"):
        bucketed_micro_batches(lengths, num_minibatches=1, micro_rows=2, buckets=(4, 8))


def _device(batch, rows, length):
    """The batch's rows `rows` trimmed to `length` columns, as one [m, L] micro-batch."""
    return MicroBatches(*(jnp.asarray(np.asarray(x)[rows, :length]) for x in batch[:4]),
                        advantages=jnp.asarray(np.asarray(batch.advantages)[rows]))


@pytest.mark.parametrize("aggregation", list(LOSS_AGGREGATIONS))
def test_bucketed_gradient_equals_the_padded_gradient(aggregation):
    model = init_model(ONE_LAYER, seed=0)
    graphdef, params = nnx.split(model, nnx.Param)
    params = params.to_pure_dict()
    batch = spread_batch()
    cfg = LossConfig(aggregation=aggregation, clip_low=0.2, clip_high=0.28, dual_clip=3.0, entropy_coef=0.01,
                     token_sum_norm=18.0)
    micro_rows = 4
    padded = MicroBatches(*(jnp.asarray(np.asarray(x)).reshape((4, micro_rows) + np.shape(x)[1:]) for x in batch[:5]))
    want_grads, want = jax.jit(lambda p: accumulate_gradients(graphdef, p, padded, cfg, temperature=0.9,
                                                              chunk_size=4))(params)

    (mini,) = bucketed_micro_batches(row_lengths(batch.attention_mask), num_minibatches=1, micro_rows=micro_rows,
                                     buckets=bucket_lengths(TOTAL, 1.25))
    assert len({mb.length for mb in mini}) >= 3 and max(mb.length for mb in mini) < TOTAL + 1
    inv = inverse_denominator(jnp.asarray(batch.response_mask), cfg)
    step = jax.jit(lambda p, mb: micro_batch_gradient(graphdef, p, mb, cfg, inv, temperature=0.9, chunk_size=4))
    grads, sums, mismatch = jax.tree.map(jnp.zeros_like, params), zero_sums(), Mismatch.zero()
    for mb in mini:
        g, s, m = step(params, _device(batch, mb.rows, mb.length))
        grads, sums, mismatch = jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, sums, s), mismatch.combine(m)
    assert float(sums.loss * inv) == pytest.approx(float(want.loss), abs=1e-5)
    assert float(mismatch.abs_sum / mismatch.tokens) == pytest.approx(float(want.logprob_mismatch), abs=1e-5)
    assert float(want.tokens) == float(sums.tokens) == batch.response_mask.sum()
    assert max(float(jnp.abs(x).max()) for x in jax.tree.leaves(want_grads)) > 1e-3  # a real gradient
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0), want_grads, grads)


LEARNING_RATE = 1e-3


def learner_config(layout, aggregation="token-mean"):
    c = get_config()
    c.train.learning_rate = LEARNING_RATE
    c.rl.update(micro_batch_size=4, loss_aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01, ppo_epochs=2,
                update_layout=layout)
    return c


@pytest.mark.parametrize("aggregation,uniform", [
    ("token-mean", False), ("token-mean", True),
    *(pytest.param(a, False, marks=pytest.mark.slow) for a in LOSS_AGGREGATIONS if a != "token-mean")])
def test_bucketed_update_trains_the_padded_update(aggregation, uniform):
    """Two epochs over two mini-batches, KL and entropy on: parameters and metrics agree; the
    bucketed update computes fewer tokens and says so. Uniform rows: each mini-batch's micro-batches
    share one bucket and are scanned in one call."""
    batch = spread_batch(seed=1, uniform=uniform)
    results = {}
    for layout in ("padded", "bucketed"):
        learner = learner_from_config(init_model(ONE_LAYER, seed=0), learner_config(layout, aggregation))
        metrics = learner.update(batch, num_minibatches=2)
        results[layout] = (jax.device_get(nnx.state(learner.model, nnx.Param).to_pure_dict()), metrics)
    (padded_params, padded), (bucketed_params, bucketed) = results["padded"], results["bucketed"]
    # Adam divides each update by the root of the squared-gradient average, so a parameter whose gradient
    # is near zero turns the float noise of a different summation order (the gradients agree within
    # 1e-5, test above) into a visible share of a step: 1.3e-5 on one element of 1,024 on one CPU, 0 on
    # another. An error in the bucketed path (a mask, a normaliser, a bucket's rows) moves parameters by
    # a large share of the 1e-3 step on most elements; 5% of one step is far below that.
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=0.05 * LEARNING_RATE, rtol=0),
                 padded_params, bucketed_params)
    for name in ("actor/loss", "actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm",
                 "actor/clipfrac_low", "actor/clipfrac_high", "actor/logprob_mismatch", "actor/logprob_mismatch_max"):
        assert bucketed[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-5), name
    real = float(np.asarray(batch.attention_mask).sum())
    assert padded["actor/update_tokens"] == 16 * TOTAL
    assert padded["actor/update_padding_share"] == pytest.approx(1 - real / (16 * TOTAL))
    assert real <= bucketed["actor/update_tokens"] < padded["actor/update_tokens"]
    assert bucketed["actor/update_padding_share"] == pytest.approx(1 - real / bucketed["actor/update_tokens"])


def test_logprob_mismatch_is_zero_against_the_learners_own_logprobs():
    """old_logprobs set to the learner's log-probs of the batch: the mismatch is float32 rounding."""
    from greso_jax.rl.logprobs import token_logprobs

    model = init_model(ONE_LAYER, seed=0)
    batch = spread_batch(seed=2)
    own = np.asarray(token_logprobs(model, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask), 1.0))
    batch = batch._replace(old_logprobs=(own * batch.response_mask).astype(np.float32))
    for layout in ("padded", "bucketed"):
        learner = learner_from_config(init_model(ONE_LAYER, seed=0), learner_config(layout))
        metrics = learner.update(batch, num_minibatches=2)
        assert metrics["actor/logprob_mismatch_max"] < 1e-5 and metrics["actor/logprob_mismatch"] < 1e-6, layout
