"""The GRESO paper's training setup, shared by its three model configs (one `paper_config` call each).

Hyperparameters from the paper (verl recipes of "Act Only When It Pays"): G = 8, AdamW lr 1e-6
constant, weight decay 0.01, PPO clip 0.2, grad clip 1.0, entropy bonus 0.001, no KL; GRESO
p_easy = p_hard = 0.5, Δp = 0.01, target zero-variance ratio 0.25, p in [0.05, 0.95], adapting
from the second epoch; GRESO's follow-up passes at least 64 prompts; the Dynamic Sampling
baseline in fixed passes of rollout_batch_size prompts (384 for the Qwen2.5-Math runs);
evaluation with 4 samples at temperature 1.0, top-p 0.7 on the six math benchmarks of its tables.
Batch sizes, prompt and response lengths come from each model's file. Every other number is
ours and marked "ours" below. AERO's settings are ours too (its paper's method section was not
available): per-prompt budget rl.group_size, the other strategies' budget.

The training set (the GRESO/DAPO parquet) and the six benchmarks are named data sets, found in
the data folder: `python -m greso_jax.data.fetch paper` fills the default one ($GRESO_DATA, else
the user's cache); `--config.data.data_dir=/data --config.eval.data_dir=/data` points at another
folder in that layout (docs/data.md). Only the model folder comes from a flag:
  --config.model.path=/models/Qwen2.5-Math-1.5B
"""

from greso_jax.config.base import get_config
from greso_jax.selection import training_strategy_names

PAPER_BENCHMARKS = ("math500", "aime24", "amc23", "minerva_math", "olympiadbench", "gaokao2023en")


def paper_config(variant: str, *, preset: str, train_batch_size: int, rollout_batch_size: int,
                 max_prompt_length: int, max_response_length: int, micro_batch_size: int):
    """The paper's config for one model; `variant` names the selection strategy: any registered training
    strategy or an alias such as "ds" (greso_jax.selection.training_strategy_names())."""
    c = get_config()
    variant = (variant or c.selection.strategy).strip()  # the base config's strategy by default
    known = training_strategy_names()
    if variant not in known:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(known)}")
    c.seed = 0

    c.model.preset = preset  # the architecture, for abstract builds and memory planning without a folder
    c.model.path = ""  # from --config.model.path
    c.model.dtype = "bfloat16"
    c.model.param_dtype = "float32"  # ours: f32 master weights, as verl's FSDP mixed precision keeps
    c.model.remat = True  # ours: 4k-8k-token sequences do not fit without rematerialisation
    c.model.tokenizer = "hf"

    c.data.source = "parquet"
    c.data.dataset = "dapo_math17k"  # the GRESO paper's training set (verl parquet), by name
    # 7 of its prompts occur twice with different gold answers; the paper trained on every row
    c.data.allow_conflicting_golds = True
    c.data.path = ""
    c.data.prompt_template = "greso"
    c.data.max_prompt_length = max_prompt_length
    c.data.reward_shaping = "greso"  # the authors' reward: 1 correct, 0.1 boxed but wrong, 0 no box
    c.data.grading_workers = 8  # ours
    c.data.grading_timeout_s = 2.0

    c.sampling.max_new_tokens = max_response_length
    c.sampling.temperature = 1.0
    c.sampling.top_p = 1.0
    c.sampling.top_k = 0

    c.rl.group_size = 8
    c.rl.advantage = "grpo"
    c.rl.loss_aggregation = "token-mean"
    c.rl.clip_low = 0.2
    c.rl.clip_high = 0.2
    c.rl.kl_coef = 0.0
    c.rl.entropy_coef = 0.001
    c.rl.ppo_epochs = 1
    c.rl.mini_batch_size = 64
    c.rl.micro_batch_size = micro_batch_size  # ours: responses per forward/backward, all devices together
    # ours: rows average ~1,170 of the 4,096 tokens here; length buckets cut the update's computed
    # tokens from ~3.5x the real ones to ~1.2x (docs/design.md, "The update's layout").
    c.rl.update_layout = "bucketed"
    # ours: 512 rows x 4,096 tokens of KV cache is ~56 GiB in bf16 for the 1.5B shape (28 KiB per
    # token), split over the data-parallel devices; a whole 384 x 8 pass at once would be ~336 GiB.
    c.sampling.max_rows_per_call = 512

    c.train.num_steps = 1000  # ours: the paper reports curves over training; extend with the flag
    c.train.train_batch_size = train_batch_size
    c.train.learning_rate = 1e-6
    c.train.lr_schedule = "constant"
    c.train.warmup_steps = 0
    c.train.weight_decay = 0.01
    c.train.grad_clip = 1.0
    c.train.warmstart_steps = 0
    c.train.quiet = True  # ours: one line per step suits cluster logs

    c.selection.strategy = variant  # an alias is resolved by config.validate
    c.selection.rollout_batch_size = rollout_batch_size
    c.selection.min_pass_size = 64  # GRESO's follow-up passes: at least 64 prompts
    # ours: the paper's DS ran fixed passes with no cap; 16 passes of 384 prompts is a 24x
    # over-provision, and hitting it raises (as DAPO's max_num_gen_batches does) instead of
    # silently training on a partial batch.
    c.selection.max_passes = 16
    c.selection.on_max_passes = "error"
    c.selection.dynamic_sampling.pass_sizing = "fixed"
    c.selection.greso.p_easy = 0.5
    c.selection.greso.p_hard = 0.5
    c.selection.greso.delta_p = 0.01
    c.selection.greso.target_zero_variance = 0.25
    c.selection.greso.p_min = 0.05
    c.selection.greso.p_max = 0.95
    c.selection.greso.adapt_from_epoch = 1

    c.mesh.data = 1
    c.mesh.fsdp = -1  # ours: FSDP over every device, as the paper's verl runs shard the model
    c.mesh.tensor = 1

    c.checkpoint.every_steps = 50  # ours
    c.checkpoint.keep = 3

    c.eval.every_steps = 25  # ours
    c.eval.num_samples = 4
    c.eval.temperature = 1.0
    c.eval.top_p = 0.7
    c.eval.max_new_tokens = 0  # the training response length
    c.eval.benchmarks = PAPER_BENCHMARKS
    c.eval.max_problems = 0
    c.eval.data_dir = ""  # "" = the data folder of the fetched sets
    return c
