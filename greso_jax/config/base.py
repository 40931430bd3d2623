"""The base experiment config (ml_collections): every section, with defaults sized for the tiny CPU experiment.

Experiment files in `experiments/` call `get_config()` and override fields; `config.validate`
checks the result. `selection.*` holds the pass sizing every pass-based strategy shares and one
section per registered strategy with settings, built from that strategy's settings dataclass.
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from greso_jax import selection
from greso_jax.sampling.shapes import DEFAULT_PROMPT_BUCKETS, DEFAULT_ROW_BUCKETS

DTYPES = ("float32", "bfloat16", "float16")


def get_config() -> ml_collections.ConfigDict:
    """The base config: every section, defaults sized for the tiny CPU experiment."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    # > 0: an independent replicate of the seed's RL (rl_seed): the same start, other draws
    c.replicate = 0

    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"  # a name from greso_jax.models.PRESETS; ignored when path is set
    c.model.path = ""  # local Hugging Face folder (config.json + *.safetensors)
    c.model.dtype = "float32"  # compute dtype
    c.model.param_dtype = "float32"
    c.model.remat = False
    c.model.tokenizer = "char"  # "char" (built-in) or "hf" (tokenizer.json in model.tokenizer_path)
    c.model.tokenizer_path = ""  # tokenizer.json folder for "hf" ("": model.path): a preset's random weights can use it

    c.data = ml_collections.ConfigDict()
    c.data.source = "arith"
    c.data.path = ""  # file for parquet / jsonl sources
    c.data.prompt_template = "plain"
    c.data.max_prompt_length = 64
    c.data.skip_bad_rows = False
    c.data.allow_conflicting_golds = False  # train on a prompt that occurs with different gold answers (warned)
    c.data.shuffle = True
    c.data.arith_num_train = 3000
    c.data.arith_num_heldout = 600
    c.data.arith_seed = 1234
    c.data.arith_level_weights = ()  # weights of arithmetic levels 0, 1, ... (data/arith.py LEVELS; later ones weigh 0); (): the default mix
    c.data.reward_shaping = "binary"
    c.data.grading_timeout_s = 2.0
    c.data.grading_workers = 1
    # a named public set (greso_jax.data.catalog; "" = data.path) and the folder holding it
    # ("" = $GRESO_DATA, else the cache `python -m greso_jax.data.fetch` fills)
    c.data.dataset = ""
    c.data.data_dir = ""
    # a parquet / jsonl record field (dotted path) whose values group prompts into levels, for
    # strategies that use them (the posterior's level priors); "": none. The arith pools have levels.
    c.data.level_field = ""

    c.sampling = ml_collections.ConfigDict()
    c.sampling.max_new_tokens = 32
    c.sampling.temperature = 1.0
    c.sampling.top_p = 1.0
    c.sampling.top_k = 0
    c.sampling.max_rows_per_call = 0  # >0: a pass is generated in chunks of at most this many rows (KV memory)
    c.sampling.prompt_length_buckets = DEFAULT_PROMPT_BUCKETS
    c.sampling.row_buckets = DEFAULT_ROW_BUCKETS  # 8, 16, 24, 32, 48, ...: a call pads by < half its rows
    c.sampling.min_compact_rows = 0  # >0: decode moves the live rows into R/2, R/4, ... rows, down to this many
    c.sampling.compact_shrink = 0.5  # each compaction segment's rows over the one before's
    c.sampling.live_prompts = 0  # >0: continuous batching, this many prompts' groups in flight (refill)
    c.sampling.response_chunks = 4  # decode reads only the response-cache chunks written so far

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
    c.rl.update_layout = "padded"  # "bucketed": micro-batches of length-sorted rows trimmed to length buckets
    c.rl.update_bucket_ratio = 1.25  # bucketed layout: neighbouring bucket lengths at most this far apart

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
    c.train.warmstart_steps = 0  # supervised steps before RL (synthetic tasks only); the maximum under a band
    c.train.warmstart_learning_rate = 1e-3
    c.train.warmstart_batch_size = 64
    # >0: the warm start stops at the first check whose sampled validation accuracy is >= low, and fails
    # if that accuracy is above high or warmstart_steps pass first; 0: exactly warmstart_steps
    c.train.warmstart_accuracy_low = 0.0
    c.train.warmstart_accuracy_high = 1.0
    c.train.warmstart_check_every = 50  # supervised steps between accuracy checks
    c.train.warmstart_validation_rows = 256  # the first training rows, left out of the supervised data
    c.train.warmstart_validation_samples = 2  # responses per validation row, temperature 1
    c.train.warmstart_cache_dir = ""  # "" = workdir/warmstart; a shared folder reuses a warm start across runs
    c.train.warmstart_levels = ()  # arithmetic levels whose solutions it sees (its band checks these); (): every level
    c.train.warmstart_band_levels = ()  # the taught levels the band checks, e.g. the easy ones; (): all taught levels
    c.train.warmstart_level_weights = ()  # each level's share of supervised draws (one weight a level); (): the pool's
    c.train.warmstart_num_problems = 0  # > 0: supervise on that many problems apart from RL's and the held-out ones
    c.train.quiet = False
    c.train.host_check_every_steps = 10  # multi-host: compare selector-state digests across hosts

    c.selection = ml_collections.ConfigDict()
    c.selection.strategy = "greso"  # a registered strategy (greso_jax.selection.STRATEGIES) or alias ("ds")
    c.selection.update(dataclasses.asdict(selection.PassConfig()))  # the pass sizing shared by all strategies
    for name in selection.training_strategies():
        if selection.STRATEGIES.get(name).Settings is not None:
            c.selection[name] = ml_collections.ConfigDict(selection.default_settings(name))

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1: all devices not used by the other axes
    c.mesh.fsdp = 1
    c.mesh.tensor = 1

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every_steps = 50
    c.checkpoint.keep = 3
    c.checkpoint.async_save = True
    # Comma-separated fields a resume may change although they change what the run means (run_dir.MAY_CHANGE
    # lists the ones that always may); each launch's changes are recorded in <workdir>/configs/launches.jsonl.
    c.checkpoint.allow_changes = ""

    c.eval = ml_collections.ConfigDict()
    c.eval.every_steps = 0  # 0: only at the start and the end
    c.eval.num_samples = 4
    c.eval.temperature = 1.0
    c.eval.top_p = 1.0
    c.eval.max_new_tokens = 0  # 0: sampling.max_new_tokens
    c.eval.benchmarks = ("synthetic",)
    c.eval.max_problems = 0  # 0: all
    c.eval.data_dir = ""  # folder holding the benchmark sets (../shared/data layout)
    c.eval.skip_audit_fraction = 0.0  # share of skipped prompts rolled out anyway (never trained on): were skips right?

    c.logging = ml_collections.ConfigDict()  # optional sinks beside metrics.jsonl and TensorBoard
    c.logging.wandb = False  # needs `pip install -e .[wandb]`
    c.logging.wandb_project = "greso_jax"
    c.logging.wandb_entity = ""  # "" = the W&B default entity of the logged-in user
    c.logging.wandb_run_name = ""  # "" = the workdir's name
    c.logging.group_trace = False  # groups.jsonl: every rolled-out group's prompt and correct count, per step
    return c


def rl_seed(config) -> int:
    """The seed RL's own draws come from (the data order, rollouts, the selector, the skip audit): the run's
    seed, or for replicate r > 0 a stream of its own. The policy's initialisation, warm start and
    evaluation keys stay the seed's, so replicates of one seed start from one policy and are evaluated
    alike: two of them differ only in what RL drew, which is the noise floor of a comparison paired by
    seed (an A/A test). Configs saved before the field existed read as replicate 0."""
    replicate = int(config.get("replicate", 0))
    if replicate == 0:
        return int(config.seed)
    return int(np.random.SeedSequence([int(config.seed), replicate]).generate_state(1)[0] >> 1)
