"""Turns an experiment config into the run's components: tokenizer, policy, learner, selector, data rows,
the sampler's keyword arguments and the evaluation's settings.

Low layers (rl, sampling, rewards, selection, data, models) take explicit arguments; this module is
where the config tree's fields are mapped onto them, so a renamed config field changes one place.
Training starts from a Hugging Face folder or from a preset trained from scratch with a cached
supervised warm start (fixed steps, or stopped on a sampled-accuracy band); evaluation loads a
Hugging Face folder or the parameters of a run's checkpoint.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from greso_jax import selection
from greso_jax.config import rl_seed
from greso_jax.data import arith, catalog
from greso_jax.data.prompts import format_prompt
from greso_jax.data.rows import PromptRows
from greso_jax.data.sources import load_eval_sets, load_source
from greso_jax.models import (PRESETS, CharTokenizer, HFTokenizer, ModelConfig, abstract_model, from_pretrained,
                              init_model, param_shardings, place_on_mesh)
from greso_jax.models.weights import read_model_config
from greso_jax.rewards.pool import GradingPool
from greso_jax.rl.learner import Learner
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.optim import OptimizerSettings
from greso_jax.run.checkpoint import restore_params
from greso_jax.run.scoring import EVAL_SEED_OFFSET, EvalSettings, sample_and_grade
from greso_jax.run.warmstart import AccuracyBand, cached_warmstart


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
                   reference_model=reference_model, update_layout=config.rl.update_layout,
                   bucket_ratio=float(config.rl.update_bucket_ratio))


def decode_schedule(config) -> dict:
    """`sampling.generate` keyword arguments that schedule the decode's rows and cache (compaction,
    refill, response-cache chunks) without changing what is sampled: every caller passes them whole."""
    s = config.sampling
    return {"min_compact_rows": int(s.min_compact_rows), "compact_shrink": float(s.compact_shrink),
            "live_prompts": int(s.live_prompts), "response_chunks": int(s.response_chunks)}


def eval_settings(config, **overrides) -> EvalSettings:
    """How the run's evaluation samples: eval.num_samples / temperature / top_p / max_new_tokens (0:
    sampling.max_new_tokens), data.prompt_template / max_prompt_length, the sampler's buckets and
    decode schedule, and seed + EVAL_SEED_OFFSET. `overrides` replace fields by name (the evaluate
    CLI's flags, the warm-start band's own sampling)."""
    e, s, d = config.eval, config.sampling, config.data
    settings = EvalSettings(template=d.prompt_template, num_samples=int(e.num_samples), temperature=float(e.temperature),
                            top_p=float(e.top_p), max_new_tokens=int(e.max_new_tokens or s.max_new_tokens),
                            max_prompt_length=int(d.max_prompt_length), seed=int(config.seed) + EVAL_SEED_OFFSET,
                            prompt_buckets=tuple(s.prompt_length_buckets), row_buckets=tuple(s.row_buckets),
                            schedule=decode_schedule(config))
    return dataclasses.replace(settings, **overrides)


def sampling_kwargs(config) -> dict:
    """The keyword arguments the trainer passes to generation (`sampling.generate_in_chunks`)."""
    s = config.sampling
    return {"max_new_tokens": int(s.max_new_tokens), "temperature": float(s.temperature), "top_p": float(s.top_p),
            "top_k": int(s.top_k), "prompt_buckets": tuple(s.prompt_length_buckets),
            "row_buckets": tuple(s.row_buckets), "max_rows_per_call": int(s.max_rows_per_call),
            **decode_schedule(config)}


def selector_from_config(config, num_prompts: int, prompt_levels=None) -> selection.Selector:
    """The strategy a validated config's selection.strategy names (config.validate resolved its alias
    and checked its settings, so they are not checked again), with the shared pass sizing and its own
    section. prompt_levels: the data's level per prompt id (int [num_prompts], -1 none), offered to the
    strategy (it takes them if it declares them)."""
    sel = config.selection
    passes = selection.PassConfig(**{f.name: sel[f.name] for f in dataclasses.fields(selection.PassConfig)})
    return selection.make_selector(sel.strategy, num_prompts=num_prompts, group_size=int(config.rl.group_size),
                                   seed=rl_seed(config), passes=passes, settings=sel.get(sel.strategy),
                                   checked=True, prompt_levels=prompt_levels)


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
                       allow_conflicting_golds=d.allow_conflicting_golds, **_arith_settings(d))


def rows_from_config(config) -> tuple[PromptRows, dict[str, PromptRows]]:
    """The training rows and the evaluation sets {name: rows} the config names. "synthetic" (the
    arithmetic held-out pool) is evaluated only on arithmetic runs: other data has no such pool."""
    d = config.data
    benchmarks = [b for b in config.eval.benchmarks
                  if b != "synthetic" or (d.source == "arith" and d.arith_num_heldout)]
    return train_rows_from_config(config), load_eval_sets(
        benchmarks, data_dir=config.eval.data_dir, max_problems=config.eval.max_problems, **_arith_settings(d))


def build_tokenizer(config):
    """model.tokenizer "hf": the tokenizer.json of model.tokenizer_path (default model.path); "char":
    the arithmetic alphabet, padded to the preset's vocabulary when the model is a preset."""
    if config.model.tokenizer == "hf":
        return HFTokenizer(config.model.tokenizer_path or config.model.path)
    vocab = PRESETS[config.model.preset].vocab_size if not config.model.path else None
    return CharTokenizer(arith.ARITH_ALPHABET, vocab_size=vocab)


def model_config(config) -> ModelConfig:
    """The architecture of model.path's config.json, else of model.preset, with the config's dtype,
    param_dtype and remat."""
    m = config.model
    if m.path:
        return read_model_config(m.path, dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat)
    if m.preset not in PRESETS:
        raise ValueError(f"model.preset: {m.preset!r} is not one of {', '.join(PRESETS)}")
    return PRESETS[m.preset].replace(dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat)


def build_policy(config, tokenizer, train_rows, workdir: str, mesh, log=print, report: dict | None = None):
    """The policy a run starts from, placed on `mesh`: model.path's weights, else the preset
    initialised from config.seed and, for arithmetic with train.warmstart_steps, supervised on the
    solutions of `train_rows` or of train.warmstart_num_problems problems of its own (cached under
    train.warmstart_cache_dir, "" = workdir/warmstart). With train.warmstart_accuracy_low set,
    `report` receives warmstart/steps and warmstart/accuracy."""
    m = config.model
    if m.path:
        return from_pretrained(m.path, dtype=m.dtype, mesh=mesh, param_dtype=m.param_dtype, remat=m.remat)
    cfg = model_config(config)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(f"model.preset: {m.preset} has vocab_size {cfg.vocab_size}, smaller than the "
                         f"tokenizer's {tokenizer.vocab_size}")
    model = init_model(cfg, seed=config.seed)
    t = config.train
    if t.warmstart_steps and config.data.source == "arith":
        band = t.warmstart_accuracy_low > 0
        # Supervised on RL's own prompts, the policy memorises their answers, which RL then meets as
        # known outcomes that say nothing about unseen problems; its own pool, apart from RL's and
        # the held-out problems, teaches the skill as pretraining does for a real RL set.
        rows = train_rows
        if t.warmstart_num_problems:
            d = config.data
            rows = arith.make_apart_pool(t.warmstart_num_problems, d.arith_num_train, d.arith_num_heldout,
                                         d.arith_seed, arith.level_weights(d.arith_level_weights))
        # The band's validation rows are the first of those rows, left out of the supervised data so
        # that the check measures generalisation as the held-out evaluation does, without reading it.
        split = t.warmstart_validation_rows if band else 0
        # A level left out (train.warmstart_levels) is one the policy has never been taught, as a
        # pretrained model has problems beyond it: RL meets it at a success rate of about zero.
        levels = set(t.warmstart_levels) or {row.difficulty for row in rows}
        checked = set(t.warmstart_band_levels) or levels
        validation = [row for row in rows[:split] if row.difficulty in checked]
        supervised = [row for row in rows[split:] if row.difficulty in levels]
        row_weights = None
        if t.warmstart_level_weights:  # each level's share of the supervised draws, its rows alike within it
            counts = collections.Counter(row.difficulty for row in supervised)
            shares = arith.level_weights(t.warmstart_level_weights)
            row_weights = np.array([shares.get(row.difficulty, 0.0) / counts[row.difficulty]
                                    for row in supervised])
            row_weights /= row_weights.sum()
        pairs = [(tokenizer.encode(format_prompt(row, config.data.prompt_template, tokenizer)),
                  tokenizer.encode(arith.solution_text(row))) for row in supervised]
        width = max(len(p) + len(s) + 1 for p, s in pairs)
        model, record = cached_warmstart(
            model, pairs, cache_dir=t.warmstart_cache_dir or os.path.join(workdir, "warmstart"),
            eos_id=tokenizer.eos_ids[0], pad_id=tokenizer.pad_id, width=width, steps=t.warmstart_steps,
            batch_size=t.warmstart_batch_size, learning_rate=t.warmstart_learning_rate, seed=config.seed,
            band=accuracy_band(config, tokenizer, validation) if band else None, log=log,
            write_cache=jax.process_index() == 0, row_weights=row_weights)
        if band and report is not None:
            report.update({"warmstart/steps": record["steps"], "warmstart/accuracy": record["accuracy"]})
    return place_on_mesh(model, mesh)


def accuracy_band(config, tokenizer, rows) -> AccuracyBand:
    """train.warmstart_accuracy_low/high checked every train.warmstart_check_every steps: the mean
    correctness of train.warmstart_validation_samples responses per row of `rows`, sampled at
    temperature 1 within sampling.max_new_tokens and graded as evaluation grades them."""
    t, d = config.train, config.data
    # The evaluation's sampling stream, on other rows, at the training sampler's response budget.
    sampling = eval_settings(config, num_samples=int(t.warmstart_validation_samples), temperature=1.0, top_p=1.0,
                             max_new_tokens=int(config.sampling.max_new_tokens))
    settings = {"rows": hashlib.sha256(json.dumps([(r.question, r.ground_truth) for r in rows]).encode()).hexdigest(),
                "samples": sampling.num_samples, "temperature": sampling.temperature,
                "max_new_tokens": sampling.max_new_tokens, "template": sampling.template,
                "max_prompt_length": sampling.max_prompt_length, "seed": sampling.seed}

    def measure(model) -> float:
        with GradingPool(num_workers=0, timeout_s=d.grading_timeout_s, shaping=d.reward_shaping) as pool:
            return float(sample_and_grade(model, tokenizer, rows, sampling, pool=pool).mean())

    return AccuracyBand(low=t.warmstart_accuracy_low, high=t.warmstart_accuracy_high,
                        check_every=t.warmstart_check_every, measure=measure, settings=settings)


def load_policy(config, mesh, *, workdir: str = "", step: int | None = None):
    """The policy to evaluate, placed on `mesh` as its logical axes ask: the parameters of `step`
    of the run in `workdir` (the architecture from `model_config`), or without a workdir the
    Hugging Face folder model.path. Raises checkpoint.CheckpointError for a missing or
    mismatched step."""
    m = config.model
    if not workdir:
        return from_pretrained(m.path, dtype=m.dtype, mesh=mesh, param_dtype=m.param_dtype)
    # Evaluation never differentiates, so rematerialisation would only cost compile time.
    abstract = abstract_model(model_config(config).replace(remat=False))
    params = restore_params(workdir, step, abstract, param_shardings(abstract, mesh))
    graphdef, state = nnx.split(abstract)
    state.replace_by_pure_dict(params)
    return nnx.merge(graphdef, state)
