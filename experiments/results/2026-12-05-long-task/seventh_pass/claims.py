"""Seventh pass: the claim table of greso_frontier at fixed passes and in stream mode (fill and fit admission),
paired per seed against ds_fixed run on this machine, from the archives of the sixth and seventh passes.

    python experiments/results/2026-12-05-long-task/seventh_pass/claims.py [--out claims.md]

Runs (all archived by experiments/bench/archive_runs.py, with their records and precise grades):
  ds_fixed                  seeds 0-4 seventh_pass/runs, 5-6 sixth_pass/runs
  greso_frontier@fixed      seeds 0-4 seventh_pass/runs, 5-6 sixth_pass/runs
  greso_frontier@fill       stream, selection.stream_admission=fill: seeds 5-6 sixth_pass/runs (greso_frontier)
  greso_frontier@fit        stream, selection.stream_admission=fit: seventh_pass/stream_fit
  greso_frontier@fit+bound  the same with selection.stream_max_pool_reads=4: seventh_pass/stream_fit_bound
  ds_fixed@stream           ds_fixed in stream mode, fit admission (DS on the selectors' engine): seventh_pass/ds_stream
`--baseline ds_fixed@stream` pairs everything against DS on the same engine instead.
Accuracy here is the runs' recorded evaluation (the curves); the last table pairs the precise finals (64 samples
a prompt, step 400, from each archive's precise.json) against the baseline's single run; against the mean of
DS's two runs see paired.md (sixth_pass/paired_with_committed.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from experiments.bench.claim_report import claims, claims_table, mean_interval, print_and_save
from experiments.bench.precise_eval import archive_key, archived_grades
from greso_jax.run.records import read_metrics
from greso_jax.run.run_stats import run_stats

HERE = os.path.dirname(os.path.abspath(__file__))
SIXTH = os.path.join(os.path.dirname(HERE), "sixth_pass", "runs")
# name in the tables -> [(archive, variant folder)], the first archive holding a seed wins
SOURCES = {
    "ds_fixed": [(os.path.join(HERE, "runs"), "ds_fixed"), (SIXTH, "ds_fixed")],
    "greso_frontier@fixed": [(os.path.join(HERE, "runs"), "greso_frontier@fixed"), (SIXTH, "greso_frontier@fixed")],
    "greso_frontier@fill": [(SIXTH, "greso_frontier")],
    "greso_frontier@fit": [(os.path.join(HERE, "stream_fit"), "greso_frontier")],
    "greso_frontier@fit+bound": [(os.path.join(HERE, "stream_fit_bound"), "greso_frontier")],
    "ds_fixed@stream": [(os.path.join(HERE, "ds_stream"), "ds_fixed")],
}
FINAL_STEP, PRECISE_SAMPLES = 400, 64


def archived_folders(seeds) -> dict[str, dict[int, str]]:
    """{name: {seed: archived run folder}} of SOURCES at `seeds`."""
    folders: dict[str, dict[int, str]] = {}
    for name, places in SOURCES.items():
        for seed in seeds:
            for archive, variant in places:
                folder = os.path.join(archive, variant, f"seed{seed}")
                if os.path.isdir(folder):
                    folders.setdefault(name, {})[seed] = folder
                    break
    return folders


def precise_table(folders: dict[str, dict[int, str]], baseline: str) -> str:
    """Per name: the precise final accuracy minus the baseline's on the seeds both have, [95% t interval]."""
    def precise(folder):
        return archived_grades(folder)[archive_key(FINAL_STEP, PRECISE_SAMPLES)]["accuracy"]

    base = {seed: precise(folder) for seed, folder in folders[baseline].items()}
    lines = [f"**Precise final accuracy against {baseline}** ({PRECISE_SAMPLES} samples a prompt at step "
             f"{FINAL_STEP}; mean [95% t interval] of the per-seed differences)", "",
             "| strategy | seeds | final Δ | per seed |", "|---|---|---|---|"]
    for name, by_seed in folders.items():
        seeds = sorted(s for s in by_seed if s in base)
        if name == baseline or not seeds:
            continue
        diffs = [precise(by_seed[s]) - base[s] for s in seeds]
        v = mean_interval(diffs)
        interval = f"{v['mean']:+.4f}" + (f" [{v['low']:+.4f}, {v['high']:+.4f}]" if len(diffs) > 1 else "")
        lines.append(f"| {name} | {','.join(map(str, seeds))} | {interval} | {', '.join(f'{d:+.3f}' for d in diffs)} |")
    return "\n".join(lines)


def cost_table(runs: dict[str, dict[int, list[dict]]], baseline: str) -> str:
    """Per name: responses and CPU seconds a step, against the baseline's on the seeds both have."""
    base = {seed: run_stats(records) for seed, records in runs[baseline].items()}
    lines = [f"| run | seeds | responses | responses vs {baseline} | CPU s / step | {baseline}'s CPU s / step |",
             "|---|---|---|---|---|---|"]
    for name, by_seed in runs.items():
        seeds = sorted(s for s in by_seed if s in base)
        stats = [run_stats(by_seed[s]) for s in seeds]
        steps = [max(r.get("step", 0) for r in by_seed[s]) for s in seeds]
        responses = sum(s["responses"] for s in stats) / len(seeds)
        fewer = sum(base[s]["responses"] for s in seeds) / sum(s["responses"] for s in stats)
        cpu = sum(s["cpu_s"] / n for s, n in zip(stats, steps)) / len(seeds)
        base_cpu = sum(base[s]["cpu_s"] / n for s, n in zip(seeds, steps)) / len(seeds)
        lines.append(f"| {name} | {','.join(map(str, seeds))} | {responses:,.0f} | {fewer:.2f}x fewer | {cpu:.3f} | "
                     f"{base_cpu:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6")
    parser.add_argument("--baseline", default="ds_fixed", choices=sorted(SOURCES))
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    folders = archived_folders([int(s) for s in args.seeds.split(",")])
    if args.baseline not in folders:
        sys.exit(f"claims.py: no {args.baseline} run archived at these seeds")
    runs = {name: {seed: read_metrics(folder) for seed, folder in by_seed.items()} for name, by_seed in folders.items()}
    text = "\n\n".join([cost_table(runs, args.baseline), claims_table(claims(runs, args.baseline), args.baseline),
                         precise_table(folders, args.baseline)])
    print_and_save(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
