"""Sixth pass: new runs paired per seed with the baselines an earlier machine measured, read from committed files.

The run folders of the earlier passes were lost with their machine; this machine reproduces them (ds_fixed on
seed 5 ends at the same precise and recorded accuracy, 0.5632 / 0.5733, and seed 0's warm start at the same
step and validation accuracy; README, sixth pass). So a new run pairs with the committed per-seed numbers:
precise accuracy (64 samples a prompt, step 400) of ds_fixed and of the mean of its two runs from
`fifth_pass/precise_eval.md`, and ds_fixed's responses and CPU seconds from `passes/strategies.json` (seeds
0-4) or from a ds_fixed rerun in the archive (seeds 5, 6).

    python experiments/results/2026-12-05-long-task/sixth_pass/paired_with_committed.py \
        --archive experiments/results/2026-12-05-long-task/sixth_pass/runs

--archive takes several archives, comma-separated: a run is read from the first that holds it (a later
pass pairs its runs with the ds_fixed reruns archived here).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from experiments.bench.claim_report import _interval_cell, mean_interval, ratio_interval
from experiments.bench.precise_eval import archive_key, archived_grades
from greso_jax.run.records import read_metrics
from greso_jax.run.run_stats import run_stats

HERE = os.path.dirname(os.path.abspath(__file__))
PASS_DIR = os.path.dirname(HERE)
STEP, SAMPLES = 400, 64


def committed_precise(path: str) -> dict[str, dict[int, float]]:
    """ds_fixed's precise accuracy per seed at STEP from the two per-run tables of fifth_pass/precise_eval.md:
    {"ds_fixed": {seed: acc}, "ds_mean": {seed: acc}} (the second table's ds_fixed rows are the mean of its
    two runs)."""
    tables = open(path).read().split("## Against the mean of ds_fixed's two replicates")
    out = {}
    for name, text in zip(("ds_fixed", "ds_mean"), tables):
        rows = re.findall(rf"^\| ds_fixed \| (\d+) \| {STEP} \| ([0-9.]+) \|", text, flags=re.M)
        out[name] = {int(seed): float(acc) for seed, acc in rows}
    return out


def committed_costs(path: str) -> dict[int, dict[str, float]]:
    """ds_fixed's responses and CPU seconds per seed from a compare_strategies.py report (strategies.json)."""
    per_run = json.load(open(path))["per_run"]["ds_fixed"]
    return {int(seed): {"responses": run["responses"], "cpu_s": run["cpu_s"]} for seed, run in per_run.items()}


def archived_run(archives: str, variant: str, seed: int) -> dict | None:
    """A run's precise accuracy at STEP, responses and CPU seconds from the first of the comma-separated
    `archives` that holds it, or None when none does."""
    folders = [os.path.join(archive, variant, f"seed{seed}") for archive in archives.split(",")]
    folder = next((f for f in folders if os.path.isdir(f)), None)
    if folder is None:
        return None
    grades = archived_grades(folder)
    records = read_metrics(folder)
    stats = run_stats(records)
    return {"precise": grades[archive_key(STEP, SAMPLES)]["accuracy"], "responses": stats["responses"],
            "cpu_s": stats["cpu_s"], "steps": sum(r.get("step", 0) > 0 for r in records)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", default=os.path.join(HERE, "runs"), help="archives, comma-separated")
    parser.add_argument("--strategies", default="greso_rested,greso_frontier,greso_frontier@fixed")
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6")
    args = parser.parse_args(argv)
    precise = committed_precise(os.path.join(PASS_DIR, "fifth_pass", "precise_eval.md"))
    costs = committed_costs(os.path.join(PASS_DIR, "passes", "strategies.json"))
    seeds = [int(s) for s in args.seeds.split(",")]
    for seed in seeds:
        rerun = archived_run(args.archive, "ds_fixed", seed)
        if rerun is not None:
            if not math.isclose(rerun["precise"], precise["ds_fixed"][seed], abs_tol=5e-5):
                sys.exit(f"ds_fixed seed {seed}: the rerun's {rerun['precise']:.4f} is not the committed "
                         f"{precise['ds_fixed'][seed]:.4f}: this machine does not reproduce the earlier runs")
            costs[seed] = rerun
    lines = ["| strategy | seeds | final − ds_fixed | final − mean of DS's two runs | per seed (vs the mean) | "
             "responses vs ds_fixed | CPU s / step (ds_fixed) |", "|---|---|---|---|---|---|---|"]
    for variant in args.strategies.split(","):
        runs = {s: run for s in seeds if (run := archived_run(args.archive, variant, s)) is not None}
        vs_ds = [runs[s]["precise"] - precise["ds_fixed"][s] for s in runs]
        vs_mean = [runs[s]["precise"] - precise["ds_mean"][s] for s in runs]
        costed = [s for s in runs if s in costs]
        fewer = [costs[s]["responses"] / runs[s]["responses"] for s in costed]
        cpu = sum(runs[s]["cpu_s"] / runs[s]["steps"] for s in costed) / max(len(costed), 1)
        ds_cpu = sum(costs[s]["cpu_s"] / STEP for s in costed) / max(len(costed), 1)
        lines.append(f"| {variant} | {','.join(map(str, runs))} | {_interval_cell(mean_interval(vs_ds))} | "
                     f"{_interval_cell(mean_interval(vs_mean))} | {', '.join(f'{d:+.3f}' for d in vs_mean)} | "
                     f"{_interval_cell(ratio_interval(fewer), digits=2, sign=False)}x fewer | "
                     f"{cpu:.3f} ({ds_cpu:.3f}) |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
