"""Is a task in the GRESO paper's regime? Reads finished runs of the strategies that need no history
(vanilla GRPO and the baseline, ds_fixed) and checks the criteria a headline task is chosen by
(issue 37), before any selector runs on it:

- rollout is most of the baseline's step (>= 70%: the paper's 2.4x rollout -> 2.0x total implies ~86%);
- most groups have zero reward variance late in the run (60-85% of rolled-out groups over its second half);
- a zero-variance prompt is zero-variance again at its next rollout (consistency >= 0.85);
- an epoch spans >= 20 of the baseline's steps and the run >= 10 epochs, so a selector has history;
- the baseline's held-out accuracy still rises over the run's last quarter.

Beside them, what caps the rollout share on the machine the runs ran on: a response's rollout
time and a trained row's update time (outside compilation), their ratio, and the zero-variance
share at which Dynamic Sampling's rollout would reach 70% of its step at that ratio (it rolls out
1 / (1 - zero-variance share) responses per trained row).

  python experiments/bench/regime_check.py --run vanilla=ROOT/vanilla/seed0 --run ds_fixed=ROOT/ds_fixed/seed0

Each --run is LABEL=WORKDIR; the last one labelled ds_fixed (else the last one) is the baseline.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from absl import app, flags

from greso_jax.run.records import read_lines, record_path
from greso_jax.run.run_stats import number, run_stats, step_total

_RUNS = flags.DEFINE_multi_string("run", [], "LABEL=WORKDIR of a finished run (its metrics.jsonl)")
_LATE = flags.DEFINE_float("late", 0.5, "the share of the run, from its end, whose zero-variance rate counts")

ROLLOUT_SHARE, ZERO_VARIANCE, CONSISTENCY, EPOCH_STEPS, EPOCHS = 0.70, (0.60, 0.85), 0.85, 20, 10


def read_records(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if record_path(path) is None:
        raise app.UsageError(f"--run: no metrics.jsonl in {workdir}")
    return read_lines(path)


def regime_numbers(records: list[dict], late: float, group_size: int) -> dict[str, float]:
    """The regime's criteria measured on one run."""
    stats = run_stats(records)
    steps = [r for r in records if r.get("step", 0) > 0]
    last = max(r["step"] for r in steps)
    late_rates = [v for r in steps if r["step"] > (1 - late) * last
                  and (v := number(r, "selection/zero_variance_ratio")) is not None]
    epochs = [number(r, "data/epoch") or 0.0 for r in steps]
    evals = [(r["step"], number(r, "eval/accuracy")) for r in records if number(r, "eval/accuracy") is not None]
    quarter = [a for s, a in evals if s >= 0.75 * last]
    revisits = [number(r, k) or 0.0 for r in steps for k in ("zero_variance/revisited_easy", "zero_variance/revisited_hard")]
    repeats = [number(r, k) or 0.0 for r in steps for k in ("zero_variance/repeated_easy", "zero_variance/repeated_hard")]
    return {
        "rollout_share": stats["rollout_share"],
        "zero_variance_late": float(np.mean(late_rates)) if late_rates else float("nan"),
        "consistency_easy": stats["consistency_easy"], "consistency_hard": stats["consistency_hard"],
        "consistency": sum(repeats) / sum(revisits) if sum(revisits) else float("nan"),
        "epochs": max(epochs) + 1 if epochs else float("nan"),
        "steps_per_epoch": last / (max(epochs) + 1) if epochs else float("nan"),
        "accuracy_start": stats["accuracy_start"], "accuracy_final": stats["accuracy_final"],
        "accuracy_last_quarter_gain": quarter[-1] - quarter[0] if len(quarter) > 1 else float("nan"),
        "responses": stats["responses"], "total_s": stats["total_s"],
        **cost_ratio(records, stats, group_size),
    }


def cost_ratio(records: list[dict], stats: dict, group_size: int) -> dict[str, float]:
    """µs of rollout per response and of update per trained row, and the zero-variance share at
    which a Dynamic Sampling step (1 / (1 - share) responses per trained row) is 70% rollout."""
    rows = step_total(records, "train/groups") * group_size
    per_response = stats["rollout_s"] / stats["responses"] * 1e6 if stats["responses"] else float("nan")
    per_row = stats["update_s"] / rows * 1e6 if rows else float("nan")
    ratio = per_row / per_response
    responses_per_row = ROLLOUT_SHARE / (1 - ROLLOUT_SHARE) * ratio
    return {"rollout_us_per_response": per_response, "update_us_per_row": per_row, "update_over_rollout": ratio,
            "zero_variance_for_70pct": 1 - 1 / responses_per_row if responses_per_row > 1 else 0.0}


def verdicts(n: dict[str, float]) -> dict[str, bool]:
    """Each criterion of the baseline's run: met or not."""
    low, high = ZERO_VARIANCE
    return {"rollout >= 70% of the step": n["rollout_share"] >= ROLLOUT_SHARE,
            "zero-variance 60-85% late": low <= n["zero_variance_late"] <= high,
            "consistency >= 0.85": n["consistency"] >= CONSISTENCY,
            "an epoch >= 20 steps": n["steps_per_epoch"] >= EPOCH_STEPS,
            ">= 10 epochs": n["epochs"] >= EPOCHS,
            "accuracy rising in the last quarter": n["accuracy_last_quarter_gain"] > 0}


def main(argv):
    del argv
    if not _RUNS.value:
        raise app.UsageError("--run LABEL=WORKDIR: at least one finished run")
    runs = {}
    for spec in _RUNS.value:
        label, sep, workdir = spec.partition("=")
        if not sep or not label or not workdir:
            raise app.UsageError(f"--run: expected LABEL=WORKDIR, got {spec!r}")
        with open(os.path.join(workdir, "config.json")) as f:
            group_size = json.load(f)["rl"]["group_size"]
        runs[label] = regime_numbers(read_records(workdir), _LATE.value, group_size)
    keys = list(next(iter(runs.values())))
    print("| run | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for label, n in runs.items():
        print(f"| {label} | " + " | ".join(f"{n[k]:,.0f}" if abs(n[k]) >= 1000 else f"{n[k]:.3g}" for k in keys) + " |")
    base = "ds_fixed" if "ds_fixed" in runs else list(runs)[-1]
    print(f"\nThe regime's criteria on {base}:")
    met = verdicts(runs[base])
    for criterion, ok in met.items():
        print(f"- {criterion}: {'met' if ok else 'NOT met'}")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(app.run(main))
