"""Whether a selector's policy learns the task or its training prompts: accuracy on training prompts
against held-out ones, per run, paired by seed against ds_fixed.

  python experiments/bench/generalization_gap.py --root runs/long \
      --strategies greso@fixed,greso_patient@fixed --seeds 0,1,2 [--step 400] [--train_problems 600] [--out FILE]

A selector that skips reads its pool faster than DS and trains on a narrower set of prompts, more often
(per_step_diagnosis.py: coverage and concentration). If the policy then memorises those prompts, its
accuracy on them rises while held-out accuracy (what the runs are judged by) does not. For each run
ROOT/VARIANT/seedS (its checkpoint at --step, default the newest) this samples and grades, with the
run's own evaluation settings and seed, the held-out set ("synthetic") and a fixed draw of
--train_problems rows of the training pool (the same rows for every run: the pool and the level mix are
the config's), and reads from the run's group trace (logging.group_trace) how many times the run
trained on each drawn row (its mixed groups). Reported per run and, for each strategy, paired against
ds_fixed on the same seed with a Student-t 95% interval over seeds: held-out accuracy, training-pool
accuracy, their difference (the generalisation gap), and the mean times trained of the drawn rows.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import numpy as np

from experiments.bench.claim_report import _interval_cell, mean_interval
from experiments.bench.precise_eval import emit_paired, grading_pool, open_checkpoint, runs_with_checkpoints
from greso_jax.selection import baseline

TRAIN_DRAW_SEED = 20261205  # the draw of training rows every run is graded on


def times_trained(trace: Sequence[dict], num_prompts: int) -> np.ndarray:
    """Mixed groups (the ones a filtering strategy trains on) per prompt id over a group trace, int [num_prompts]."""
    counts = np.zeros(num_prompts, np.int64)
    for line in trace:
        ids = np.asarray(line["prompt_ids"], np.int64)
        correct, samples = np.asarray(line["num_correct"]), np.asarray(line["num_samples"])
        np.add.at(counts, ids[(correct > 0) & (correct < samples)], 1)
    return counts


def train_draw(num_rows: int, num_problems: int) -> np.ndarray:
    """The training-row indices graded for every run: a fixed draw without replacement, int [min(n, rows)]."""
    rng = np.random.default_rng(TRAIN_DRAW_SEED)
    return np.sort(rng.choice(num_rows, size=min(num_problems, num_rows), replace=False))


def grade_run(workdir: str, step: int | None, num_problems: int, log=print) -> dict:
    """Held-out and training-pool accuracy of one run's checkpoint, and the drawn rows' times trained."""
    from greso_jax.run.records import read_group_trace
    from greso_jax.run.scoring import sample_and_grade

    checkpoint = open_checkpoint(workdir, step)
    drawn = train_draw(len(checkpoint.train_rows), num_problems)
    model, tokenizer, settings, mesh = checkpoint.model, checkpoint.tokenizer, checkpoint.settings, checkpoint.mesh
    with grading_pool(checkpoint.config) as pool:
        heldout = sample_and_grade(model, tokenizer, checkpoint.eval_sets["synthetic"], settings, pool=pool, mesh=mesh)
        train = sample_and_grade(model, tokenizer, [checkpoint.train_rows[i] for i in drawn], settings, pool=pool,
                                 mesh=mesh)
    trained = times_trained(read_group_trace(workdir), len(checkpoint.train_rows))[drawn]
    result = {"step": checkpoint.step, "heldout": float(heldout.mean()), "train": float(train.mean()),
              "times_trained": float(trained.mean()), "never_trained": float(np.mean(trained == 0))}
    result["gap"] = result["train"] - result["heldout"]
    log(f"  {workdir} step {checkpoint.step}: held-out {result['heldout']:.4f}, training pool {result['train']:.4f}")
    return result


FIELDS = ("heldout", "train", "gap", "times_trained", "never_trained")


def paired_table(per_run: dict[str, dict[int, dict]], base: str) -> list[dict]:
    """Per strategy (not the baseline): each field's difference to the baseline on the same seed, with
    its 95% t interval over the seeds both ran."""
    rows = []
    for strategy, seeds in per_run.items():
        if strategy == base:
            continue
        common = sorted(set(seeds) & set(per_run.get(base, {})))
        row = {"strategy": strategy, "seeds": len(common)}
        for name in FIELDS:
            row[name] = mean_interval([seeds[s][name] - per_run[base][s][name] for s in common])
        rows.append(row)
    return rows


def tables(per_run: dict[str, dict[int, dict]], base: str) -> str:
    lines = ["**Per run** (checkpoint step; accuracy on the held-out set and on the drawn training rows; gap = "
             "training − held-out; the drawn rows' mean times trained and share never trained)", "",
             "| strategy | seed | step | held-out | training pool | gap | times trained | never trained |",
             "|---|---|---|---|---|---|---|---|"]
    for strategy, seeds in per_run.items():
        for seed, r in sorted(seeds.items()):
            lines.append(f"| {strategy} | {seed} | {r['step']} | {r['heldout']:.4f} | {r['train']:.4f} | "
                         f"{r['gap']:+.4f} | {r['times_trained']:.2f} | {r['never_trained']:.3f} |")
    lines += ["", f"**Paired against {base}** (strategy − {base} on the same seed, mean [95% t interval])", "",
              "| strategy | seeds | held-out | training pool | gap | times trained | never trained |",
              "|---|---|---|---|---|---|---|"]
    for row in paired_table(per_run, base):
        lines.append(f"| {row['strategy']} | {row['seeds']} | " + " | ".join(_interval_cell(row[f]) for f in FIELDS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of ROOT/VARIANT/seedS runs (compare_strategies.py)")
    parser.add_argument("--strategies", required=True, help="comma-separated variants; the baseline is added")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: each run's newest)")
    parser.add_argument("--train_problems", type=int, default=600)
    parser.add_argument("--out", default="", help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    if args.train_problems < 1:
        parser.error("--train_problems must be >= 1")
    base = baseline().name
    per_run: dict[str, dict[int, dict]] = {}
    for strategy, seed, workdir in runs_with_checkpoints(args.root, args.strategies, args.seeds):
        per_run.setdefault(strategy, {})[seed] = grade_run(workdir, args.step, args.train_problems)
    emit_paired(parser, args, per_run, base, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
