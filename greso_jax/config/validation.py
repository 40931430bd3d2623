"""Validation of an experiment config: every field checked before anything is compiled, errors naming the field.

Fields of the pluggable families take their allowed names from the registries; each strategy
section is checked by its own settings dataclass, once: the selector built from a validated config
does not check them again. The strategy's alias is resolved here, so every later piece sees (and
records) the registered name.
"""

from __future__ import annotations

import dataclasses
import os

import ml_collections

from greso_jax import selection
from greso_jax.config.base import DTYPES
from greso_jax.config.warmstart_fields import validate_warmstart_fields
from greso_jax.core.specs import BOOL, FLOAT, INT, SEQ, STR, ConfigError, Spec, check_field
from greso_jax.data import arith, catalog
from greso_jax.data.prompts import TEMPLATES as PROMPT_TEMPLATES
from greso_jax.data.sources import SOURCES
from greso_jax.models.presets import PRESETS
from greso_jax.rewards.math import SHAPINGS as REWARD_SHAPINGS
from greso_jax.rl.advantages import ADVANTAGE_ESTIMATORS
from greso_jax.rl.losses import KL_ESTIMATORS, LOSS_AGGREGATIONS
from greso_jax.rl.micro_batches import UPDATE_LAYOUTS
from greso_jax.rl.optim import LR_SCHEDULES
from greso_jax.selection.settings import GROUP_SIZE_SPEC


def _positive_ints(value) -> str | None:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return "must hold positive integers"
    if list(value) != sorted(set(value)):
        return "must be strictly increasing"
    return None


def _level_field(value) -> str | None:
    if value and not all(part.strip() == part and part for part in value.split(".")):
        return f"must be a dotted path of record fields (e.g. 'type' or 'extra_info.level'), got {value!r}"
    return None


def _mesh_axis(value) -> str | None:
    return None if value == -1 or value >= 1 else "must be >= 1, or -1 to fill"


def _dataset_name(value) -> str | None:
    return None if value in ("", *catalog.TRAINING_SETS) else f"must be '' or one of {', '.join(catalog.TRAINING_SETS)}"


FIELD_SPECS: dict[str, Spec] = {
    "seed": Spec(INT, 0),
    "replicate": Spec(INT, 0),
    "model.preset": Spec(STR),
    "model.path": Spec(STR),
    "model.dtype": Spec(STR, choices=DTYPES),
    "model.param_dtype": Spec(STR, choices=DTYPES),
    "model.remat": Spec(BOOL),
    "model.tokenizer": Spec(STR, choices=("char", "hf")),
    "model.tokenizer_path": Spec(STR),
    "data.source": Spec(STR, choices=SOURCES),
    "data.path": Spec(STR),
    "data.prompt_template": Spec(STR, choices=PROMPT_TEMPLATES),
    "data.max_prompt_length": Spec(INT, 1),
    "data.skip_bad_rows": Spec(BOOL),
    "data.allow_conflicting_golds": Spec(BOOL),
    "data.shuffle": Spec(BOOL),
    "data.arith_num_train": Spec(INT, 1),
    "data.arith_num_heldout": Spec(INT, 0),
    "data.arith_seed": Spec(INT, 0),
    "data.arith_level_weights": Spec(SEQ, check=arith.check_level_weights),
    "data.reward_shaping": Spec(STR, choices=REWARD_SHAPINGS),
    "data.grading_timeout_s": Spec(FLOAT, 0, 60, low_open=True),
    "data.grading_workers": Spec(INT, 0),
    "data.dataset": Spec(STR, check=_dataset_name),
    "data.data_dir": Spec(STR),
    "data.level_field": Spec(STR, check=_level_field),
    "sampling.max_new_tokens": Spec(INT, 1),
    "sampling.temperature": Spec(FLOAT, 0),
    "sampling.top_p": Spec(FLOAT, 0, 1, low_open=True),
    "sampling.top_k": Spec(INT, 0),
    "sampling.max_rows_per_call": Spec(INT, 0),
    "sampling.prompt_length_buckets": Spec(SEQ, check=_positive_ints),
    "sampling.row_buckets": Spec(SEQ, check=_positive_ints),
    "sampling.min_compact_rows": Spec(INT, 0),
    "sampling.compact_shrink": Spec(FLOAT, 0, 1, low_open=True, check=lambda v: "must be < 1" if v >= 1 else None),
    "sampling.live_prompts": Spec(INT, 0),
    "sampling.response_chunks": Spec(INT, 1),
    "rl.group_size": GROUP_SIZE_SPEC,
    "rl.advantage": Spec(STR, choices=ADVANTAGE_ESTIMATORS),
    "rl.loss_aggregation": Spec(STR, choices=LOSS_AGGREGATIONS),
    "rl.clip_low": Spec(FLOAT, 0, 1),
    "rl.clip_high": Spec(FLOAT, 0),
    "rl.dual_clip": Spec(FLOAT, 0, check=lambda v: None if v == 0 or v > 1 else "must be 0 (off) or > 1"),
    "rl.kl_coef": Spec(FLOAT, 0),
    "rl.kl_estimator": Spec(STR, choices=KL_ESTIMATORS),
    "rl.entropy_coef": Spec(FLOAT, 0),
    "rl.ppo_epochs": Spec(INT, 1),
    "rl.mini_batch_size": Spec(INT, 1),
    "rl.micro_batch_size": Spec(INT, 1),
    "rl.update_layout": Spec(STR, choices=UPDATE_LAYOUTS),
    "rl.update_bucket_ratio": Spec(FLOAT, 1, low_open=True),
    "train.num_steps": Spec(INT, 0),
    "train.train_batch_size": Spec(INT, 1),
    "train.learning_rate": Spec(FLOAT, 0, low_open=True),
    "train.lr_schedule": Spec(STR, choices=LR_SCHEDULES),
    "train.warmup_steps": Spec(INT, 0),
    "train.adam_b1": Spec(FLOAT, 0, 1),
    "train.adam_b2": Spec(FLOAT, 0, 1),
    "train.weight_decay": Spec(FLOAT, 0),
    "train.grad_clip": Spec(FLOAT, 0),
    "train.max_bad_steps": Spec(INT, 1),
    "train.warmstart_steps": Spec(INT, 0),
    "train.warmstart_learning_rate": Spec(FLOAT, 0, low_open=True),
    "train.warmstart_batch_size": Spec(INT, 1),
    "train.warmstart_accuracy_low": Spec(FLOAT, 0, 1),
    "train.warmstart_accuracy_high": Spec(FLOAT, 0, 1),
    "train.warmstart_check_every": Spec(INT, 1),
    "train.warmstart_validation_rows": Spec(INT, 1),
    "train.warmstart_validation_samples": Spec(INT, 1),
    "train.warmstart_cache_dir": Spec(STR),
    "train.warmstart_levels": Spec(SEQ, check=arith.check_levels),
    "train.warmstart_band_levels": Spec(SEQ, check=arith.check_levels),
    "train.warmstart_level_weights": Spec(SEQ, check=arith.check_level_weights),
    "train.warmstart_num_problems": Spec(INT, 0),
    "train.quiet": Spec(BOOL),
    "train.host_check_every_steps": Spec(INT, 0),
    "mesh.data": Spec(INT, check=_mesh_axis),
    "mesh.fsdp": Spec(INT, check=_mesh_axis),
    "mesh.tensor": Spec(INT, check=_mesh_axis),
    "checkpoint.every_steps": Spec(INT, 0),
    "checkpoint.keep": Spec(INT, 1),
    "checkpoint.async_save": Spec(BOOL),
    "checkpoint.allow_changes": Spec(STR),
    "eval.every_steps": Spec(INT, 0),
    "eval.num_samples": Spec(INT, 1),
    "eval.temperature": Spec(FLOAT, 0),
    "eval.top_p": Spec(FLOAT, 0, 1, low_open=True),
    "eval.max_new_tokens": Spec(INT, 0),
    "eval.benchmarks": Spec(SEQ),
    "eval.max_problems": Spec(INT, 0),
    "eval.data_dir": Spec(STR),
    "eval.skip_audit_fraction": Spec(FLOAT, 0, 1),
    "logging.wandb": Spec(BOOL),
    "logging.wandb_project": Spec(STR, check=lambda v: None if v.strip() else "must not be empty"),
    "logging.wandb_entity": Spec(STR),
    "logging.wandb_run_name": Spec(STR),
    "logging.group_trace": Spec(BOOL),
}


def _lookup(config: ml_collections.ConfigDict, dotted: str):
    node = config
    for part in dotted.split("."):
        if part not in node:
            raise ConfigError(f"{dotted}: missing from the config")
        node = node[part]
    return node


def _check_dataset(data: ml_collections.ConfigDict) -> None:
    """A named training set must match data.source's format and be in the data folder."""
    fmt = catalog.DATASETS[data.dataset].format
    if data.source != fmt:
        raise ConfigError(f"data.source: data.dataset={data.dataset!r} is a {fmt} set; set data.source={fmt!r}")
    try:
        catalog.training_file(data.dataset, data.data_dir)
    except catalog.MissingDataError as e:
        raise ConfigError(f"data.dataset: {e}") from None


def validate(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks every field and the relations between them, raising ConfigError naming the field; sets
    selection.strategy to the registered name of an alias. Returns the config."""
    for name, spec in FIELD_SPECS.items():
        check_field(name, _lookup(config, name), spec)
    _validate_selection(config.selection, config.rl.group_size)

    rl, train, data = config.rl, config.train, config.data
    if train.train_batch_size % rl.mini_batch_size:
        raise ConfigError(f"rl.mini_batch_size: {rl.mini_batch_size} must divide "
                          f"train.train_batch_size {train.train_batch_size}")
    if (rl.mini_batch_size * rl.group_size) % rl.micro_batch_size:
        raise ConfigError(f"rl.micro_batch_size: {rl.micro_batch_size} must divide the responses of a "
                          f"mini-batch ({rl.mini_batch_size} x {rl.group_size})")
    buckets = config.sampling.prompt_length_buckets
    if buckets and max(buckets) < data.max_prompt_length:  # a kept prompt would find no bucket mid-run
        raise ConfigError(f"sampling.prompt_length_buckets: the largest, {max(buckets)}, is below "
                          f"data.max_prompt_length={data.max_prompt_length}; add a bucket >= "
                          f"{data.max_prompt_length} or lower data.max_prompt_length")
    if train.warmstart_cache_dir and os.path.exists(train.warmstart_cache_dir) and not os.path.isdir(
            train.warmstart_cache_dir):
        raise ConfigError(f"train.warmstart_cache_dir: {train.warmstart_cache_dir} exists and is not a folder")
    validate_warmstart_fields(train, data)
    if data.level_field and data.source == "arith":
        raise ConfigError("data.level_field: the arith source's prompts carry their own levels; leave it empty")
    if data.source in ("parquet", "jsonl") and data.dataset:
        _check_dataset(data)
    elif data.source in ("parquet", "jsonl"):
        if not data.path:
            raise ConfigError(f"data.path: required for data.source={data.source!r}")
        if not os.path.exists(data.path):
            raise ConfigError(f"data.path: no such file: {data.path}")
    if config.model.path and not os.path.isdir(config.model.path):
        raise ConfigError(f"model.path: no such folder: {config.model.path}")
    tokenizer_path = config.model.tokenizer_path or config.model.path
    if config.model.tokenizer == "hf" and not tokenizer_path:
        raise ConfigError("model.tokenizer: 'hf' needs model.tokenizer_path or model.path (a folder with "
                          "tokenizer.json)")
    if config.model.tokenizer == "char" and config.model.tokenizer_path:
        raise ConfigError("model.tokenizer_path: set, but model.tokenizer is 'char' (the path is read for 'hf')")
    if config.model.tokenizer_path and not os.path.isfile(os.path.join(config.model.tokenizer_path,
                                                                       "tokenizer.json")):
        raise ConfigError(f"model.tokenizer_path: no tokenizer.json in {config.model.tokenizer_path}")
    if not config.model.path:
        if config.model.preset not in PRESETS:
            raise ConfigError(f"model.preset: {config.model.preset!r} is not one of {', '.join(PRESETS)}")
    return config


def _validate_selection(sel: ml_collections.ConfigDict, group_size: int) -> None:
    """The strategy name against the live registry (an alias replaced by its strategy's name), the
    shared pass sizing, and every strategy section; the chosen strategy's also for what it derives
    from rl.group_size (AERO's budget)."""
    check_field("selection.strategy", sel.strategy, Spec(STR, choices=(*selection.STRATEGIES, *selection.ALIASES)))
    strategy = sel.strategy = selection.resolve_strategy(sel.strategy)
    if selection.STRATEGIES.get(strategy).simulation_only:
        raise ConfigError(f"selection.strategy: {strategy!r} is simulation-only (it needs foresight of "
                          "rollout outcomes); use it in experiments/bench/selection_sim.py, not for training")
    pass_fields = {f.name: _lookup(sel, f.name) for f in dataclasses.fields(selection.PassConfig)}
    _as_config_error(lambda: selection.PassConfig(**pass_fields).checked("selection"))
    if sel.rollout_mode == "stream" and selection.STRATEGIES.get(strategy).extends_groups:
        raise ConfigError(f"selection.rollout_mode: 'stream' holds one fixed G-row group per lane, but "
                          f"selection.strategy={strategy!r} extends groups with more responses; use 'passes'")
    for name in selection.STRATEGIES:
        if selection.STRATEGIES.get(name).Settings is None:
            continue
        if name not in sel:
            if name == strategy:
                raise ConfigError(f"selection.{name}: missing section (build the config with get_config() "
                                  "after registering the strategy)")
            continue
        values = sel[name].to_dict()
        _as_config_error(lambda: selection.settings_of(name, values,
                                                       group_size=group_size if name == strategy else None))


def _as_config_error(check) -> None:
    """Runs a settings check; an unknown field (TypeError from the dataclass) becomes a ConfigError."""
    try:
        check()
    except TypeError as e:
        raise ConfigError(f"selection: {e}") from None


def selection_field_docs() -> list[tuple[str, object, str]]:
    """(dotted field, default, one-line doc) for `selection.*` and every strategy section, for docs and --help."""
    rows = [(f"selection.{f.name}", f.default, f.metadata["doc"]) for f in dataclasses.fields(selection.PassConfig)]
    for name in selection.training_strategies():
        settings = selection.STRATEGIES.get(name).Settings
        if settings is not None:
            rows += [(f"selection.{name}.{f.name}", f.default, f.metadata["doc"]) for f in dataclasses.fields(settings)]
    return rows
