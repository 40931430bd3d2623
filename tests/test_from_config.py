"""from_config: the experiment config maps onto the learner's and the sampler's explicit settings."""

from greso_jax.config import get_config
import numpy as np

from greso_jax.data.rows import PromptRow
from greso_jax.run.build import (decode_schedule, eval_settings, learner_from_config, loss_config, optimizer_settings,
                                 prompt_levels, sampling_kwargs, selector_from_config)
from greso_jax.run.scoring import EVAL_SEED_OFFSET, EvalSettings
from greso_jax.models import PRESETS, init_model
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.optim import OptimizerSettings


def test_learner_settings_come_from_the_config():
    c = get_config()
    c.rl.loss_aggregation, c.rl.kl_coef, c.rl.kl_estimator, c.rl.clip_high = "seq-mean-token-sum-norm", 0.0, "k1", 0.28
    c.rl.micro_batch_size, c.rl.ppo_epochs = 4, 2
    c.sampling.max_new_tokens, c.sampling.temperature = 12, 0.7
    c.train.lr_schedule, c.train.warmup_steps, c.train.num_steps = "warmup_cosine", 3, 40
    assert loss_config(c) == LossConfig(aggregation="seq-mean-token-sum-norm", clip_high=0.28, kl_estimator="k1",
                                        token_sum_norm=12.0)
    assert optimizer_settings(c) == OptimizerSettings(lr_schedule="warmup_cosine", warmup_steps=3, num_steps=40)
    learner = learner_from_config(init_model(PRESETS["tiny-test"].replace(num_layers=1), seed=0), c)
    assert (learner.loss, learner.optimizer) == (loss_config(c), optimizer_settings(c))
    assert (learner.micro_batch_size, learner.ppo_epochs, learner.temperature) == (4, 2, 0.7)


def test_sampling_kwargs():
    c = get_config()
    c.sampling.max_rows_per_call, c.sampling.top_k = 64, 5
    assert sampling_kwargs(c) == {
        "max_new_tokens": c.sampling.max_new_tokens, "temperature": 1.0, "top_p": 1.0, "top_k": 5,
        "prompt_buckets": tuple(c.sampling.prompt_length_buckets), "row_buckets": tuple(c.sampling.row_buckets),
        "max_rows_per_call": 64, "min_compact_rows": c.sampling.min_compact_rows,
        "compact_shrink": c.sampling.compact_shrink, "live_prompts": c.sampling.live_prompts,
        "response_chunks": c.sampling.response_chunks}


def test_eval_settings_come_from_the_eval_section_and_the_sampler():
    c = get_config()
    c.seed, c.eval.num_samples, c.eval.temperature, c.eval.top_p = 5, 3, 0.6, 0.9
    c.data.prompt_template, c.data.max_prompt_length, c.sampling.max_new_tokens = "chat", 40, 12
    c.sampling.prompt_length_buckets, c.sampling.row_buckets = (16, 40), (8,)
    assert eval_settings(c) == EvalSettings(template="chat", num_samples=3, temperature=0.6, top_p=0.9,
                                            max_new_tokens=12, max_prompt_length=40, seed=5 + EVAL_SEED_OFFSET,
                                            prompt_buckets=(16, 40), row_buckets=(8,), schedule=decode_schedule(c))
    c.eval.max_new_tokens = 7  # 0 (the default) means the sampler's budget
    assert eval_settings(c).max_new_tokens == 7
    overridden = eval_settings(c, seed=11, batch_prompts=4)
    assert (overridden.seed, overridden.batch_prompts, overridden.num_samples) == (11, 4, 3)


def test_the_datas_levels_reach_the_strategies_that_use_them():
    rows = [PromptRow(prompt_id=i, question="q", ground_truth="1", data_source="arith", difficulty=i % 3)
            for i in (0, 1, 2, 4)]  # id 3 is missing (a dropped row): no level
    levels = prompt_levels(rows)
    np.testing.assert_array_equal(levels, [0, 1, 2, -1, 1])
    c = get_config()
    c.selection.strategy = "posterior"
    np.testing.assert_array_equal(selector_from_config(c, num_prompts=5, prompt_levels=levels).level_index,
                                  [1, 2, 3, 0, 2])
    c.selection.strategy = "greso"  # takes no levels: they are not passed
    assert selector_from_config(c, num_prompts=5, prompt_levels=levels).strategy == "greso"
