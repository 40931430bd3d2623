"""Benchmark: the learner update's computed tokens and time per real token, padded vs length-bucketed layout, side by side.

    python experiments/bench/update_tokens.py                       # counts at the paper shape + CPU timing
    python experiments/bench/update_tokens.py --time_preset ""      # counts only
    python experiments/bench/update_tokens.py --data_dir $GRESO_SHARED_DATA

Lengths at the paper shape (experiments/qwen2_5_math_1_5b.py: prompt budget 1,536, response
budget 2,560, 256 prompts x G=8 = 2,048 rows per step, mini-batches of 64 prompts, 32 rows per
micro-batch): prompt lengths are real DAPO prompts under the "greso" template, tokenized by a
byte-level BPE of 32,768 tokens trained on DAPO prompts (no Qwen tokenizer is downloaded, so a
prompt is a little longer in tokens than under Qwen's); every prompt's 8 response lengths are
drawn from the long-tail shape of experiments/bench/sampler.py (log-normal, median 30% of the
budget, 10% of responses at the budget: truncated). The token counts are exact for that
sample; no model runs for them.

Timing: this machine has no accelerator, so the update is timed at a small shape: the same
sample with every length scaled by --scale (1/16: budgets 96 + 160), the --time_preset model,
--time_prompts x 8 rows, two mini-batches, 16 rows per micro-batch, float32. Each layout's
update runs once to compile (reported apart: the bucketed layout compiles one gradient per
bucket it meets) and then --repeats times; the table reports the best.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from experiments.bench.sampler import long_tail_budgets
from greso_jax.data.catalog import data_root
from greso_jax.data.prompts import format_prompt
from greso_jax.data.sources import load_verl_parquet
from greso_jax.rl.micro_batches import bucket_lengths, bucketed_micro_batches, computed_tokens

DAPO = "dapo_math17k_cleaned/train.parquet"
PROMPT_BUDGET, RESPONSE_BUDGET, GROUP = 1536, 2560, 8
PAPER_PROMPTS, PAPER_MINI_PROMPTS, PAPER_MICRO_ROWS = 256, 64, 32


def paper_lengths(num_prompts: int, seed: int, tokenizer_prompts: int, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths, response lengths), int [num_prompts x G] each: group-major rows as the trainer lays them out."""
    from greso_jax.models.tokenizer import train_bpe_tokenizer

    rows = load_verl_parquet(os.path.join(data_root(data_dir), DAPO))
    texts = [rows[i].question for i in range(min(tokenizer_prompts, len(rows)))]
    tokenizer = train_bpe_tokenizer(texts, tempfile.mkdtemp(prefix="update-tokens-"), vocab_size=32768)
    order = np.random.default_rng(seed).permutation(len(rows))
    prompts = []
    for i in order:  # the pipeline drops prompts over the budget
        n = len(tokenizer.encode(format_prompt(rows[int(i)], "greso", tokenizer)))
        if n <= PROMPT_BUDGET:
            prompts.append(n)
        if len(prompts) == num_prompts:
            break
    responses = long_tail_budgets(num_prompts * GROUP, RESPONSE_BUDGET, seed=seed)
    return np.repeat(prompts, GROUP).astype(np.int64), responses.astype(np.int64)


def layout_counts(lengths: np.ndarray, width: int, num_minibatches: int, micro_rows: int, ratio: float) -> dict:
    """Computed tokens of one update pass, padded and bucketed, for rows of `lengths` tokens."""
    plan = bucketed_micro_batches(lengths, num_minibatches=num_minibatches, micro_rows=micro_rows,
                                  buckets=bucket_lengths(width, ratio))
    return {"real": int(lengths.sum()), "padded": int(lengths.size * width), "bucketed": computed_tokens(plan),
            "shapes": len({mb.length for mini in plan for mb in mini})}


def time_update(preset: str, prompt_lengths, response_lengths, width: int, layout: str, repeats: int,
                seed: int = 0) -> dict:
    """Compile seconds and best update seconds of one layout on a batch of these lengths."""
    import jax

    from greso_jax.config import get_config
    from greso_jax.models import PRESETS, init_model
    from greso_jax.rl import make_train_batch
    from greso_jax.run.build import learner_from_config

    rng = np.random.default_rng(seed)
    cfg = PRESETS[preset].replace(dtype="float32", param_dtype="float32")
    rows = prompt_lengths.size
    prompts = [list(rng.integers(1, cfg.vocab_size, n)) for n in prompt_lengths]
    longest = int(response_lengths.max())
    batch = make_train_batch(prompts, rng.integers(1, cfg.vocab_size, (rows, longest)), response_lengths,
                             rng.normal(-3.0, 0.5, (rows, longest)), rng.normal(size=rows).astype(np.float32),
                             pad_id=0, total_length=width)
    c = get_config()
    c.rl.micro_batch_size, c.rl.update_layout = 16, layout
    learner = learner_from_config(init_model(cfg, seed=0), c)
    started = time.perf_counter()
    metrics = learner.update(batch, num_minibatches=2)
    jax.block_until_ready(learner.train_state()["params"])
    compile_s = time.perf_counter() - started
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        learner.update(batch, num_minibatches=2)
        jax.block_until_ready(learner.train_state()["params"])
        best = min(best, time.perf_counter() - started)
    return {"first_s": compile_s, "update_s": best, "tokens": metrics["actor/update_tokens"],
            "padding_share": metrics["actor/update_padding_share"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratios", default="1.25,1.5", help="bucket ratios of the token-count table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data_dir", default="", help="folder holding " + DAPO + " (default: the data root)")
    parser.add_argument("--tokenizer_prompts", type=int, default=4000)
    parser.add_argument("--time_preset", default="tiny", help="model the update is timed with ('' = no timing)")
    parser.add_argument("--time_prompts", type=int, default=16)
    parser.add_argument("--scale", type=float, default=1 / 16, help="length scale of the timed shape")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    prompts, responses = paper_lengths(PAPER_PROMPTS, args.seed, args.tokenizer_prompts, args.data_dir)
    lengths, width = prompts + responses, PROMPT_BUDGET + RESPONSE_BUDGET
    print(f"paper shape: {lengths.size:,} rows, width {width:,}; prompt tokens mean {prompts.mean():.0f} "
          f"(max {prompts.max()}), response tokens mean {responses.mean():.0f} (median {np.median(responses):.0f}, "
          f"{np.mean(responses == RESPONSE_BUDGET):.0%} at the budget)")
    print("| layout | bucket ratio | computed tokens | real tokens | computed / real | padding share | shapes |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for ratio in (float(r) for r in args.ratios.split(",")):
        counts = layout_counts(lengths, width, PAPER_PROMPTS // PAPER_MINI_PROMPTS, PAPER_MICRO_ROWS, ratio)
        rows = ([("padded", "-", counts["padded"], 1)] if ratio == float(args.ratios.split(",")[0]) else [])
        rows.append(("bucketed", ratio, counts["bucketed"], counts["shapes"]))
        for layout, shown_ratio, computed, shapes in rows:
            print(f"| {layout} | {shown_ratio} | {computed:,} | {counts['real']:,} | {computed / counts['real']:.2f}x | "
                  f"{1 - counts['real'] / computed:.1%} | {shapes} |")

    if not args.time_preset:
        return
    rows = args.time_prompts * GROUP
    small_prompts = np.maximum(1, np.round(prompts[:rows] * args.scale)).astype(np.int64)
    small_responses = np.maximum(1, np.round(responses[:rows] * args.scale)).astype(np.int64)
    small_width = int(round(width * args.scale))
    print(f"\ntimed at preset {args.time_preset}: {rows} rows of the same sample scaled by {args.scale:g} "
          f"(width {small_width}), 2 mini-batches, 16 rows per micro-batch, float32, best of {args.repeats}")
    print("| layout | computed tokens | padding share | first update s (compiles) | update s | "
          "µs per real token | time vs padded |\n|---|---:|---:|---:|---:|---:|---:|")
    real = float((small_prompts + small_responses).sum())
    results = {layout: time_update(args.time_preset, small_prompts, small_responses, small_width, layout,
                                   args.repeats) for layout in ("padded", "bucketed")}
    for layout, r in results.items():
        print(f"| {layout} | {r['tokens']:,.0f} | {r['padding_share']:.1%} | {r['first_s']:.1f} | {r['update_s']:.2f} | "
              f"{1e6 * r['update_s'] / real:.1f} | {r['update_s'] / results['padded']['update_s']:.2f}x |")


if __name__ == "__main__":
    main()
