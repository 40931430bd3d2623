"""Learner: exact zero gradient on zero-variance batches, micro-batch invariance, non-finite guard, state round trip, learning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from greso_jax.config import get_config
from greso_jax.run.build import learner_from_config
from greso_jax.models import PRESETS, init_model
from greso_jax.rl import compute_advantages, make_train_batch
from greso_jax.rl.logprobs import token_logprobs
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.train_step import MicroBatches, accumulate_gradients

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
VOCAB = 64
ONE_LAYER = PRESETS["tiny-test"].replace(num_layers=1)  # compile time dominates these tests


def random_batch(seed=0, rows=8, max_response=6, total_length=12, zero_advantage=False):
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, VOCAB, rng.integers(2, 5))) for _ in range(rows)]
    lengths = rng.integers(1, max_response + 1, rows)
    lengths[-1] = max_response
    advantages = np.zeros(rows, np.float32) if zero_advantage else rng.normal(size=rows).astype(np.float32)
    loss_mask = np.ones(rows, bool)
    loss_mask[1] = False  # a row generated but kept out of the loss (AERO's rejection)
    return make_train_batch(prompts, rng.integers(1, VOCAB, (rows, max_response)), lengths,
                            rng.normal(-4.2, 0.3, (rows, max_response)), advantages, pad_id=0,
                            total_length=total_length, loss_mask=loss_mask)


def learner_config(**rl):
    c = get_config()
    c.sampling.max_new_tokens = 6
    c.train.learning_rate = 1e-3
    c.rl.update(rl)
    return c


def params_of(learner):
    return jax.device_get(nnx.state(learner.model, nnx.Param).to_pure_dict())


# One compile per aggregation: the two sequence-level ones run with the slow tests.
@pytest.mark.parametrize("aggregation", [
    "token-mean", *(pytest.param(a, marks=pytest.mark.slow) for a in AGGREGATIONS if a != "token-mean")])
def test_zero_variance_batch_gives_exactly_zero_gradient(aggregation):
    model = init_model(ONE_LAYER, seed=0)
    graphdef, params = nnx.split(model, nnx.Param)
    batch = random_batch(zero_advantage=True)
    micro = MicroBatches(*(jnp.asarray(np.asarray(x)).reshape((2, 4) + np.shape(x)[1:]) for x in batch[:5]))
    cfg = LossConfig(aggregation=aggregation, clip_low=0.2, clip_high=0.28, dual_clip=3.0, token_sum_norm=6.0)
    grads, stats = jax.jit(lambda p: accumulate_gradients(graphdef, p, micro, cfg, temperature=1.0,
                                                          chunk_size=4))(params.to_pure_dict())
    assert float(stats.tokens) > 0
    for leaf in jax.tree.leaves(grads):
        assert np.all(np.asarray(leaf) == 0.0)


def test_zero_variance_update_leaves_params_unchanged_without_weight_decay():
    config = learner_config(micro_batch_size=4)
    config.train.weight_decay = 0.0
    learner = learner_from_config(init_model(ONE_LAYER, seed=0), config)
    before = params_of(learner)
    metrics = learner.update(random_batch(zero_advantage=True), num_minibatches=2)
    assert metrics["actor/grad_norm"] == 0.0 and metrics["actor/frac_zero_std_groups"] == 1.0
    jax.tree.map(np.testing.assert_array_equal, before, params_of(learner))


@pytest.mark.parametrize("aggregation", [
    "token-mean", pytest.param("seq-mean-token-mean", marks=pytest.mark.slow),
    pytest.param("seq-mean-token-sum-norm", marks=pytest.mark.slow)])
def test_micro_batch_size_does_not_change_the_update(aggregation):
    batch = random_batch(seed=1)
    results = []
    for micro in (1, 4):
        config = learner_config(micro_batch_size=micro, loss_aggregation=aggregation, kl_coef=0.1,
                                entropy_coef=0.01, dual_clip=3.0, clip_high=0.28)
        learner = learner_from_config(init_model(ONE_LAYER, seed=0), config)
        metrics = learner.update(batch, num_minibatches=2)  # mini-batches of 4 rows
        results.append((params_of(learner), metrics))
    reference_params, reference_metrics = results[0]
    initial = jax.device_get(nnx.state(init_model(ONE_LAYER, seed=0), nnx.Param).to_pure_dict())
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: np.abs(a - b).max(), reference_params, initial))
    assert max(changed) > 1e-4  # the update moved the parameters
    for params, metrics in results[1:]:
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0), reference_params, params)
        for name in ("actor/loss", "actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm"):
            assert metrics[name] == pytest.approx(reference_metrics[name], rel=1e-4, abs=1e-6), name


def test_nonfinite_loss_skips_the_update_and_is_reported():
    learner = learner_from_config(init_model(ONE_LAYER, seed=0), learner_config(micro_batch_size=4))
    good = random_batch(seed=2)
    bad = good._replace(old_logprobs=np.where(good.response_mask > 0, -np.inf, 0.0).astype(np.float32))
    before = params_of(learner)
    metrics = learner.update(bad, num_minibatches=1)
    assert metrics["actor/nonfinite_skipped"] == 1.0
    jax.tree.map(np.testing.assert_array_equal, before, params_of(learner))
    metrics = learner.update(good, num_minibatches=1)
    assert metrics["actor/nonfinite_skipped"] == 0.0 and np.isfinite(metrics["actor/loss"])
    assert not np.array_equal(before["embed"], params_of(learner)["embed"])


def test_metrics_names_and_batch_statistics():
    learner = learner_from_config(init_model(ONE_LAYER, seed=0), learner_config(micro_batch_size=4))
    batch = random_batch(seed=3)
    truncated = np.zeros(8, bool)
    truncated[-1] = True
    metrics = learner.update(batch, num_minibatches=2, truncated=truncated, group_ids=np.repeat([0, 1], 4))
    names = {"actor/loss", "actor/pg_loss", "actor/kl", "actor/entropy", "actor/clipfrac_low", "actor/clipfrac_high",
             "actor/grad_norm", "actor/lr", "actor/advantage_mean", "actor/advantage_std",
             "actor/frac_zero_std_groups", "actor/nonfinite_skipped", "response/length_mean", "response/length_max",
             "response/truncated_frac", "perf/train_tokens_per_s", "actor/update_tokens", "actor/update_padding_share",
             "actor/logprob_mismatch", "actor/logprob_mismatch_max"}
    assert names <= set(metrics)
    assert metrics["response/length_max"] == 6 and metrics["response/truncated_frac"] == 0.125
    assert metrics["response/length_mean"] == pytest.approx(np.mean(batch.response_lengths))
    in_loss = np.asarray(batch.response_mask).sum(1) > 0
    assert metrics["actor/advantage_mean"] == pytest.approx(float(batch.advantages[in_loss].mean()), abs=1e-6)
    assert metrics["actor/lr"] == pytest.approx(1e-3) and metrics["perf/train_tokens_per_s"] > 0
    assert learner.step == 1


def test_bad_split_raises_clear_errors():
    learner = learner_from_config(init_model(ONE_LAYER, seed=0), learner_config(micro_batch_size=4))
    with pytest.raises(ValueError, match="8 rows cannot be split into num_minibatches=3"):
        learner.update(random_batch(), num_minibatches=3)
    with pytest.raises(ValueError, match="mini-batch of 2 rows .* not a multiple of rl.micro_batch_size 4"):
        learner.update(random_batch(), num_minibatches=4)


@pytest.mark.slow
def test_train_state_round_trip_through_orbax(tmp_path):
    import orbax.checkpoint as ocp

    config = learner_config(micro_batch_size=4)
    config.train.lr_schedule, config.train.warmup_steps, config.train.num_steps = "warmup_cosine", 2, 10
    learner = learner_from_config(init_model(ONE_LAYER, seed=0), config)
    learner.update(random_batch(seed=4), num_minibatches=1)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "state", learner.train_state())
        checkpointer.wait_until_finished()
        restored_into = learner_from_config(init_model(ONE_LAYER, seed=5), config)
        restored = checkpointer.restore(tmp_path / "state", restored_into.train_state())
    restored_into.load_train_state(restored)
    assert restored_into.step == 1
    jax.tree.map(np.testing.assert_array_equal, params_of(learner), params_of(restored_into))
    a = learner.update(random_batch(seed=5), num_minibatches=1)
    b = restored_into.update(random_batch(seed=5), num_minibatches=1)
    assert a["actor/lr"] == b["actor/lr"] == pytest.approx(1e-3 * 2 / 2)
    jax.tree.map(np.testing.assert_array_equal, params_of(learner), params_of(restored_into))
    with pytest.raises(ValueError, match="load_train_state: missing 'opt_state'"):
        restored_into.load_train_state({"params": restored["params"], "step": 0})


@pytest.mark.slow
def test_grpo_learns_a_toy_reward_with_the_real_sampler():
    """Reward 1 when the first response token is TARGET; chance is 1/8 with an 8-token vocabulary."""
    from greso_jax.sampling import generate

    vocab, target, num_prompts, group = 8, 3, 8, 8
    model = init_model(PRESETS["tiny-test"].replace(vocab_size=vocab), seed=0)
    config = learner_config(micro_batch_size=16, mini_batch_size=4, kl_coef=0.0)
    config.sampling.max_new_tokens = 2
    config.train.learning_rate = 3e-3
    learner = learner_from_config(model, config)
    prompts = [[1 + i % 7, 1 + (3 * i) % 7] for i in range(num_prompts)]
    rewards_per_step = []
    for step in range(30):
        out = generate(learner.model, prompts, num_samples=group, max_new_tokens=2, rng=jax.random.key(step),
                       temperature=1.0)
        rewards = (out.tokens[:, 0] == target).astype(np.float32).reshape(num_prompts, group)
        rewards_per_step.append(rewards.mean())
        advantages = compute_advantages(rewards, "grpo").reshape(-1)
        batch = make_train_batch([p for p in prompts for _ in range(group)], out.tokens, out.lengths, out.logprobs,
                                 advantages, pad_id=0, total_length=4)
        if step == 0:  # the learner's log-probs are the sampler's: the first ratio is 1
            recomputed = np.asarray(token_logprobs(learner.model, jnp.asarray(batch.input_ids),
                                                   jnp.asarray(batch.attention_mask), 1.0))
            mask = np.asarray(batch.response_mask) > 0
            np.testing.assert_allclose(recomputed[mask], np.asarray(batch.old_logprobs)[mask], atol=1e-4)
        learner.update(batch, num_minibatches=2)
    assert np.mean(rewards_per_step[:3]) < 0.35
    final = generate(learner.model, prompts, num_samples=32, max_new_tokens=2, rng=jax.random.key(999))
    assert (final.tokens[:, 0] == target).mean() > 0.8


def test_frac_zero_std_groups_counts_groups_not_rows():
    """Two real groups, one all-zero and one mixed whose middle rows have advantage exactly 0
    (drgrpo with a reward at the mean), plus filler rows: half of the groups, not 6 of 8 rows."""
    from greso_jax.rl.batch import batch_statistics

    advantages = np.array([0, 0, 0, 0, 0.5, 0, 0, -0.5, 0, 0], np.float32)
    lengths = np.array([3, 2, 4, 1, 2, 2, 3, 5, 0, 0], np.float32)  # the last two: filler rows
    arrays = {"advantages": advantages, "response_lengths": lengths,
              "response_mask": (np.arange(6)[None] < lengths[:, None]).astype(np.float32)}
    group_ids = np.array([0, 0, 0, 0, 1, 1, 1, 1, -1, -1])
    assert batch_statistics(arrays, None, group_ids)["actor/frac_zero_std_groups"] == 0.5
    assert batch_statistics(arrays, None, None)["actor/frac_zero_std_groups"] == 0.75  # rows, without group ids
