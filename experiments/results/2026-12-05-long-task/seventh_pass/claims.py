"""Seventh pass: the claim table of greso_frontier at fixed passes and in stream mode (fill and fit admission),
paired per seed against ds_fixed run on this machine, from the archives of the sixth and seventh passes.

    python experiments/results/2026-12-05-long-task/seventh_pass/claims.py [--out claims.md]

Runs (all archived by experiments/bench/archive_runs.py, with their records and precise grades):
  ds_fixed                  seeds 0-4 seventh_pass/runs, 5-6 sixth_pass/runs
  greso_frontier@fixed      seeds 0-4 seventh_pass/runs, 5-6 sixth_pass/runs
  greso_frontier@fill       stream, selection.stream_admission=fill: seeds 5-6 sixth_pass/runs (greso_frontier)
  greso_frontier@fit        stream, selection.stream_admission=fit: seventh_pass/stream_fit
  greso_frontier@fit+bound  the same with selection.stream_max_pool_reads=4: seventh_pass/stream_fit_bound
Accuracy here is the runs' recorded evaluation (the curves); the precise finals (64 samples a prompt) are in
paired.md (sixth_pass/paired_with_committed.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from experiments.bench.claim_report import claims, claims_table, print_and_save
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
}


def archived_runs(seeds) -> dict[str, dict[int, list[dict]]]:
    """{name: {seed: records}} of every archived run of SOURCES at `seeds`."""
    runs: dict[str, dict[int, list[dict]]] = {}
    for name, places in SOURCES.items():
        for seed in seeds:
            for archive, variant in places:
                folder = os.path.join(archive, variant, f"seed{seed}")
                if os.path.isdir(folder):
                    runs.setdefault(name, {})[seed] = read_metrics(folder)
                    break
    return runs


def cost_table(runs: dict[str, dict[int, list[dict]]]) -> str:
    """Per name: responses and CPU seconds a step, against ds_fixed's on the seeds both have."""
    base = {seed: run_stats(records) for seed, records in runs["ds_fixed"].items()}
    lines = ["| run | seeds | responses | responses vs ds_fixed | CPU s / step | ds_fixed's CPU s / step |",
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
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    runs = archived_runs([int(s) for s in args.seeds.split(",")])
    if "ds_fixed" not in runs:
        sys.exit("claims.py: no ds_fixed run archived at these seeds")
    text = "\n\n".join([cost_table(runs), claims_table(claims(runs, "ds_fixed"), "ds_fixed")])
    print_and_save(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
