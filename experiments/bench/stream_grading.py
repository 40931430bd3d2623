"""How much of the stream's grading time hides behind decoding: the same stream steps with each chunk's
grades waited for at once, and collected after the next chunk decoded (`run.rollouts.StreamRollouts`,
`overlap_grading`), side by side.

The workload is the config's model shape (random weights) streaming --lanes lanes of G rows over the
arithmetic pool, every group usable (vanilla) until the batch holds --groups groups. Grading goes to
--workers grading workers whose grader sleeps --grade_ms per response before the math grader runs (a
slow symbolic check; arithmetic answers alone grade in microseconds). Both schedules observe the same
groups at the same points of the stream, so they do the same work; the table gives the step time, the
pool's grading time, the main thread's time on grading (decoding texts, submitting, waiting) and the
share of the grading time that ran while the main thread did something else. Median of --repeats
steps after a warm-up step (compilation).

    python experiments/bench/stream_grading.py
    python experiments/bench/stream_grading.py --grade_ms 0,1,4 --lanes 16 --groups 64
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from experiments.bench.rollout_cost import load_config
from greso_jax.data import arith
from greso_jax.data.prompts import format_prompt
from greso_jax.models import init_model
from greso_jax.rewards import math as math_grader
from greso_jax.rewards.pool import GradingPool
from greso_jax.run import build
from greso_jax.run.rollouts import StreamRollouts
from greso_jax.run.timers import SectionTimers
from greso_jax.selection import Carry, PulledPrompts, make_selector, run_stream_step

HERE = os.path.dirname(os.path.abspath(__file__))
SLEEP_ENV = "GRESO_BENCH_GRADE_SLEEP_S"  # the workers read it: they start with the environment of their spawn


def slow_grade(response, gold, shaping, timeout_s):
    """The math grader after a sleep of $GRESO_BENCH_GRADE_SLEEP_S."""
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    return math_grader.grade(response, gold, shaping, timeout_s)


def run_steps(config, model, tokenizer, pool, payloads, *, lanes, groups, repeats, overlap) -> list[dict]:
    """A warm-up step, then `repeats` timed ones; per timed step its seconds and the grading timers."""
    sel = config.selection
    timers = SectionTimers()
    rollouts = StreamRollouts(model, tokenizer, pool, timers, seed=0, lanes=lanes,
                              num_samples=int(config.rl.group_size),
                              prompt_length=int(config.data.max_prompt_length),
                              max_new_tokens=int(config.sampling.max_new_tokens),
                              chunk_steps=int(sel.stream_chunk_steps), temperature=1.0, top_p=1.0, top_k=0,
                              payload_of=payloads.__getitem__, overlap_grading=overlap)
    selector = make_selector("vanilla", num_prompts=len(payloads), group_size=int(config.rl.group_size), seed=0)
    position = [0]

    def pull(n):
        ids = [(position[0] + i) % len(payloads) for i in range(n)]
        position[0] += n
        return PulledPrompts(np.array(ids, np.int64), [payloads[i] for i in ids], np.zeros(0, np.int64))

    rows, carry = [], Carry()
    for step in range(repeats + 1):
        timers.reset()
        rollouts.begin_step(step)
        start = time.perf_counter()
        _, carry = run_stream_step(selector, step, pull_prompts=pull, backend=rollouts, train_batch_size=groups,
                                   max_responses=10 ** 9, carry=carry)
        rows.append({"step": time.perf_counter() - start, **timers.seconds})
    return rows[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(HERE, "..", "arith_tiny.py"), help="experiment file[:variant]")
    parser.add_argument("--grade_ms", default="0,0.5,2", help="sleep per response in the grader, comma-separated")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--groups", type=int, default=48, help="groups per step (the batch)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = load_config(args.config)
    tokenizer = build.build_tokenizer(config)
    model = init_model(build.model_config(config), seed=config.seed)
    train, _ = arith.make_arith_pools(256, 0, config.data.arith_seed)
    payloads = [{"prompt_id": i, "prompt_tokens": np.asarray(tokenizer.encode(format_prompt(
        row, config.data.prompt_template, tokenizer)), np.int32), "ground_truth": row.ground_truth,
        "data_source": "math"} for i, row in enumerate(train)]  # "math": graded in the workers
    print(f"{args.config}: {model.cfg.num_layers} layers, d={model.cfg.hidden_size}, G={config.rl.group_size}, "
          f"{args.lanes} lanes, {args.groups} groups a step, {args.workers} workers, chunks of "
          f"{config.selection.stream_chunk_steps} steps, median of {args.repeats}, {os.cpu_count()} CPUs")
    print(f"{'ms/resp':>8} {'grades':<10}{'step s':>8}{'graded s':>10}{'main s':>8}{'hidden':>8}{'vs at once':>11}")
    for grade_ms in [float(x) for x in args.grade_ms.split(",")]:
        os.environ[SLEEP_ENV] = repr(grade_ms / 1000)
        with GradingPool(num_workers=args.workers, timeout_s=10.0, grader=slow_grade) as pool:
            runs = {overlap: run_steps(config, model, tokenizer, pool, payloads, lanes=args.lanes,
                                       groups=args.groups, repeats=args.repeats, overlap=overlap)
                    for overlap in (False, True)}
        at_once = float(np.median([r["step"] for r in runs[False]]))
        for overlap, rows in runs.items():
            step, graded, main = (float(np.median([r.get(k, 0.0) for r in rows]))
                                  for k in ("step", "time/reward_graded", "time/reward"))
            share = float(np.sum([r.get("time/reward_hidden", 0.0) for r in rows]) /
                          max(np.sum([r.get("time/reward_graded", 0.0) for r in rows]), 1e-12))
            print(f"{grade_ms:>8.1f} {'overlapped' if overlap else 'at once':<10}{step:>8.3f}{graded:>10.3f}"
                  f"{main:>8.3f}{share:>8.2f}{at_once / step:>10.2f}x")


if __name__ == "__main__":
    main()
