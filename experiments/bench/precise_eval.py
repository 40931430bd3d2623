"""Held-out accuracy without most of the evaluation's sampling noise: each run's checkpoints regraded with
many samples per prompt, paired by seed against ds_fixed.

  python experiments/bench/precise_eval.py --root runs/long --strategies greso@fixed,greso_patient@fixed \
      [--seeds 0,1,2,3,4] [--steps 200,300,400] [--samples 32] [--cache FILE.json] [--out FILE.md]

A run's own evaluation samples each held-out prompt eval.num_samples times (4) at temperature 1, so its
accuracy carries sampling noise: with per-prompt success rates p_i over P prompts, a K-sample accuracy has
variance mean_i(p_i (1 - p_i)) / (K P), and a paired difference of two runs the sum of two such: on the
arithmetic headline a standard deviation of the order of the differences the claim reports. Sampling noise is not a property of the policy, and more samples remove it, where more seeds only average
it. For each run ROOT/VARIANT/seedS and each checkpoint step this tool samples --samples responses per
held-out prompt with the run's own evaluation settings and seed (paired runs share the seed, hence the
sampling keys) and reports, per strategy and step, the paired difference to ds_fixed with a Student-t 95%
interval over seeds, beside the same difference from the runs' own evaluations, and the sampling standard
deviation each carries (estimated from the per-prompt counts). What remains in the interval is how the
runs trained: only more seeds narrow that.

Graded checkpoints are kept in --cache (keyed by the run's real path, step and samples), so a second call,
another root whose baseline is a link to the same runs, or a killed call resumes without regrading. A run
archived by archive_runs.py (no checkpoints, its grades in precise.json) is read from its archived grades.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import NamedTuple, Sequence

import numpy as np

from experiments.bench.claim_report import _interval_cell, mean_interval, print_and_save
from greso_jax.selection import baseline


class Checkpoint(NamedTuple):
    """One run's checkpoint ready to sample: its config, the step it holds, the policy and what sampling it
    needs, and the rows of its training pool and evaluation sets."""

    config: object
    step: int
    model: object
    tokenizer: object
    mesh: object
    settings: object
    train_rows: list
    eval_sets: dict


def open_checkpoint(workdir: str, step: int | None) -> Checkpoint:
    """The checkpoint of run `workdir` at `step` (None: its newest), with the run's evaluation settings."""
    from greso_jax.evaluate import resolve_checkpoint, run_config
    from greso_jax.parallel.sharding import mesh_from_config
    from greso_jax.run.build import build_tokenizer, eval_settings, load_policy, rows_from_config

    path = os.path.join(workdir, "checkpoints", str(step)) if step is not None else workdir
    source = resolve_checkpoint(path, log=lambda *a: None)
    config = run_config(source, None)
    train_rows, eval_sets = rows_from_config(config)
    if "synthetic" not in eval_sets:
        raise ValueError(f"{workdir}: the run has no arithmetic held-out set (data.source must be arith)")
    mesh = mesh_from_config(config.mesh)
    model = load_policy(config, mesh, workdir=source.path, step=source.step)
    return Checkpoint(config, source.step, model, build_tokenizer(config), mesh, eval_settings(config), train_rows,
                      eval_sets)


def grading_pool(config):
    from greso_jax.rewards.pool import GradingPool

    return GradingPool(num_workers=config.data.grading_workers, timeout_s=config.data.grading_timeout_s)


def recorded_accuracy(workdir: str, step: int) -> float | None:
    """The run's own evaluation accuracy at `step` (metrics.jsonl), None if it did not evaluate there."""
    from greso_jax.run.records import read_metrics

    values = [r["eval/accuracy"] for r in read_metrics(workdir) if r.get("step") == step and "eval/accuracy" in r]
    return float(values[-1]) if values else None


def sampling_sd(correct_counts: Sequence[int], counted_samples: int, samples: int) -> float:
    """Standard deviation of a `samples`-sample held-out accuracy from sampling alone, estimated from
    per-prompt correct counts out of `counted_samples` (p(1 - p) unbiased: times K / (K - 1))."""
    k = counted_samples
    p = np.asarray(correct_counts, np.float64) / k
    variance = p * (1 - p) * (k / (k - 1) if k > 1 else 1.0)
    return float(math.sqrt(variance.mean() / (samples * p.size)))


def grade_checkpoint(workdir: str, step: int, samples: int) -> dict:
    """One checkpoint's held-out accuracy with `samples` samples per prompt, the run's own recorded
    accuracy at that step, and the per-prompt correct counts."""
    import dataclasses

    from greso_jax.run.scoring import sample_and_grade

    checkpoint = open_checkpoint(workdir, step)
    settings = dataclasses.replace(checkpoint.settings, num_samples=samples)
    with grading_pool(checkpoint.config) as pool:
        correct = sample_and_grade(checkpoint.model, checkpoint.tokenizer, checkpoint.eval_sets["synthetic"], settings,
                                   pool=pool, mesh=checkpoint.mesh)
    return {"step": checkpoint.step, "samples": samples, "accuracy": float(correct.mean()),
            "recorded": recorded_accuracy(workdir, checkpoint.step),
            "recorded_samples": int(checkpoint.config.eval.num_samples),
            "correct_counts": correct.sum(axis=1).astype(int).tolist()}


ARCHIVED_GRADES = "precise.json"  # an archived run's grades, {archive_key: graded} (archive_runs.py)


def archive_key(step: int, samples: int) -> str:
    return f"{step}x{samples}"


def cache_key(workdir: str, step: int, samples: int) -> str:
    return f"{os.path.realpath(workdir)}@{archive_key(step, samples)}"


def archived_grades(workdir: str) -> dict:
    """An archived run's grades, {archive_key(step, samples): graded checkpoint}."""
    with open(os.path.join(workdir, ARCHIVED_GRADES)) as f:
        return json.load(f)


def is_archived(workdir: str) -> bool:
    """Whether `workdir` is an archived run: no checkpoints, its grades in precise.json."""
    return (not os.path.isdir(os.path.join(workdir, "checkpoints"))
            and os.path.isfile(os.path.join(workdir, ARCHIVED_GRADES)))


def load_cache(path: str) -> dict:
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def save_cache(path: str, cache: dict) -> None:
    if not path:
        return
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        json.dump(cache, f)
    os.replace(partial, path)


def with_noise(graded: dict) -> dict:
    """A graded checkpoint with the sampling standard deviation of its own accuracy and of its run's
    recorded one."""
    counts, k = graded["correct_counts"], graded["samples"]
    return {**graded, "sd": sampling_sd(counts, k, k), "recorded_sd": sampling_sd(counts, k, graded["recorded_samples"])}


def averaged(entries: Sequence[dict]) -> dict:
    """Replicate runs of one seed graded at one step, as one baseline: the mean of their accuracies (and
    of their recorded ones), with the sampling SD of those means; `replicates` counts them."""
    n, recorded = len(entries), [e["recorded"] for e in entries]
    return {**entries[0], "accuracy": float(np.mean([e["accuracy"] for e in entries])),
            "recorded": None if None in recorded else float(np.mean(recorded)),
            "sd": math.sqrt(sum(e["sd"] ** 2 for e in entries)) / n,
            "recorded_sd": math.sqrt(sum(e["recorded_sd"] ** 2 for e in entries)) / n, "replicates": n}


def paired_rows(per_run: dict[str, dict[int, dict[int, dict]]], base: str) -> list[dict]:
    """Per strategy (not the baseline) and step: the precise and the recorded accuracy differences to the
    baseline on the seeds both graded there, with 95% t intervals, the per-seed precise differences, and
    the root-mean-square sampling standard deviation of one paired difference of each kind."""
    rows = []
    for strategy, seeds in per_run.items():
        if strategy == base:
            continue
        steps = sorted({step for by_step in seeds.values() for step in by_step})
        for step in steps:
            common = sorted(s for s in seeds if step in seeds[s] and step in per_run.get(base, {}).get(s, {}))
            if not common:
                continue
            pairs = [(seeds[s][step], per_run[base][s][step]) for s in common]
            diffs = [a["accuracy"] - b["accuracy"] for a, b in pairs]
            recorded = [a["recorded"] - b["recorded"] for a, b in pairs
                        if a["recorded"] is not None and b["recorded"] is not None]
            rows.append({"strategy": strategy, "step": step, "seeds": common, "diff": mean_interval(diffs),
                         "per_seed": diffs, "recorded_diff": mean_interval(recorded),
                         "sd": math.sqrt(np.mean([a["sd"] ** 2 + b["sd"] ** 2 for a, b in pairs])),
                         "recorded_sd": math.sqrt(np.mean([a["recorded_sd"] ** 2 + b["recorded_sd"] ** 2
                                                           for a, b in pairs]))})
    return rows


def tables(per_run: dict[str, dict[int, dict[int, dict]]], base: str) -> str:
    samples = sorted({g["samples"] for seeds in per_run.values() for by_step in seeds.values() for g in by_step.values()})
    recorded = sorted({g["recorded_samples"] for seeds in per_run.values() for by_step in seeds.values()
                       for g in by_step.values()})
    k, k_rec = "/".join(map(str, samples)), "/".join(map(str, recorded))
    replicates = max(g.get("replicates", 1) for by_step in per_run.get(base, {}).values() for g in by_step.values())
    of_base = f" (the mean of its {replicates} replicates)" if replicates > 1 else ""
    lines = [f"**Paired against {base}** (strategy − {base}{of_base} on the same seed and step, mean [95% t interval]; "
             f"precise: {k} samples a prompt, recorded: the runs' own evaluation, {k_rec} samples; sampling SD: "
             "the standard deviation one paired difference carries from sampling alone)", "",
             "| strategy | step | seeds | Δ precise | Δ recorded | per seed (precise) | sampling SD precise | "
             "sampling SD recorded |", "|---|---|---|---|---|---|---|---|"]
    for row in paired_rows(per_run, base):
        per_seed = ", ".join(f"{d:+.3f}" for d in row["per_seed"])
        lines.append(f"| {row['strategy']} | {row['step']} | {len(row['seeds'])} | {_interval_cell(row['diff'])} | "
                     f"{_interval_cell(row['recorded_diff'])} | {per_seed} | {row['sd']:.4f} | {row['recorded_sd']:.4f} |")
    lines += ["", f"**Per run** (held-out accuracy, precise and recorded, and the sampling SD of each)", "",
              "| strategy | seed | step | precise | recorded | sampling SD precise | sampling SD recorded |",
              "|---|---|---|---|---|---|---|"]
    for strategy, seeds in per_run.items():
        for seed, by_step in sorted(seeds.items()):
            for step, g in sorted(by_step.items()):
                rec = "—" if g["recorded"] is None else f"{g['recorded']:.4f}"
                lines.append(f"| {strategy} | {seed} | {step} | {g['accuracy']:.4f} | {rec} | {g['sd']:.4f} | "
                             f"{g['recorded_sd']:.4f} |")
    return "\n".join(lines) + "\n"


def runs_with_checkpoints(root: str, strategies: str, seeds: str):
    """(strategy, seed, workdir) of each run ROOT/VARIANT/seedS holding checkpoints (or archived grades), the
    baseline's first; `strategies` and `seeds` are the comma-separated flags. A run with neither is named on
    stderr."""
    base = baseline().name
    names = [base] + [s.strip() for s in strategies.split(",") if s.strip() and s.strip() != base]
    for strategy in names:
        for seed in (int(s) for s in seeds.split(",") if s.strip()):
            workdir = os.path.join(root, strategy, f"seed{seed}")
            if not os.path.isdir(os.path.join(workdir, "checkpoints")) and not is_archived(workdir):
                print(f"  {workdir}: no checkpoints, left out", file=sys.stderr)
                continue
            yield strategy, seed, workdir


def emit_paired(parser, args, per_run: dict, base: str, tables) -> None:
    """Prints `tables(per_run, base)` and, with --out, writes it there too; without a baseline run to pair
    against, exits through `parser` naming --root and --seeds."""
    if base not in per_run:
        parser.error(f"no {base} run under {args.root} for seeds {args.seeds}: nothing to pair against")
    print_and_save(tables(per_run, base), args.out)


def graded_steps(workdir: str, steps: Sequence[int | None], samples: int, cache: dict, cache_path: str) -> dict:
    """{step: graded checkpoint with its sampling SDs} of one run at `steps` (None: its newest), read from
    `cache` where graded before, else graded and added to it (saved to `cache_path` at once). An archived
    run's grades come from its archive; a step it was not graded at is named on stderr and left out."""
    if is_archived(workdir):
        return _archived_steps(workdir, archived_grades(workdir), steps, samples)
    graded_at = {}
    for step in steps:
        if step is not None and not os.path.isdir(os.path.join(workdir, "checkpoints", str(step))):
            print(f"  {workdir}: no checkpoint at step {step}, left out", file=sys.stderr)
            continue
        graded = cache.get(cache_key(workdir, step, samples)) if step is not None else None
        if graded is None:
            graded = grade_checkpoint(workdir, step, samples)
            cache[cache_key(workdir, graded["step"], samples)] = graded
            save_cache(cache_path, cache)
            print(f"  {workdir} step {graded['step']}: {graded['accuracy']:.4f} ({samples} samples), "
                  f"recorded {graded['recorded']}", file=sys.stderr)
        graded_at[graded["step"]] = with_noise(graded)
    return graded_at


def _archived_steps(workdir: str, archived: dict, steps: Sequence[int | None], samples: int) -> dict:
    graded_at = {}
    at_samples = sorted(g["step"] for key, g in archived.items() if key == archive_key(g["step"], samples))
    for step in steps:
        step = step if step is not None else (at_samples[-1] if at_samples else None)
        graded = archived.get(archive_key(step, samples)) if step is not None else None
        if graded is None:
            print(f"  {workdir}: archived without a grade at step {step} with {samples} samples, left out",
                  file=sys.stderr)
            continue
        graded_at[graded["step"]] = with_noise(graded)
    return graded_at


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of ROOT/VARIANT/seedS runs (compare_strategies.py)")
    parser.add_argument("--strategies", required=True, help="comma-separated variants; the baseline is added")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--steps", default="", help="comma-separated checkpoint steps (default: each run's newest)")
    parser.add_argument("--samples", type=int, default=32, help="samples per held-out prompt")
    parser.add_argument("--baseline_replicates", action="append", default=[],
                        help="a folder of ROOT/BASELINE/seedS runs replicating the baseline (config.replicate); the "
                             "baseline of a seed is then the mean of its runs (repeatable)")
    parser.add_argument("--cache", default="", help="JSON file of graded checkpoints, read and extended")
    parser.add_argument("--out", default="", help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    if args.samples < 2:
        parser.error("--samples must be >= 2 (the sampling SD needs two samples a prompt)")
    try:
        steps = [int(s) for s in args.steps.split(",") if s.strip()] or [None]
    except ValueError:
        parser.error(f"--steps must be comma-separated integers, got {args.steps!r}")
    base = baseline().name
    cache = load_cache(args.cache)
    per_run: dict[str, dict[int, dict[int, dict]]] = {}
    for strategy, seed, workdir in runs_with_checkpoints(args.root, args.strategies, args.seeds):
        per_run.setdefault(strategy, {})[seed] = graded_steps(workdir, steps, args.samples, cache, args.cache)
    replicates: dict[int, list[dict]] = {}
    for root in args.baseline_replicates:
        for _, seed, workdir in runs_with_checkpoints(root, "", args.seeds):
            replicates.setdefault(seed, []).append(graded_steps(workdir, steps, args.samples, cache, args.cache))
    for seed, others in replicates.items():
        own = per_run.get(base, {}).get(seed, {})
        for step in list(own):
            runs = [own[step]] + [other[step] for other in others if step in other]
            if len(runs) > 1:
                own[step] = averaged(runs)
    emit_paired(parser, args, per_run, base, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
