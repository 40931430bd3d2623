"""Base experiment config (ml_collections) and its validation.

Experiment files in `experiments/` call `get_config()` and override fields. `validate`
checks every field against `FIELD_SPECS` before anything is compiled, and names the
field in its error.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Sequence

import ml_collections

STRATEGIES = ("vanilla", "dynamic_sampling", "greso", "aero", "oracle")
ADVANTAGE_MODES = ("grpo", "drgrpo", "batch_std")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k3")
LR_SCHEDULES = ("constant", "warmup_cosine")
DATA_SOURCES = ("arith", "parquet", "jsonl")
PROMPT_TEMPLATES = ("plain", "chat", "greso", "qwen_math")
DTYPES = ("float32", "bfloat16", "float16")
REWARD_SHAPINGS = ("binary", "greso")


def get_config() -> ml_collections.ConfigDict:
    """The base config: every section, defaults sized for the tiny CPU experiment."""
    c = ml_collections.ConfigDict()
    c.seed = 0

    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"  # a name from greso_jax.models.PRESETS; ignored when path is set
    c.model.path = ""  # local Hugging Face folder (config.json + *.safetensors)
    c.model.dtype = "float32"  # compute dtype
    c.model.param_dtype = "float32"
    c.model.remat = False
    c.model.tokenizer = "char"  # "char" (built-in) or "hf" (tokenizer.json in model.path)

    c.data = ml_collections.ConfigDict()
    c.data.source = "arith"
    c.data.path = ""  # file for parquet / jsonl sources
    c.data.prompt_template = "plain"
    c.data.max_prompt_length = 64
    c.data.skip_bad_rows = False
    c.data.shuffle = True
    c.data.arith_num_train = 3000
    c.data.arith_num_heldout = 600
    c.data.arith_seed = 1234
    c.data.reward_shaping = "binary"
    c.data.grading_timeout_s = 2.0
    c.data.grading_workers = 1
    # a named public set (greso_jax.data.catalog; "" = data.path) and the folder holding it
    # ("" = $GRESO_DATA, else the cache `python -m greso_jax.data.fetch` fills)
    c.data.dataset = ""
    c.data.data_dir = ""

    c.sampling = ml_collections.ConfigDict()
    c.sampling.max_new_tokens = 32
    c.sampling.temperature = 1.0
    c.sampling.top_p = 1.0
    c.sampling.top_k = 0
    c.sampling.max_rows_per_call = 0  # >0: a pass is generated in chunks of at most this many rows (KV memory)
    c.sampling.prompt_length_buckets = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    c.sampling.row_buckets = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

    c.rl = ml_collections.ConfigDict()
    c.rl.group_size = 8
    c.rl.advantage = "grpo"
    c.rl.loss_aggregation = "token-mean"
    c.rl.clip_low = 0.2
    c.rl.clip_high = 0.2
    c.rl.dual_clip = 0.0  # 0 disables; otherwise the dual-clip constant c > 1
    c.rl.kl_coef = 0.0
    c.rl.kl_estimator = "k3"
    c.rl.entropy_coef = 0.0
    c.rl.ppo_epochs = 1
    c.rl.mini_batch_size = 64  # prompts per optimiser update
    c.rl.micro_batch_size = 64  # responses per forward/backward (gradient accumulation)

    c.train = ml_collections.ConfigDict()
    c.train.num_steps = 100
    c.train.train_batch_size = 64  # prompts (groups) per training step
    c.train.learning_rate = 3e-4
    c.train.lr_schedule = "constant"
    c.train.warmup_steps = 0
    c.train.adam_b1 = 0.9
    c.train.adam_b2 = 0.999
    c.train.weight_decay = 0.01
    c.train.grad_clip = 1.0
    c.train.max_bad_steps = 5
    c.train.warmstart_steps = 0  # supervised steps before RL (synthetic tasks only)
    c.train.warmstart_learning_rate = 1e-3
    c.train.warmstart_batch_size = 64
    c.train.quiet = False
    c.train.host_check_every_steps = 10  # multi-host: compare selector-state digests across hosts

    c.selection = ml_collections.ConfigDict()
    c.selection.strategy = "greso"
    c.selection.rollout_batch_size = 96  # prompts in the first pass of a step
    c.selection.min_pass_size = 8
    c.selection.max_passes = 8
    c.selection.on_max_passes = "train"  # "train" on what was collected, or "error"
    c.selection.p_easy = 0.5
    c.selection.p_hard = 0.5
    c.selection.delta_p = 0.01
    c.selection.target_zero_variance = 0.25
    c.selection.p_min = 0.05
    c.selection.p_max = 0.95
    c.selection.aero_n_explore = 4
    c.selection.aero_n_extra = 4
    c.selection.aero_max_group_size = 16
    c.selection.aero_reject_k = 1.0
    c.selection.aero_reject_below = 0.5  # selective rejection applies while success rate < this
    c.selection.aero_prior_alpha = 1.0
    c.selection.aero_prior_beta = 1.0

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1: all devices not used by the other axes
    c.mesh.fsdp = 1
    c.mesh.tensor = 1

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every_steps = 50
    c.checkpoint.keep = 3
    c.checkpoint.async_save = True

    c.eval = ml_collections.ConfigDict()
    c.eval.every_steps = 0  # 0: only at the start and the end
    c.eval.num_samples = 4
    c.eval.temperature = 1.0
    c.eval.top_p = 1.0
    c.eval.max_new_tokens = 0  # 0: sampling.max_new_tokens
    c.eval.benchmarks = ("synthetic",)
    c.eval.max_problems = 0  # 0: all
    c.eval.data_dir = ""  # folder holding the benchmark sets (../shared/data layout)

    c.logging = ml_collections.ConfigDict()  # optional sinks beside metrics.jsonl and TensorBoard
    c.logging.wandb = False  # needs `pip install -e .[wandb]`
    c.logging.wandb_project = "greso_jax"
    c.logging.wandb_entity = ""  # "" = the W&B default entity of the logged-in user
    c.logging.wandb_run_name = ""  # "" = the workdir's name
    return c


# ---------------------------------------------------------------------------------------
# Validation


class ConfigError(ValueError):
    """An invalid config field; the message starts with the field's dotted name."""


@dataclasses.dataclass(frozen=True)
class Spec:
    kind: type | tuple[type, ...]
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: value must be > low (not >=)
    choices: Sequence[Any] | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None


def _positive_ints(value) -> str | None:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return "must hold positive integers"
    if list(value) != sorted(set(value)):
        return "must be strictly increasing"
    return None


def _mesh_axis(value) -> str | None:
    return None if value == -1 or value >= 1 else "must be >= 1, or -1 to fill"


def _dataset_name(value) -> str | None:
    from greso_jax.data.catalog import TRAINING_SETS  # stdlib only

    return None if value in ("", *TRAINING_SETS) else f"must be '' or one of {', '.join(TRAINING_SETS)}"


INT, FLOAT, BOOL, STR = int, (int, float), bool, str
FIELD_SPECS: dict[str, Spec] = {
    "seed": Spec(INT, 0),
    "model.preset": Spec(STR),
    "model.path": Spec(STR),
    "model.dtype": Spec(STR, choices=DTYPES),
    "model.param_dtype": Spec(STR, choices=DTYPES),
    "model.remat": Spec(BOOL),
    "model.tokenizer": Spec(STR, choices=("char", "hf")),
    "data.source": Spec(STR, choices=DATA_SOURCES),
    "data.path": Spec(STR),
    "data.prompt_template": Spec(STR, choices=PROMPT_TEMPLATES),
    "data.max_prompt_length": Spec(INT, 1),
    "data.skip_bad_rows": Spec(BOOL),
    "data.shuffle": Spec(BOOL),
    "data.arith_num_train": Spec(INT, 1),
    "data.arith_num_heldout": Spec(INT, 0),
    "data.arith_seed": Spec(INT, 0),
    "data.reward_shaping": Spec(STR, choices=REWARD_SHAPINGS),
    "data.grading_timeout_s": Spec(FLOAT, 0, 60, low_open=True),
    "data.grading_workers": Spec(INT, 0),
    "data.dataset": Spec(STR, check=_dataset_name),
    "data.data_dir": Spec(STR),
    "sampling.max_new_tokens": Spec(INT, 1),
    "sampling.temperature": Spec(FLOAT, 0),
    "sampling.top_p": Spec(FLOAT, 0, 1, low_open=True),
    "sampling.top_k": Spec(INT, 0),
    "sampling.max_rows_per_call": Spec(INT, 0),
    "sampling.prompt_length_buckets": Spec((tuple, list), check=_positive_ints),
    "sampling.row_buckets": Spec((tuple, list), check=_positive_ints),
    "rl.group_size": Spec(INT, 2),
    "rl.advantage": Spec(STR, choices=ADVANTAGE_MODES),
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
    "train.quiet": Spec(BOOL),
    "train.host_check_every_steps": Spec(INT, 0),
    "selection.strategy": Spec(STR, choices=STRATEGIES),
    "selection.rollout_batch_size": Spec(INT, 1),
    "selection.min_pass_size": Spec(INT, 1),
    "selection.max_passes": Spec(INT, 1),
    "selection.on_max_passes": Spec(STR, choices=("train", "error")),
    "selection.p_easy": Spec(FLOAT, 0, 1),
    "selection.p_hard": Spec(FLOAT, 0, 1),
    "selection.delta_p": Spec(FLOAT, 0, 1),
    "selection.target_zero_variance": Spec(FLOAT, 0, 1),
    "selection.p_min": Spec(FLOAT, 0, 1),
    "selection.p_max": Spec(FLOAT, 0, 1),
    "selection.aero_n_explore": Spec(INT, 1),
    "selection.aero_n_extra": Spec(INT, 1),
    "selection.aero_max_group_size": Spec(INT, 2),
    "selection.aero_reject_k": Spec(FLOAT, 0),
    "selection.aero_reject_below": Spec(FLOAT, 0, 1, low_open=True),
    "selection.aero_prior_alpha": Spec(FLOAT, 0, low_open=True),
    "selection.aero_prior_beta": Spec(FLOAT, 0, low_open=True),
    "mesh.data": Spec(INT, check=_mesh_axis),
    "mesh.fsdp": Spec(INT, check=_mesh_axis),
    "mesh.tensor": Spec(INT, check=_mesh_axis),
    "checkpoint.every_steps": Spec(INT, 0),
    "checkpoint.keep": Spec(INT, 1),
    "checkpoint.async_save": Spec(BOOL),
    "eval.every_steps": Spec(INT, 0),
    "eval.num_samples": Spec(INT, 1),
    "eval.temperature": Spec(FLOAT, 0),
    "eval.top_p": Spec(FLOAT, 0, 1, low_open=True),
    "eval.max_new_tokens": Spec(INT, 0),
    "eval.benchmarks": Spec((tuple, list)),
    "eval.max_problems": Spec(INT, 0),
    "eval.data_dir": Spec(STR),
    "logging.wandb": Spec(BOOL),
    "logging.wandb_project": Spec(STR, check=lambda v: None if v.strip() else "must not be empty"),
    "logging.wandb_entity": Spec(STR),
    "logging.wandb_run_name": Spec(STR),
}


def _lookup(config: ml_collections.ConfigDict, dotted: str):
    node = config
    for part in dotted.split("."):
        if part not in node:
            raise ConfigError(f"{dotted}: missing from the config")
        node = node[part]
    return node


def _check_field(name: str, value, spec: Spec) -> None:
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{name}: expected {'/'.join(k.__name__ for k in kinds)}, got bool {value!r}")
    if not isinstance(value, kinds):
        raise ConfigError(
            f"{name}: expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name}: must be finite, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(map(str, spec.choices))}")
    if spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low):
        raise ConfigError(f"{name}: must be {'>' if spec.low_open else '>='} {spec.low}, got {value!r}")
    if spec.high is not None and value > spec.high:
        raise ConfigError(f"{name}: must be <= {spec.high}, got {value!r}")
    if spec.check is not None and (problem := spec.check(value)):
        raise ConfigError(f"{name}: {problem}, got {value!r}")


def _check_dataset(data: ml_collections.ConfigDict) -> None:
    """A named training set must match data.source's format and be in the data folder."""
    from greso_jax.data import catalog

    fmt = catalog.DATASETS[data.dataset].format
    if data.source != fmt:
        raise ConfigError(f"data.source: data.dataset={data.dataset!r} is a {fmt} set; set data.source={fmt!r}")
    try:
        catalog.training_file(data.dataset, data.data_dir)
    except catalog.MissingDataError as e:
        raise ConfigError(f"data.dataset: {e}") from None


def validate(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks every field and the relations between them; raises ConfigError naming the field."""
    for name, spec in FIELD_SPECS.items():
        _check_field(name, _lookup(config, name), spec)

    sel, rl, train, data = config.selection, config.rl, config.train, config.data
    if sel.p_min > sel.p_max:
        raise ConfigError(f"selection.p_min: {sel.p_min} is above selection.p_max {sel.p_max}")
    for name in ("p_easy", "p_hard"):
        if not sel.p_min <= sel[name] <= sel.p_max:
            raise ConfigError(f"selection.{name}: {sel[name]} is outside [p_min, p_max] = "
                              f"[{sel.p_min}, {sel.p_max}]")
    if sel.strategy == "aero":
        if sel.aero_n_explore >= sel.aero_max_group_size:
            raise ConfigError("selection.aero_n_explore: must be below selection.aero_max_group_size")
        if sel.aero_n_explore < 2:
            raise ConfigError("selection.aero_n_explore: must be >= 2 to estimate a success rate")
    if sel.min_pass_size > sel.rollout_batch_size:
        raise ConfigError("selection.min_pass_size: must not exceed selection.rollout_batch_size")
    if train.train_batch_size % rl.mini_batch_size:
        raise ConfigError(f"rl.mini_batch_size: {rl.mini_batch_size} must divide "
                          f"train.train_batch_size {train.train_batch_size}")
    if (rl.mini_batch_size * rl.group_size) % rl.micro_batch_size:
        raise ConfigError(f"rl.micro_batch_size: {rl.micro_batch_size} must divide the responses of a "
                          f"mini-batch ({rl.mini_batch_size} x {rl.group_size})")
    if data.source in ("parquet", "jsonl") and data.dataset:
        _check_dataset(data)
    elif data.source in ("parquet", "jsonl"):
        if not data.path:
            raise ConfigError(f"data.path: required for data.source={data.source!r}")
        if not os.path.exists(data.path):
            raise ConfigError(f"data.path: no such file: {data.path}")
    if config.model.path and not os.path.isdir(config.model.path):
        raise ConfigError(f"model.path: no such folder: {config.model.path}")
    if config.model.tokenizer == "hf" and not config.model.path:
        raise ConfigError("model.tokenizer: 'hf' needs model.path (a folder with tokenizer.json)")
    if not config.model.path:
        from greso_jax.models.presets import PRESETS  # local import: configs must stay light
        if config.model.preset not in PRESETS:
            raise ConfigError(f"model.preset: {config.model.preset!r} is not one of {', '.join(PRESETS)}")
    return config
