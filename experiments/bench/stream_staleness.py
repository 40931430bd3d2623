"""How stale a stream run's training batches are, level by level: the share of the usable groups it trained a
step after they were sampled (carried under selection.stream_in_flight = "carry"), and what the learner saw of it.

  python experiments/bench/stream_staleness.py --root runs/long_stream --strategies greso_frontier --seeds 5,6 \
      [--from_step 150] [--batch 64] [--out FILE.md]

Runs are ROOT/VARIANT/seedS (live or archived by archive_runs.py) with logging.group_trace on; arithmetic
tasks, whose rows carry a difficulty level. A step's batch is its carried groups, then its own usable groups
in the order they finished (`run_stream_step`, `Selector.finish_step`), so the trace (each step's groups in
finishing order) and the step's stream/carried_groups say which of a step's usable groups were trained in
it and which were carried into the next. Per run, over the steps after --from_step: the carried share of
the trained batch, per level the share of its usable groups past the batch, and the learner's view of
staleness (clip fractions and the first update's |log-prob - sampler's|, actor/logprob_mismatch). A run at
fixed passes carries nothing (its usable groups past the batch are dropped, in data order: the reference for
how evenly the levels would share it) and its clip fractions are the reference for a fresh batch.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import numpy as np

from experiments.bench.claim_report import print_and_save
from experiments.bench.level_diagnosis import run_levels
from greso_jax.run.records import read_group_trace, read_metrics

LEARNER_KEYS = ("actor/clipfrac_low", "actor/clipfrac_high", "actor/logprob_mismatch")


def carried_by_level(trace: Sequence[dict], carried_in: dict[int, int], levels: np.ndarray, batch: int,
                     from_step: int) -> dict[int, dict]:
    """Per level: usable (mixed) groups sampled after `from_step` and the share carried into the next step.
    carried_in: {step: groups carried into that step's batch}; a step without an entry carried nothing in."""
    usable, carried = {}, {}
    for row in trace:
        if row["step"] <= from_step:
            continue
        room = batch - carried_in.get(row["step"], 0)  # the step's own groups fill what the carried left
        for prompt, correct, samples in zip(row["prompt_ids"], row["num_correct"], row["num_samples"]):
            if 0 < correct < samples:
                level = int(levels[prompt])
                usable[level] = usable.get(level, 0) + 1
                if room > 0:
                    room -= 1
                else:
                    carried[level] = carried.get(level, 0) + 1
    return {level: {"usable": n, "carried": carried.get(level, 0) / n} for level, n in sorted(usable.items())}


def run_staleness(workdir: str, batch: int, from_step: int) -> dict:
    """One run's carried share of its batches, per-level carried shares and learner means after `from_step`."""
    records = [r for r in read_metrics(workdir) if r.get("step", 0) > from_step]
    carried_in = {r["step"]: int(r.get("stream/carried_groups", 0)) for r in records}
    levels, _ = run_levels(workdir)
    out = {"batch_carried": float(np.mean([carried_in[s] / batch for s in carried_in])) if carried_in else 0.0,
           "levels": carried_by_level(read_group_trace(workdir), carried_in, levels, batch, from_step)}
    for key in LEARNER_KEYS:
        values = [r[key] for r in records if key in r]
        out[key] = float(np.mean(values)) if values else float("nan")
    return out


def table(rows: dict[str, dict]) -> str:
    """Markdown: one line per run, its per-level carried shares (the levels with usable groups) in one cell."""
    lines = ["| run | carried share of the batch | usable groups past the batch (stream: carried; passes: dropped), "
             "by level (usable groups) | "
             "clip fraction (low + high) | log-prob mismatch |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        per_level = ", ".join(f"{level}: {v['carried']:.2f} ({v['usable']:,})" for level, v in r["levels"].items()
                              if v["usable"] >= 100)
        clip = r["actor/clipfrac_low"] + r["actor/clipfrac_high"]
        lines.append(f"| {name} | {r['batch_carried']:.2f} | {per_level} | {clip:.4f} | "
                     f"{r['actor/logprob_mismatch']:.4f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="ROOT/VARIANT/seedS; several roots comma-separated, "
                        "each as LABEL=ROOT")
    parser.add_argument("--strategies", required=True)
    parser.add_argument("--seeds", default="5,6")
    parser.add_argument("--from_step", type=int, default=150)
    parser.add_argument("--batch", type=int, default=64, help="train.train_batch_size of the runs")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    roots = [part.split("=", 1) if "=" in part else ["", part] for part in args.root.split(",")]
    rows = {}
    for label, root in roots:
        for variant in args.strategies.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                workdir = os.path.join(root, variant, f"seed{seed}")
                if not os.path.isdir(workdir):
                    continue
                name = f"{variant}{'@' + label if label else ''}, seed {seed}"
                rows[name] = run_staleness(workdir, args.batch, args.from_step)
    if not rows:
        sys.exit(f"stream_staleness: no run of {args.strategies} (seeds {args.seeds}) under {args.root}")
    print_and_save(f"**Staleness of the trained batches, steps after {args.from_step}**\n\n{table(rows)}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
