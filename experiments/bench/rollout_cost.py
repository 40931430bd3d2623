"""Rollout cost per call: how one trainer rollout call's time splits and scales with the responses it generates.

For the model shape of an experiment config (default experiments/arith_tiny.py, random weights), times the
trainer's rollout path (`run.rollouts.PassRollouts`): `generate_in_chunks` with the config's sampling kwargs, decoding
each row to text, and grading through the config's `GradingPool` with `score_across_hosts`, for several prompt
counts x G, after a warm-up call per shape (its time, compilation included, is reported apart). Each row is
the median over --repeats calls with fresh keys.

Response lengths: in the "answer" setting each prompt's token budget is its solution's length + 1 (the EOS),
what a policy that has learnt the task generates; the "long tail" setting (cap --long_cap) draws budgets from
`experiments/bench/sampler.py`'s long-tail shape, the lengths under EOS of a longer-generation task. Random
weights may also end a row early with EOS, as a policy does.

    python experiments/bench/rollout_cost.py
    python experiments/bench/rollout_cost.py --row_buckets 8,16,32,64,128,256,512,1024,2048,4096 --row_buckets config
    python experiments/bench/rollout_cost.py --live_prompts 0 --live_prompts 8    # plain calls vs refill, 8 lanes

With --live_prompts K (repeatable), calls of more than K prompts run through K refill lanes
(`sampling.live_prompts`): the rows per decode step stay K x G whatever the call's size, so a
call's time can follow its responses instead of its row bucket.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from experiments.bench.sampler import long_tail_budgets
from greso_jax.data import arith
from greso_jax.data.prompts import format_prompt
from greso_jax.models import init_model
from greso_jax.parallel import multihost
from greso_jax.rewards.pool import GradingPool, score_across_hosts
from greso_jax.run import build
from greso_jax.run.build import sampling_kwargs
from greso_jax.sampling import compile_count, generate_in_chunks

HERE = os.path.dirname(os.path.abspath(__file__))


def load_config(spec: str):
    """`path[:variant]` of an experiment file -> its config, read as the train CLI's --config reads it
    (unlocked: the benchmarks reshape it)."""
    return ConfigFileFlagParser("config", lock_config=False).parse(spec)


def rollout_call(model, tokenizer, pool, rows, prompts, budgets, cap, group, kwargs, seed):
    """One rollout as the trainer runs it -> (seconds for generate, decode, grade; the SampleOutput)."""
    start = time.perf_counter()
    out = generate_in_chunks(model, prompts, num_samples=group, rng=jax.random.fold_in(jax.random.key(0), seed),
                             eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id, max_new_tokens_cap=cap,
                             **dict(kwargs, max_new_tokens=budgets))
    generated = time.perf_counter()
    texts = [tokenizer.decode(out.tokens[r, :out.lengths[r]]) for r in range(out.tokens.shape[0])]
    decoded = time.perf_counter()
    golds = [row.ground_truth for row in rows for _ in range(group)]
    sources = [row.data_source for row in rows for _ in range(group)]
    score_across_hosts(pool, texts, golds, sources, process_index=jax.process_index(),
                       process_count=jax.process_count(), allgather=multihost.allgather)
    graded = time.perf_counter()
    return (generated - start, decoded - generated, graded - decoded), out


def parse_buckets(spec: str, config) -> tuple[int, ...]:
    """'config' -> the config's sampling.row_buckets; '8,16,...' -> those buckets."""
    return tuple(config.sampling.row_buckets) if spec == "config" else tuple(int(b) for b in spec.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(HERE, "..", "arith_tiny.py"), help="experiment file[:variant]")
    parser.add_argument("--prompts", default="8,16,24,32,48,64,96,128", help="prompt counts per call")
    parser.add_argument("--long_prompts", default="16,32,128", help="prompt counts of the long-tail setting ('' = off)")
    parser.add_argument("--long_cap", type=int, default=64, help="max_new_tokens of the long-tail setting")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--row_buckets", action="append",
                        help="row buckets to compare, comma-separated, or 'config' (the config's; repeatable)")
    parser.add_argument("--live_prompts", type=int, action="append",
                        help="refill lane counts to compare (0: plain calls; repeatable; default: the config's)")
    args = parser.parse_args()

    config = load_config(args.config)
    tokenizer = build.build_tokenizer(config)
    model = init_model(build.model_config(config), seed=config.seed)
    group = int(config.rl.group_size)
    kwargs = sampling_kwargs(config)
    counts = [int(n) for n in args.prompts.split(",")]
    long_counts = [int(n) for n in args.long_prompts.split(",") if n]
    train, _ = arith.make_arith_pools(max(counts + long_counts), 0, config.data.arith_seed)
    encoded = [tokenizer.encode(format_prompt(row, config.data.prompt_template, tokenizer)) for row in train]
    answer_budgets = np.array([len(arith.solution_text(row)) + 1 for row in train], np.int32)
    settings = [("answer", n, np.minimum(answer_budgets[:n], kwargs["max_new_tokens"]), kwargs["max_new_tokens"])
                for n in counts]
    settings += [(f"long {args.long_cap}", n, long_tail_budgets(n, args.long_cap), args.long_cap) for n in long_counts]

    print(f"{args.config}: {model.cfg.num_layers} layers, d={model.cfg.hidden_size}, vocab {model.cfg.vocab_size}, "
          f"G={group}, grading_workers={config.data.grading_workers}, {os.cpu_count()} CPUs, "
          f"median of {args.repeats}")
    header = (f"{'setting':<9}{'prompts':>8}{'rows':>6}{'bucket':>7}{'len':>6}{'gen ms':>8}"
              f"{'text ms':>8}{'grade ms':>9}{'total ms':>9}{'us/resp':>8}{'vs largest':>11}{'first s':>8}")
    lane_counts = args.live_prompts or [int(config.sampling.live_prompts)]
    cases = [(f"{spec}, live_prompts {lanes}", dict(row_buckets=parse_buckets(spec, config), live_prompts=lanes),
              *setting) for spec in args.row_buckets or ["config"] for lanes in lane_counts for setting in settings]
    with GradingPool(num_workers=config.data.grading_workers, timeout_s=config.data.grading_timeout_s,
                     shaping=config.data.reward_shaping) as pool:

        def run(case, seed):
            _, options, _, n, budgets, cap = case
            return rollout_call(model, tokenizer, pool, train[:n], encoded[:n], budgets, cap, group,
                                dict(kwargs, **options), seed)

        first, compiled = [], {}
        for case in cases:  # warm-up: each shape's first call, compilation included
            before, start = compile_count(), time.perf_counter()
            run(case, seed=0)
            first.append(time.perf_counter() - start)
            compiled[case[0]] = compiled.get(case[0], 0) + compile_count() - before
        splits, lengths, rows = [[] for _ in cases], [0.0] * len(cases), [0] * len(cases)
        for seed in range(1, args.repeats + 1):  # interleaved, so that load from other work hits every case alike
            for i, case in enumerate(cases):
                split, out = run(case, seed)
                splits[i].append(split)
                lengths[i], rows[i] = out.lengths.mean(), out.rows
    medians = [np.median(s, axis=0) for s in splits]

    for spec in dict.fromkeys(case[0] for case in cases):
        mine = [i for i, case in enumerate(cases) if case[0] == spec]
        print(f"\nrow buckets {spec}: {cases[mine[0]][1]['row_buckets']}; {compiled[spec]} programs compiled, "
              f"first calls (compilation included) {sum(first[i] for i in mine):.1f} s")
        print(header)
        for setting in dict.fromkeys(cases[i][2] for i in mine):
            same = [i for i in mine if cases[i][2] == setting]
            largest = max(same, key=lambda i: cases[i][3])
            per_largest = medians[largest].sum() / (cases[largest][3] * group)
            for i in same:
                split, n = medians[i], cases[i][3]
                per = split.sum() / (n * group)
                print(f"{setting:<9}{n:>8}{n * group:>6}{rows[i]:>7}{lengths[i]:>6.1f}{split[0] * 1e3:>8.1f}"
                      f"{split[1] * 1e3:>8.1f}{split[2] * 1e3:>9.1f}{split.sum() * 1e3:>9.1f}{per * 1e6:>8.0f}"
                      f"{per / per_largest:>10.2f}x{first[i]:>8.2f}")


if __name__ == "__main__":
    main()
