"""Passes vs stream: time per response of the same workload, generated in passes (one sampler call per
pass, each waiting on its longest row) or streamed through lanes (`sampling.stream.LaneEngine`, a lane
refilled with the next prompt as soon as its G rows are done), side by side in one run.

The workload is --prompts prompts x G (the config's model shape, random weights, no EOS so that each
row's length is exactly its budget). Budgets: "answer" (each arithmetic prompt's solution length + 1,
the headline task's lengths under a policy that learnt it) and "long tail" (`bench/sampler.py`'s
long-tail shape, cap --long_cap). Passes run at the pass sizes selectors produce (--pass_sizes: a full
first pass and the smaller follow-ups); the stream runs --lanes lanes. Each number is the median of
--repeats runs after a warm-up run (compilation). Also: the stream's useful tokens/s (tokens generated
/ time) against the no-EOS rate at its shape (lanes x G rows decoding cap tokens each, one plain call).

    python experiments/bench/stream_cost.py
    python experiments/bench/stream_cost.py --prompts 192 --lanes 32 --pass_sizes 96,32,8 --long_cap 128
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

from experiments.bench.rollout_cost import load_config
from experiments.bench.sampler import long_tail_budgets
from greso_jax.data import arith
from greso_jax.data.prompts import format_prompt
from greso_jax.models import init_model
from greso_jax.run import build
from greso_jax.sampling import generate
from greso_jax.sampling.stream import LaneEngine

HERE = os.path.dirname(os.path.abspath(__file__))


def run_passes(model, prompts, budgets, cap, group, pass_size, seed) -> int:
    """The workload in passes of pass_size prompts; returns the tokens generated."""
    tokens = 0
    for i, start in enumerate(range(0, len(prompts), pass_size)):
        out = generate(model, prompts[start:start + pass_size], num_samples=group,
                       max_new_tokens=budgets[start:start + pass_size], max_new_tokens_cap=cap,
                       rng=jax.random.fold_in(jax.random.key(seed), i), eos_ids=(), pad_id=0)
        tokens += int(out.lengths.sum())
    return tokens


def run_stream(engine: LaneEngine, prompts, budgets, seed) -> int:
    """The workload through the engine's lanes, in order; returns the tokens generated."""
    waiting, tokens = list(range(len(prompts))), 0
    while waiting or engine.busy() or engine.finished():
        for lane in engine.finished():
            tokens += int(engine.collect(lane).lengths.sum())
        for lane in np.flatnonzero(engine.free).tolist():
            if waiting:
                i = waiting.pop(0)
                engine.admit(lane, prompts[i], jax.random.fold_in(jax.random.PRNGKey(seed), i), int(budgets[i]))
        engine.advance()
    return tokens


def timed(fn, repeats):
    fn(0)  # warm-up: compilation
    times = []
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        tokens = fn(seed)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(HERE, "..", "arith_tiny.py"), help="experiment file[:variant]")
    parser.add_argument("--prompts", type=int, default=96, help="prompts in the workload")
    parser.add_argument("--pass_sizes", default="96,32,8", help="prompts per pass, comma-separated")
    parser.add_argument("--lanes", type=int, action="append", help="stream lanes (repeatable; default 32)")
    parser.add_argument("--long_cap", type=int, default=64, help="cap of the long-tail budgets")
    parser.add_argument("--chunk_steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = load_config(args.config)
    tokenizer = build.build_tokenizer(config)
    model = init_model(build.model_config(config), seed=config.seed)
    group, n = int(config.rl.group_size), args.prompts
    train, _ = arith.make_arith_pools(n, 0, config.data.arith_seed)
    prompts = [tokenizer.encode(format_prompt(row, config.data.prompt_template, tokenizer)) for row in train]
    prompt_length = max(len(p) for p in prompts)
    answer_cap = int(config.sampling.max_new_tokens)
    answer = np.minimum([len(arith.solution_text(row)) + 1 for row in train], answer_cap).astype(np.int32)
    shapes = [("answer", answer, answer_cap), (f"long {args.long_cap}", long_tail_budgets(n, args.long_cap),
                                               args.long_cap)]
    lane_counts = args.lanes or [32]
    pass_sizes = [int(s) for s in args.pass_sizes.split(",")]
    print(f"{args.config}: {model.cfg.num_layers} layers, d={model.cfg.hidden_size}, G={group}, {n} prompts, "
          f"no EOS, median of {args.repeats}, {os.cpu_count()} CPUs")
    print(f"{'budgets':<9}{'mode':<14}{'mean len':>9}{'s':>8}{'us/resp':>9}{'vs passes':>10}{'tok/s':>9}"
          f"{'vs no-EOS':>10}{'busy':>6}")
    for name, budgets, cap in shapes:
        rows = []
        for size in pass_sizes:
            seconds, tokens = timed(lambda s: run_passes(model, prompts, budgets, cap, group, size, s), args.repeats)
            rows.append((f"passes of {size}", seconds, tokens, None, None))
        for lanes in lane_counts:
            engine = LaneEngine(model, lanes=lanes, num_samples=group, prompt_length=prompt_length,
                                max_new_tokens=cap, eos_ids=(), chunk_steps=args.chunk_steps)
            seconds, tokens = timed(lambda s: run_stream(engine, prompts, budgets, s), args.repeats)
            full = np.full(lanes, cap, np.int32)  # the no-EOS rate at the stream's shape: every row runs to cap
            no_eos_s, no_eos_tokens = timed(lambda s: run_passes(model, prompts[:lanes], full, cap, group, lanes, s),
                                            args.repeats)
            share = engine.busy_row_steps / engine.decoded_row_steps if engine.decoded_row_steps else 0.0
            rows.append((f"stream {lanes}", seconds, tokens, (tokens / seconds) / (no_eos_tokens / no_eos_s), share))
        largest_pass = rows[0][1]
        for mode, seconds, tokens, vs_no_eos, share in rows:
            per = seconds / (n * group)
            extra = f"{vs_no_eos:>10.2f}{share:>6.2f}" if vs_no_eos is not None else ""
            print(f"{name:<9}{mode:<14}{tokens / (n * group):>9.1f}{seconds:>8.3f}{per * 1e6:>9.0f}"
                  f"{largest_pass / seconds:>9.2f}x{tokens / seconds:>9.0f}{extra}")


if __name__ == "__main__":
    main()
