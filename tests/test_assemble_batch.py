"""assemble_batch: accepted groups -> the learner's TrainBatch (row order, padding, masks, overrides, ragged groups)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from greso_jax.rl.batch import assemble_batch
from greso_jax.sampling import SampleOutput

PAD = 0


def output(prompts, num_samples, first_token):
    """A hand-made sampler output: response row r is [first_token + r, ...], length 1 + r % 3."""
    rows = len(prompts) * num_samples
    tokens = np.full((rows, 4), PAD, np.int32)
    lengths = (1 + np.arange(rows) % 3).astype(np.int32)
    for r in range(rows):
        tokens[r, :lengths[r]] = first_token + r
    logprobs = np.where(tokens != PAD, -0.5 - np.arange(rows)[:, None] / 10, 0.0).astype(np.float32)
    return SampleOutput(tokens=tokens, logprobs=logprobs, lengths=lengths, truncated=lengths == 3,
                        kv_cache_bytes=0, prompt_rows=len(prompts), rows=rows, prompt_length=4, prompts=prompts,
                        num_samples=num_samples)


def group(refs, rewards, loss_mask=None, baseline=math.nan, scale=math.nan):
    rewards = np.asarray(rewards, np.float32)
    return SimpleNamespace(response_refs=np.asarray(refs, np.int64).reshape(-1, 3), rewards=rewards,
                           loss_mask=np.ones(len(rewards), bool) if loss_mask is None else np.asarray(loss_mask),
                           baseline=baseline, scale=scale)


OUTPUTS = [output([[1, 2], [3]], 2, first_token=10), output([[4, 5, 6]], 3, first_token=30)]


def test_rows_follow_the_groups_and_point_at_their_prompt_and_response():
    groups = [group([[1, 0, 2], [1, 0, 0]], [1.0, 0.0]),  # call 1, prompt 0, samples 2 then 0
              group([[0, 1, 0], [0, 1, 1]], [0.0, 1.0])]  # call 0, prompt 1 -> rows 2, 3
    out = assemble_batch(groups, OUTPUTS, advantage="grpo", pad_id=PAD, total_length=8, row_multiple=1)
    batch = out.batch
    # Row = prompt then response: (call 1, row 2) is token 32 with length 3; (call 0, row 2) token 12, length 3.
    np.testing.assert_array_equal(batch.input_ids[0], [4, 5, 6, 32, 32, 32, PAD, PAD])
    np.testing.assert_array_equal(batch.input_ids[1], [4, 5, 6, 30, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(batch.input_ids[2], [3, 12, 12, 12, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(batch.input_ids[3], [3, 13, PAD, PAD, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(batch.response_lengths, [3, 1, 3, 1])
    np.testing.assert_array_equal(out.truncated, [True, False, True, False])
    np.testing.assert_array_equal(out.group_ids, [0, 0, 1, 1])
    np.testing.assert_allclose(batch.old_logprobs[0, 3:6], -0.5 - 2 / 10)
    adv = 0.5 / (math.sqrt(0.5) + 1e-6)  # (r - 0.5) / (unbiased std of {0, 1} + eps)
    np.testing.assert_allclose(batch.advantages, [adv, -adv, -adv, adv], rtol=1e-6)
    assert out.stats == {"rollout/reward_mean": 0.5, "train/groups": 2, "train/responses": 4}


def test_filler_rows_pad_to_the_row_multiple_and_stay_out_of_the_loss():
    groups = [group([[0, 0, 0], [0, 0, 1], [0, 1, 0]], [1.0, 0.0, 1.0])]
    out = assemble_batch(groups, OUTPUTS, advantage="drgrpo", pad_id=PAD, total_length=6, row_multiple=4)
    batch = out.batch
    assert batch.num_rows == 4 and out.stats["train/responses"] == 3
    np.testing.assert_array_equal(batch.input_ids[3], [PAD] * 6)
    np.testing.assert_array_equal(batch.attention_mask[3], [1, 0, 0, 0, 0, 0])  # the one-token pad prompt
    assert batch.response_mask[3].sum() == 0 and batch.advantages[3] == 0 and batch.response_lengths[3] == 0
    np.testing.assert_array_equal(out.group_ids, [0, 0, 0, -1])
    assert not out.truncated[3]
    np.testing.assert_allclose(batch.advantages[:3], np.array([1, 0, 1]) - 2 / 3, rtol=1e-6)
    exact = assemble_batch(groups, OUTPUTS, advantage="drgrpo", pad_id=PAD, total_length=6, row_multiple=3)
    assert exact.batch.num_rows == 3


def test_loss_mask_baseline_and_scale_overrides_and_ragged_groups():
    groups = [
        # AERO's selective rejection: the masked response leaves the batch and is ignored by the mean.
        group([[1, 0, 0], [1, 0, 1], [1, 0, 2]], [1.0, 0.0, 0.0], loss_mask=[True, True, False]),
        # An all-correct group with a Beta-posterior baseline and scale: no dead zone.
        group([[0, 0, 0], [0, 0, 1]], [1.0, 1.0], baseline=0.75, scale=math.sqrt(0.75 * 0.25)),
        group([[0, 1, 1]], [0.0]),  # ragged: one response
    ]
    out = assemble_batch(groups, OUTPUTS, advantage="grpo", pad_id=PAD, total_length=8, row_multiple=2)
    batch = out.batch
    assert batch.num_rows == 6  # 5 responses that enter the loss + 1 filler row
    np.testing.assert_array_equal(batch.response_mask.sum(axis=1) > 0, [True, True, True, True, True, False])
    adv_first = 0.5 / (math.sqrt(0.5) + 1e-6)  # masked-in {1, 0}: mean 0.5, std sqrt(0.5)
    aero = 0.25 / (math.sqrt(0.75 * 0.25) + 1e-6)
    np.testing.assert_allclose(batch.advantages, [adv_first, -adv_first, aero, aero, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(out.group_ids, [0, 0, 1, 1, 2, -1])
    assert out.stats["rollout/reward_mean"] == pytest.approx(3 / 5)  # masked-out responses do not count
    assert out.stats["train/groups"] == 3 and out.stats["train/responses"] == 5
    every = assemble_batch(groups[1:], OUTPUTS, advantage="grpo", pad_id=PAD, total_length=8, row_multiple=2)
    assert every.batch.num_rows == 4  # without the first group: two row pairs fewer


def test_a_rejected_response_saves_its_row_only_when_the_row_multiple_lets_it():
    """The same groups with the rejected response kept in the loss or not: one row fewer at row
    multiple 1; at row multiple 2 the five kept rows pad back to the six the unrejected batch has."""
    rejected = [group([[1, 0, 0], [1, 0, 1], [1, 0, 2]], [1.0, 0.0, 0.0], loss_mask=[True, True, False]),
                group([[0, 0, 0], [0, 0, 1], [0, 1, 1]], [1.0, 0.0, 0.0])]
    kept = [group(g.response_refs, g.rewards) for g in rejected]
    for multiple, saved_rows in ((1, 1), (2, 0), (4, 0), (8, 0)):
        with_rejection, without = (assemble_batch(groups, OUTPUTS, advantage="grpo", pad_id=PAD, total_length=8,
                                                  row_multiple=multiple) for groups in (rejected, kept))
        assert with_rejection.stats["train/responses"] == 5 and without.stats["train/responses"] == 6
        assert without.batch.num_rows - with_rejection.batch.num_rows == saved_rows


def test_bad_arguments():
    with pytest.raises(ValueError, match="no groups"):
        assemble_batch([], OUTPUTS, advantage="grpo", pad_id=PAD, total_length=8, row_multiple=1)
    with pytest.raises(ValueError, match="mode 'ppo'"):
        assemble_batch([group([[0, 0, 0]], [1.0])], OUTPUTS, advantage="ppo", pad_id=PAD, total_length=8,
                       row_multiple=1)
