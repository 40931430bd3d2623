"""Strategies across rollout engines: runs of one task under several roots (e.g. passes with the padded
update, stream with the length-bucketed one), each root's runs named VARIANT@LABEL, paired per seed
against a baseline run of any root, with the claim table of claim_report.py and the time each step
costs in each engine.

    python experiments/bench/engine_compare.py passes=ROOT_A stream=ROOT_B \
        --baseline ds_fixed@passes --baseline ds_fixed@stream
    python experiments/bench/engine_compare.py passes=ROOT_A aa=ROOT_C --baseline ds_fixed@passes+ds_fixed@aa

Every root is ROOT/VARIANT/seedS as compare_strategies.py writes it; the roots of one comparison
must share their warm starts (the same seed's cache), or the pairing is not fair. One claim table is
printed per --baseline: against the paper-faithful engine's DS, and engine for engine; "A+B" pairs
against the mean of replicate runs of the baseline (ROOT_C holding `config.replicate=1` runs of the same
seeds and warm starts), whose rows are then left out of that table.
"""

from __future__ import annotations

import argparse
import os

from experiments.bench.claim_report import baseline_names, claims, claims_table
from experiments.sweep import finished_runs
from greso_jax.run.records import read_lines
from greso_jax.run.run_stats import run_stats, step_total


def read_runs(roots: dict[str, str]) -> dict[str, dict[int, list[dict]]]:
    """{VARIANT@LABEL: {seed: records}} of every finished run (one with summary.json) under the roots. A
    variant's folder linked into a later root (a shared baseline, so that compare_strategies.py pairs within
    that root) is read once, under the first root's label."""
    runs: dict[str, dict[int, list[dict]]] = {}
    owner: dict[str, str] = {}  # real variant folder -> the name it is read under
    for label, root in roots.items():
        for variant, seed, workdir in finished_runs(root):
            name = f"{variant}@{label}"
            if owner.setdefault(os.path.realpath(os.path.dirname(workdir)), name) != name:
                continue  # a variant folder read under an earlier name
            runs.setdefault(name, {})[seed] = read_lines(os.path.join(workdir, "metrics.jsonl"))
    return runs


def time_table(runs: dict[str, dict[int, list[dict]]]) -> str:
    """Per run name: means over its seeds of the per-step seconds (wall, outside compilation; and CPU) and the
    µs a response costs."""
    lines = ["| run | seeds | final accuracy | responses | rollout s / step | update s / step | total s / step | "
             "rollout share | rollout µs / response | aborted tokens | compile s | rollout CPU s / step | "
             "update CPU s / step | CPU s / step |", "|---|" + "---|" * 13]
    for name, seeds in runs.items():
        stats = [run_stats(r) for r in seeds.values()]
        steps = [max(x["step"] for x in r) for r in seeds.values()]

        def mean(key, per_step=False):
            return sum(s[key] / (n if per_step else 1) for s, n in zip(stats, steps)) / len(stats)

        aborted = sum(step_total(r, "stream/aborted_tokens") for r in seeds.values()) / len(seeds)
        # CPU seconds (compilation included) are what a shared machine's load does not stretch.
        cpu = {key: sum(step_total(r, key) / n for r, n in zip(seeds.values(), steps)) / len(seeds)
               for key in ("cpu/rollout", "cpu/update", "cpu/step")}
        lines.append(f"| {name} | {len(seeds)} | {mean('accuracy_final'):.3f} | {mean('responses'):,.0f} | "
                     f"{mean('rollout_s', True):.3f} | {mean('update_s', True):.3f} | {mean('total_s', True):.3f} | "
                     f"{mean('rollout_share'):.2f} | {1e6 * mean('rollout_s') / mean('responses'):.0f} | "
                     f"{aborted:,.0f} | {mean('compile_s'):.1f} | {cpu['cpu/rollout']:.3f} | {cpu['cpu/update']:.3f} | "
                     f"{cpu['cpu/step']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", help="LABEL=ROOT")
    parser.add_argument("--baseline", action="append", required=True,
                        help="VARIANT@LABEL to pair against; VARIANT@LABEL+VARIANT@LABEL: the mean of replicate runs")
    args = parser.parse_args(argv)
    roots = {}
    for spec in args.roots:
        label, sep, root = spec.partition("=")
        if not sep or not label or not os.path.isdir(root):
            parser.error(f"roots: expected LABEL=ROOT with an existing ROOT, got {spec!r}")
        roots[label] = root
    runs = read_runs(roots)
    for baseline in args.baseline:
        for name in baseline_names(baseline):
            if name not in runs:
                parser.error(f"--baseline: no finished runs named {name!r} (have: {', '.join(runs) or 'none'})")
    print(time_table(runs))
    for baseline in args.baseline:
        print()
        print(claims_table(claims(runs, baseline), baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
