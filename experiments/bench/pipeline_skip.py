"""Prompt-pipeline cost per pulled prompt as the keep filter skips more of them: what a selector's skips cost
before any generation.

Builds the trainer's `PromptPipeline` over an arithmetic training pool (character tokenizer, the "plain"
template) with a GRESO selector as its keep filter, the selector's keep probabilities forced to a fixed rate,
and pulls --steps batches of --batch kept prompts. Prints, per skip rate, microseconds per pulled prompt
(kept + skipped) and per kept prompt, the median of --repeats runs. The pipeline's cost per skipped prompt is
what a run pays for every prompt the selector skips (hundreds of thousands in a GRESO run on the headline
task).

    python experiments/bench/pipeline_skip.py
    python experiments/bench/pipeline_skip.py --num_prompts 20000 --skip_rates 0,0.9,0.99
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from greso_jax.data.arith import ARITH_ALPHABET, make_arith_pools
from greso_jax.data.pipeline import PromptPipeline
from greso_jax.models.tokenizer import CharTokenizer
from greso_jax.selection import GresoSelector


class FixedRateGreso(GresoSelector):
    """GRESO's keep draw (counter-keyed uniforms per occurrence) against one fixed keep probability."""

    keep_rate = 1.0

    def keep_probabilities(self, ids: np.ndarray) -> np.ndarray:
        return np.full(ids.shape, self.keep_rate)


def time_pulls(rows, keep_rate: float, batch: int, steps: int, *, pull: int = 0,
               forget_rate: bool = False) -> tuple[float, int, int]:
    """Seconds to gather `steps` batches of `batch` kept prompts, in pulls of `pull` (0: one pull a batch;
    a stream step refills its free lanes a few prompts a pull) -> (seconds, prompts pulled, prompts kept).
    forget_rate: every pull reads ahead from a keep rate of 1 (as the pipeline did before it remembered
    the recent pulls' rate)."""
    selector = FixedRateGreso(len(rows), seed=0)
    selector.keep_rate = keep_rate
    stream = PromptPipeline(rows, CharTokenizer(ARITH_ALPHABET, 32), template="plain", max_prompt_length=64, seed=0,
                            keep_filter=selector)
    kept = skipped = 0
    start = time.perf_counter()
    for step in range(steps):
        selector.begin_step(step, epoch=stream.epoch)
        step_kept = 0
        while step_kept < batch:
            if forget_rate:
                stream.reset_read_ahead()
            elements, skipped_ids = stream.next_prompts(min(pull or batch, batch - step_kept))
            step_kept += len(elements)
            kept, skipped = kept + len(elements), skipped + len(skipped_ids)
    return time.perf_counter() - start, kept + skipped, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_prompts", type=int, default=3000)
    parser.add_argument("--skip_rates", default="0,0.5,0.9,0.97")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small_pulls", default="1,4", help="pull sizes of the stream table (kept prompts a pull)")
    parser.add_argument("--stream_skip_rates", default="0.9,0.99")
    args = parser.parse_args()
    rows, _ = make_arith_pools(args.num_prompts, 0, seed=0)

    def median_run(rate, **kwargs):
        runs = [time_pulls(rows, 1.0 - rate, args.batch, args.steps, **kwargs) for _ in range(args.repeats)]
        return float(np.median([r[0] for r in runs])), runs[0][1], runs[0][2]

    print(f"{args.num_prompts} prompts, {args.steps} pulls of {args.batch} kept prompts, median of {args.repeats}")
    print("| skip rate | prompts pulled | µs per pulled prompt | µs per kept prompt |")
    print("|---:|---:|---:|---:|")
    for rate in (float(r) for r in args.skip_rates.split(",")):
        seconds, pulled, kept = median_run(rate)
        print(f"| {rate:.2f} | {pulled:,} | {1e6 * seconds / pulled:.1f} | {1e6 * seconds / kept:.1f} |")
    print(f"\nSmall pulls (a stream step refilling its lanes): the same {args.steps} x {args.batch} kept prompts, a few "
          "a pull; µs per pulled prompt when each pull reads ahead from a keep rate of 1 and from the recent pulls' rate")
    print("| skip rate | kept a pull | prompts pulled | from a rate of 1 | from the recent rate | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rate in (float(r) for r in args.stream_skip_rates.split(",")):
        for pull in (int(p) for p in args.small_pulls.split(",")):
            forgetting, pulled, _ = median_run(rate, pull=pull, forget_rate=True)
            remembering, pulled_again, _ = median_run(rate, pull=pull)
            assert pulled == pulled_again, "the read-ahead changed which prompts were pulled"
            print(f"| {rate:.2f} | {pull} | {pulled:,} | {1e6 * forgetting / pulled:.1f} | "
                  f"{1e6 * remembering / pulled:.1f} | {forgetting / remembering:.2f}x |")


if __name__ == "__main__":
    main()
