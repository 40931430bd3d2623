"""Builds the low layers' explicit settings from the experiment config.

Low layers (rl, sampling, rewards, selection, data) take explicit arguments; this top-layer module
is where the config tree's fields are mapped onto them, so a renamed config field changes one place.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jax.sharding import Mesh

from greso_jax import selection
from greso_jax.data import catalog
from greso_jax.data.rows import PromptRows
from greso_jax.data.sources import load_eval_sets, load_source
from greso_jax.rl.learner import Learner
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.optim import OptimizerSettings


def loss_config(config) -> LossConfig:
    """config.rl's loss fields; Dr. GRPO's constant C is the response budget, sampling.max_new_tokens."""
    rl = config.rl
    return LossConfig(aggregation=rl.loss_aggregation, clip_low=float(rl.clip_low), clip_high=float(rl.clip_high),
                      dual_clip=float(rl.dual_clip), kl_coef=float(rl.kl_coef), kl_estimator=rl.kl_estimator,
                      entropy_coef=float(rl.entropy_coef), token_sum_norm=float(config.sampling.max_new_tokens))


def optimizer_settings(config) -> OptimizerSettings:
    train = config.train
    return OptimizerSettings(learning_rate=float(train.learning_rate), lr_schedule=train.lr_schedule,
                             warmup_steps=int(train.warmup_steps), num_steps=int(train.num_steps),
                             adam_b1=float(train.adam_b1), adam_b2=float(train.adam_b2),
                             weight_decay=float(train.weight_decay), grad_clip=float(train.grad_clip))


def learner_from_config(model, config, mesh: Mesh | None = None, *, reference_model=None) -> Learner:
    """The run's learner: loss and optimiser from config.rl / config.train, the sampler's temperature."""
    return Learner(model, loss=loss_config(config), optimizer=optimizer_settings(config),
                   micro_batch_size=int(config.rl.micro_batch_size), ppo_epochs=int(config.rl.ppo_epochs),
                   temperature=float(config.sampling.temperature), remat=bool(config.model.remat), mesh=mesh,
                   reference_model=reference_model)


def decode_schedule(config) -> dict:
    """`sampling.generate` keyword arguments that schedule the decode's rows and cache (compaction,
    refill, response-cache chunks) without changing what is sampled: every caller passes them whole."""
    s = config.sampling
    return {"min_compact_rows": int(s.min_compact_rows), "compact_shrink": float(s.compact_shrink),
            "live_prompts": int(s.live_prompts), "response_chunks": int(s.response_chunks)}


def sampling_kwargs(config) -> dict:
    """The keyword arguments the trainer passes to generation (`sampling.generate_in_chunks`)."""
    s = config.sampling
    return {"max_new_tokens": int(s.max_new_tokens), "temperature": float(s.temperature), "top_p": float(s.top_p),
            "top_k": int(s.top_k), "prompt_buckets": tuple(s.prompt_length_buckets),
            "row_buckets": tuple(s.row_buckets), "max_rows_per_call": int(s.max_rows_per_call),
            **decode_schedule(config)}


def selector_from_config(config, num_prompts: int, prompt_levels=None) -> selection.Selector:
    """The strategy config.selection names, with the shared pass sizing and its own section.
    prompt_levels: the data's level per prompt id (int [num_prompts], -1 none), for strategies that use it."""
    sel = config.selection
    strategy = selection.resolve_strategy(sel.strategy)
    passes = selection.PassConfig(**{f.name: sel[f.name] for f in dataclasses.fields(selection.PassConfig)})
    extras = {"prompt_levels": prompt_levels} if selection.STRATEGIES.get(strategy).uses_prompt_levels else {}
    return selection.make_selector(strategy, num_prompts=num_prompts, group_size=int(config.rl.group_size),
                                   seed=int(config.seed), passes=passes, settings=sel.get(strategy), **extras)


def prompt_levels(rows) -> np.ndarray:
    """The level of each prompt id (its `difficulty`; -1 where the data has none), int64 [max id + 1]."""
    levels = np.full(max(r.prompt_id for r in rows) + 1, -1, np.int64)
    for r in rows:
        levels[r.prompt_id] = r.difficulty
    return levels


def _arith_settings(data) -> dict:
    return {"arith_num_train": data.arith_num_train, "arith_num_heldout": data.arith_num_heldout,
            "arith_seed": data.arith_seed, "arith_level_weights": tuple(data.arith_level_weights)}


def train_rows_from_config(config) -> PromptRows:
    """The training rows the config names (without loading any evaluation set)."""
    d = config.data
    path = catalog.training_file(d.dataset, d.data_dir) if d.dataset else d.path
    return load_source(source=d.source, path=path, skip_bad_rows=d.skip_bad_rows, level_field=d.level_field,
                       **_arith_settings(d))


def rows_from_config(config) -> tuple[PromptRows, dict[str, PromptRows]]:
    """The training rows and the evaluation sets {name: rows} the config names. "synthetic" (the
    arithmetic held-out pool) is evaluated only on arithmetic runs: other data has no such pool."""
    d = config.data
    benchmarks = [b for b in config.eval.benchmarks
                  if b != "synthetic" or (d.source == "arith" and d.arith_num_heldout)]
    return train_rows_from_config(config), load_eval_sets(
        benchmarks, data_dir=config.eval.data_dir, max_problems=config.eval.max_problems, **_arith_settings(d))
