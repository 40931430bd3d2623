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
tuned toward: `--knob selection.posterior.target_zero_variance`. The table's first column is named
after the field; the knobs the field's strategy declares (logged as selection/<strategy>/<knob>:
GRESO's p_easy / p_hard, the posterior's threshold / calibration) get a column as epoch 1 begins
and one at the end. The default knob and values are the ablation GRESO declares (Δp).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Sequence

from experiments.sweep import absolute_config, is_finished, run_logged, shared_warmstart, train_command
from greso_jax.run.records import format_table, read_lines
from greso_jax.selection import STRATEGIES

RUN_COLUMNS = ["steps", "accuracy_before", "accuracy_final", "responses_generated", "prompts_skipped",
               "mean_effective_batch"]
# The first strategy declaring an ablation (GRESO's Δp), its field and values.
_ABLATED = next(name for name, cls in STRATEGIES.items() if cls.ablation is not None)
DEFAULT_KNOB = f"selection.{_ABLATED}.{STRATEGIES.get(_ABLATED).ablation.field}"
DEFAULT_VALUES = ",".join(f"{v:g}" for v in STRATEGIES.get(_ABLATED).ablation.values)


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


def knob_metrics(knob: str) -> dict[str, str]:
    """{knob: metric name} of the knobs the strategy of a swept selection.<strategy>.<field> declares ({} for
    another field)."""
    parts = knob.split(".")
    if len(parts) != 3 or parts[0] != "selection" or parts[1] not in STRATEGIES:
        return {}
    return {name: f"selection/{parts[1]}/{name}" for name in STRATEGIES.get(parts[1]).knobs}


def table_columns(knob: str = DEFAULT_KNOB) -> list[str]:
    """The table's columns for `knob`: the swept value under the field's name (the whole path where the
    name is another column's), the run's numbers, each knob as epoch 1 begins and at the end."""
    field = knob.split(".")[-1]
    knobs = list(knob_metrics(knob))
    return [knob if field in RUN_COLUMNS else field, *RUN_COLUMNS, *(f"{k}_epoch_1" for k in knobs),
            *(f"final_{k}" for k in knobs)]


def knobs_entering_epoch_1(records: Sequence[dict], metrics: dict[str, str]) -> dict[str, float]:
    """{knob: value} as the first step of the stream's epoch 1 begins: the values the last epoch-0 step
    left (GRESO adapts from epoch 1 by default, so these are the initial values); NaN when the run
    never reached epoch 1 or began its training in it."""
    before = [r for r in records if r.get("step", 0) > 0 and r.get("data/epoch") == 0
              and all(key in r for key in metrics.values())]
    if not any(r.get("data/epoch", 0) >= 1 for r in records) or not before:
        return {name: float("nan") for name in metrics}
    return {name: before[-1][key] for name, key in metrics.items()}


def summarize_run(records: Sequence[dict], value: float, knob: str = DEFAULT_KNOB) -> dict:
    """One table row (`table_columns(knob)`) from a run's metrics.jsonl records."""
    metrics = knob_metrics(knob)
    at_epoch_1 = knobs_entering_epoch_1(records, metrics)
    evals = [r["eval/accuracy"] for r in records if isinstance(r.get("eval/accuracy"), (int, float))]
    batches = [b for r in records if r.get("step", 0) > 0 and (b := effective_batch(r)) is not None]
    numbers = [value, max((r["step"] for r in records), default=0), evals[0] if evals else float("nan"),
               evals[-1] if evals else float("nan"), int(_last(records, "rollout/num_responses", 0)),
               int(_last(records, "selection/skipped_total", 0)),
               sum(batches) / len(batches) if batches else float("nan"),
               *at_epoch_1.values(), *(_last(records, key) for key in metrics.values())]
    return dict(zip(table_columns(knob), numbers))


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
    ax.set_title(f"{knob} ablation")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(root: str, runs: dict[float, list[dict]], knob: str = DEFAULT_KNOB) -> tuple[str, list[dict]]:
    """Writes ROOT/ablation.txt, ablation.json and accuracy_vs_rollouts.png; returns (table text, rows)."""
    rows = [summarize_run(records, value, knob) for value, records in sorted(runs.items())]
    display = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()} for row in rows]
    table = format_table(display, table_columns(knob))
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
    parser.add_argument("--values", default=DEFAULT_VALUES, help="comma-separated Δp values")
    parser.add_argument("--workdir_root", required=True, help="one workdir per value goes under it")
    parser.add_argument("--knob", default=DEFAULT_KNOB,
                        help="the config field swept (default: the declared ablation; any selection.<strategy>.<field> "
                             "or other field); the table's first column is named after it")
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
