"""Δp ablation: one GRESO training run per exploration step Δp, then a comparison table and plot.

  python experiments/ablate_delta_p.py --config experiments/arith_tiny.py:quick \
      --values 0.0025,0.005,0.01,0.02,0.05 --workdir_root runs/ablate [--config.x=y ...]

Each run is `python -m greso_jax.train --config CONFIG --config.selection.greso.delta_p=V
--workdir ROOT/dp_V` (extra --config.* flags are passed to every run), launched one after the
other and sharing one supervised warm start (train.warmstart_cache_dir = ROOT/warmstart); a
finished run (its summary.json exists) is not launched again, an interrupted one resumes from its
checkpoint. `--print_only` prints the commands instead (to launch them on a
cluster); `--collect_only` only reads the finished runs. The results go to ROOT:
ablation.txt (table), ablation.json and accuracy_vs_rollouts.png. `--knob` sweeps another field
the same way, e.g. the posterior selector's main knob, the zero-variance ratio its threshold is
tuned toward: `--knob selection.posterior.target_zero_variance`. The table's first column is then
named after the field, and the two per-step values a strategy logs as selection/p_easy and
selection/p_hard are named after what they are for the knob's strategy (the posterior: its
threshold and its calibration), or left out for a strategy that logs no such pair.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # run as a script from anywhere: greso_jax is the sibling package
    sys.path.insert(0, REPO_ROOT)

from experiments.sweep import (absolute_config, is_finished, run_logged, shared_warmstart,  # noqa: E402
                               train_command)
from greso_jax.run.records import format_table, read_lines  # noqa: E402

TABLE_COLUMNS = ["delta_p", "steps", "accuracy_before", "accuracy_final", "responses_generated",
                 "prompts_skipped", "mean_effective_batch", "p_easy_epoch_1", "p_hard_epoch_1", "final_p_easy",
                 "final_p_hard"]
# What each strategy logs as selection/p_easy and selection/p_hard; the others log no such pair.
LOGGED_PAIR = {"greso": ("p_easy", "p_hard"), "posterior": ("threshold", "calibration")}
_PAIR_COLUMNS = ("p_easy_epoch_1", "p_hard_epoch_1", "final_p_easy", "final_p_hard")


def run_name(value: float) -> str:
    return f"dp_{value:g}"


def parse_values(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--values: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not 0 <= v <= 1 or not math.isfinite(v) for v in values):
        raise ValueError(f"--values: every Δp must be in [0, 1], got {text!r}")
    if len({run_name(v) for v in values}) != len(values):
        raise ValueError(f"--values: repeated value in {text!r}")
    return values


DEFAULT_KNOB = "selection.greso.delta_p"


def launch_command(config: str, value: float, workdir: str, overrides: Sequence[str] = (),
                   knob: str = DEFAULT_KNOB) -> list[str]:
    return train_command(config, workdir, [f"--config.{knob}={value!r}", *overrides])


def run_sweep(config: str, values: Sequence[float], root: str, overrides: Sequence[str] = (), log=print,
              knob: str = DEFAULT_KNOB) -> list[float]:
    """Runs the unfinished runs one after the other (output in ROOT/dp_V/train.log); returns the failed values."""
    workdirs = [os.path.join(root, run_name(v)) for v in values]
    failed = []
    for value, workdir in zip(values, workdirs):
        if is_finished(workdir):
            log(f"{run_name(value)}: finished earlier, not launched again")
            continue
        command = launch_command(config, value, workdir, [*overrides, shared_warmstart(root)], knob)
        if not run_logged(command, workdir, run_name(value), log=log):
            failed.append(value)
    return failed


def _last(records: Sequence[dict], key: str, default=float("nan")):
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return values[-1] if values else default


def effective_batch(record: dict) -> float | None:
    """Groups that carry gradient in a step's batch: the trained groups minus their zero-variance share."""
    groups = record.get("train/groups")
    if not isinstance(groups, (int, float)):
        return None
    zero_std = record.get("actor/frac_zero_std_groups", 0.0)
    return groups * (1.0 - (zero_std if isinstance(zero_std, (int, float)) else 0.0))


def p_entering_epoch_1(records: Sequence[dict]) -> tuple[float, float]:
    """(p_easy, p_hard) as the first step of the stream's epoch 1 begins: the values the last
    epoch-0 step left (GRESO adapts from epoch 1 by default, so these are the initial values);
    NaN when the run never reached epoch 1 or began its training in it."""
    if not any(r.get("data/epoch", 0) >= 1 for r in records):
        return float("nan"), float("nan")
    before = [r for r in records if r.get("step", 0) > 0 and r.get("data/epoch") == 0 and "selection/p_easy" in r]
    if not before:
        return float("nan"), float("nan")
    return before[-1]["selection/p_easy"], before[-1]["selection/p_hard"]


def summarize_run(records: Sequence[dict], delta_p: float) -> dict:
    """One table row from a run's metrics.jsonl records."""
    p_easy_epoch_1, p_hard_epoch_1 = p_entering_epoch_1(records)
    evals = [r["eval/accuracy"] for r in records if isinstance(r.get("eval/accuracy"), (int, float))]
    batches = [b for r in records if r.get("step", 0) > 0 and (b := effective_batch(r)) is not None]
    return {"delta_p": delta_p, "steps": max((r["step"] for r in records), default=0),
            "accuracy_before": evals[0] if evals else float("nan"),
            "accuracy_final": evals[-1] if evals else float("nan"),
            "responses_generated": int(_last(records, "rollout/num_responses", 0)),
            "prompts_skipped": int(_last(records, "selection/skipped_total", 0)),
            "mean_effective_batch": sum(batches) / len(batches) if batches else float("nan"),
            "p_easy_epoch_1": p_easy_epoch_1, "p_hard_epoch_1": p_hard_epoch_1,
            "final_p_easy": _last(records, "selection/p_easy"), "final_p_hard": _last(records, "selection/p_hard")}


def relabel(row: dict, knob: str) -> dict:
    """A table row with its columns named for `knob`: the swept value under the field's name (the
    whole path where the name is another column's), and for a knob of selection.<strategy>.* the
    pair that strategy logs as p_easy / p_hard under its names for it, or no pair if it logs none."""
    if knob == DEFAULT_KNOB:
        return row
    parts = knob.split(".")
    value_name = knob if parts[-1] in TABLE_COLUMNS else parts[-1]
    pair = LOGGED_PAIR.get(parts[1]) if len(parts) == 3 and parts[0] == "selection" else None
    names = {"delta_p": value_name}
    if pair:
        easy, hard = pair
        names.update({"p_easy_epoch_1": f"{easy}_epoch_1", "p_hard_epoch_1": f"{hard}_epoch_1",
                      "final_p_easy": f"final_{easy}", "final_p_hard": f"final_{hard}"})
    return {names.get(k, k): v for k, v in row.items() if pair or k not in _PAIR_COLUMNS}


def collect(root: str, values: Sequence[float], log=print) -> dict[float, list[dict]]:
    """metrics.jsonl records of each finished run, by Δp (unfinished or missing runs are reported and left out)."""
    runs = {}
    for value in values:
        workdir = os.path.join(root, run_name(value))
        path = os.path.join(workdir, "metrics.jsonl")
        if not is_finished(workdir) or not os.path.exists(path):
            log(f"{run_name(value)}: not finished ({workdir}); left out of the table")
            continue
        try:
            runs[value] = read_lines(path)
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{path}: not a metrics.jsonl file: {e}") from None
    return runs


def plot_accuracy_vs_rollouts(runs: dict[float, list[dict]], path: str, knob: str = DEFAULT_KNOB) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = "Δp" if knob == DEFAULT_KNOB else knob.split(".")[-1]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for value, records in sorted(runs.items()):
        points = [(r["rollout/num_responses"], r["eval/accuracy"]) for r in records
                  if isinstance(r.get("eval/accuracy"), (int, float))
                  and isinstance(r.get("rollout/num_responses"), (int, float))]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=f"{label} = {value:g}")
    ax.set_xlabel("cumulative rollouts (responses generated)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("GRESO Δp ablation" if knob == DEFAULT_KNOB else f"{knob} ablation")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(root: str, runs: dict[float, list[dict]], knob: str = DEFAULT_KNOB) -> tuple[str, list[dict]]:
    """Writes ROOT/ablation.txt, ablation.json and accuracy_vs_rollouts.png; returns (table text, rows)."""
    rows = [relabel(summarize_run(records, value), knob) for value, records in sorted(runs.items())]
    display = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]
    table = format_table(display, list(relabel(dict.fromkeys(TABLE_COLUMNS), knob)))
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "ablation.txt"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(root, "ablation.json"), "w") as f:
        json.dump(rows, f, indent=2)
    plot_accuracy_vs_rollouts(runs, os.path.join(root, "accuracy_vs_rollouts.png"), knob)
    return table, rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="experiment file[:variant], as for greso_jax.train")
    parser.add_argument("--values", default="0.0025,0.005,0.01,0.02,0.05", help="comma-separated Δp values")
    parser.add_argument("--workdir_root", required=True, help="one workdir per value goes under it")
    parser.add_argument("--knob", default=DEFAULT_KNOB,
                        help="the config field swept (e.g. selection.posterior.target_zero_variance for the "
                             "posterior selector); the table's first column is named after it")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--print_only", action="store_true", help="print the launch commands and stop")
    mode.add_argument("--collect_only", action="store_true", help="only collect the finished runs")
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if not o.startswith("--config.")]
    if bad:
        parser.error(f"unknown arguments {bad} (only --config.<field>=<value> overrides are passed to the runs)")
    try:
        values = parse_values(args.values)
        config = absolute_config(args.config)
    except ValueError as e:
        parser.error(str(e))
    root = os.path.abspath(args.workdir_root)
    if args.print_only:
        for value in values:
            print(shlex.join(launch_command(config, value, os.path.join(root, run_name(value)),
                                            [*overrides, shared_warmstart(root)], args.knob)))
        return 0
    failed = [] if args.collect_only else run_sweep(config, values, root, overrides, knob=args.knob)
    runs = collect(root, values)
    if not runs:
        print(f"error: no finished runs under {root}", file=sys.stderr)
        return 1
    table, _ = write_report(root, runs, args.knob)
    print(table)
    print(f"wrote {os.path.join(root, 'ablation.txt')}, ablation.json, accuracy_vs_rollouts.png")
    if failed:
        print(f"error: runs failed for Δp = {', '.join(f'{v:g}' for v in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
