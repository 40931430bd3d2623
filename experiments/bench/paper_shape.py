"""A paper config at its real shape, once: random weights of its preset, real DAPO prompts, a byte-level
BPE tokenizer trained on those prompts, a few training steps through the trainer; prints each step's
time split (rollout / reward / update / the rest), its responses and tokens, and the device's peak memory.

    python experiments/bench/paper_shape.py                      # qwen2_5_math_1_5b.py:greso, 3 steps, 1,024 tokens
    python experiments/bench/paper_shape.py --config experiments/qwen2_5_math_1_5b.py:vanilla --steps 1
    python experiments/bench/paper_shape.py --tiny               # CPU smoke test: bench-30m, short lengths

Random weights answer every prompt wrongly, so every group is zero-variance. GRESO and DS would keep
rolling out until `selection.max_passes`; here a step runs one pass (`selection.max_passes` 1,
`on_max_passes` "train"), so its rollout is the paper's rollout batch at the paper's G and the step
then has no group to train on. The `:vanilla` variant trains on every group (zero advantages, full
compute), which times the update at the paper's batch. No weights or tokenizer are downloaded: the
point is the shapes, memory and the time split, not the learning.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import jax

from experiments.bench.rollout_cost import load_config
from greso_jax.data.catalog import data_root
from greso_jax.data.sources import load_verl_parquet
from greso_jax.models import PRESETS
from greso_jax.models.tokenizer import train_bpe_tokenizer
from greso_jax.run.trainer import Trainer

HERE = os.path.dirname(os.path.abspath(__file__))

DAPO = "dapo_math17k_cleaned/train.parquet"
SPLIT = ("time/rollout", "time/reward", "time/update")
SMOKE_PRESET = "bench-30m"  # the smallest preset whose vocabulary holds a byte-level BPE (>= 259 tokens)


def shaped_config(c, args, tokenizer_dir: str, data_path: str):
    """The experiment's config `c` with random weights of its preset, the trained tokenizer, the DAPO
    parquet, one rollout pass per step, no evaluation and no checkpoints between the steps."""
    c.model.path, c.model.tokenizer, c.model.tokenizer_path = "", "hf", tokenizer_dir
    c.data.dataset, c.data.path = "", data_path
    c.sampling.max_new_tokens = args.new_tokens
    c.train.num_steps = args.steps
    c.selection.max_passes, c.selection.on_max_passes = 1, "train"
    c.eval.benchmarks = ()
    c.checkpoint.every_steps = 0
    if args.tiny:
        c.model.preset, c.model.dtype, c.model.param_dtype, c.model.remat = SMOKE_PRESET, "float32", "float32", False
        c.data.max_prompt_length = 512
        c.train.train_batch_size, c.selection.rollout_batch_size, c.selection.min_pass_size = 8, 8, 8
        c.rl.mini_batch_size, c.rl.micro_batch_size, c.sampling.max_rows_per_call = 8, 8, 64
        c.data.grading_workers = 1
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(os.path.dirname(HERE), "qwen2_5_math_1_5b.py") + ":greso")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--new_tokens", type=int, default=None, help="default: 1,024 (16 with --tiny)")
    parser.add_argument("--data_dir", default="", help="folder holding " + DAPO + " (default: the data root)")
    parser.add_argument("--tokenizer_prompts", type=int, default=4000, help="prompts the tokenizer is trained on")
    parser.add_argument("--tiny", action="store_true", help=f"the {SMOKE_PRESET} preset at small batches and lengths")
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    if args.new_tokens is None:
        args.new_tokens = 16 if args.tiny else 1024
    workdir = args.workdir or tempfile.mkdtemp(prefix="paper-shape-")
    data_path = os.path.join(data_root(args.data_dir), DAPO)
    rows = load_verl_parquet(data_path)
    config = load_config(args.config)
    preset = PRESETS[SMOKE_PRESET if args.tiny else config.model.preset]
    texts = [rows[i].question for i in range(min(args.tokenizer_prompts, len(rows)))]
    tokenizer = train_bpe_tokenizer(texts, os.path.join(workdir, "tokenizer"), vocab_size=min(preset.vocab_size, 32768))
    config = shaped_config(config, args, os.path.join(workdir, "tokenizer"), data_path)
    print(f"config {args.config} at preset {config.model.preset}: train batch {config.train.train_batch_size}, "
          f"rollout batch {config.selection.rollout_batch_size} x G {config.rl.group_size}, "
          f"{config.sampling.max_new_tokens} new tokens, tokenizer of {tokenizer.vocab_size} tokens; "
          f"devices {jax.devices()}", flush=True)
    trainer = Trainer(config, os.path.join(workdir, "run"))
    print("| step | responses | response tokens | groups trained | rollout s | reward s | update s | other s | "
          "step s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    tokens_before = 0
    for step in range(1, args.steps + 1):
        m = trainer.train_step(step)
        split = [m.get(k, 0.0) for k in SPLIT]
        tokens = int(m.get("rollout/num_tokens", 0)) - tokens_before  # a running count in the metrics
        tokens_before += tokens
        print(f"| {step} | {int(m.get('rollout/step_responses', 0)):,} | {tokens:,} | "
              f"{m.get('train/groups', 0)} | " + " | ".join(f"{s:.1f}" for s in split)
              + f" | {m['time/step'] - sum(split):.1f} | {m['time/step']:.1f} |", flush=True)
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    print(f"device peak memory: {peak / 2**30:.1f} GiB" if peak else "device peak memory: not reported here")
    print("the first step includes compilation (rollout and update programs)")


if __name__ == "__main__":
    main()
