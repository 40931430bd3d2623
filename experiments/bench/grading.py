"""Grading throughput on MATH-500: responses/s for the gold solution vs its gold answer
(correct) and for a perturbed final answer (wrong), in-process and with 1 and 2 workers.

    python experiments/bench/grading.py [--data_dir ../shared/data] [--workers 0,1,2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import re
import time

from greso_jax.data.sources import load_benchmark
from greso_jax.rewards.math import MAX_ANSWER_CHARS, gold_answer
from greso_jax.rewards.pool import GradingPool

DEFAULT_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")


def perturbed(solution: str) -> str:
    """The solution with its last boxed answer replaced by a wrong one (first digit + 1, or "+1")."""
    answer = gold_answer(solution)
    match = re.search(r"\d", answer)
    wrong = (answer[:match.start()] + str((int(match.group()) + 1) % 10) + answer[match.end():]) if match \
        else answer + "+1"
    start = solution.rfind("\\boxed{" + answer + "}")
    return solution[:start] + "\\boxed{" + wrong[:MAX_ANSWER_CHARS] + "}" + solution[start + len(answer) + 8:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=DEFAULT_DATA)
    parser.add_argument("--workers", default="0,1,2")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout_s", type=float, default=2.0)
    args = parser.parse_args()

    import json

    path = os.path.join(args.data_dir, "math500", "test.jsonl")
    with open(path) as f:
        solutions = [json.loads(line)["answer"] for line in f if line.strip()]
    rows = load_benchmark("math500", args.data_dir)
    golds = [row.ground_truth for row in rows]
    cases = {"gold solution": solutions, "perturbed answer": [perturbed(s) for s in solutions]}
    sources = ["math500"] * len(golds)

    print(f"MATH-500: {len(golds)} responses per case, timeout {args.timeout_s} s, {os.cpu_count()} CPUs")
    print(f"{'workers':>8} | {'case':<17} | {'responses/s':>11} | {'correct':>7} | {'timeouts':>8} | {'errors':>6}")
    for workers in (int(w) for w in args.workers.split(",")):
        with GradingPool(num_workers=workers, timeout_s=args.timeout_s) as pool:
            pool.score(["\\boxed{1}"] * max(1, workers), ["1"] * max(1, workers), ["m"] * max(1, workers))
            for name, responses in cases.items():
                start = time.perf_counter()
                for _ in range(args.repeats):
                    result = pool.score(responses, golds, sources)
                rate = args.repeats * len(responses) / (time.perf_counter() - start)
                print(f"{workers:>8} | {name:<17} | {rate:>11.1f} | {int(result.correct.sum()):>7} | "
                      f"{result.num_timeouts:>8} | {result.num_errors:>6}")


if __name__ == "__main__":
    main()
