"""The claim a user pays for, paired per seed against the baseline (ds_fixed), with 95% intervals.

For each strategy and each seed it shares with the baseline (same seed, same warm start):
  - the final held-out accuracy minus the baseline's;
  - the accuracy difference at equal responses and at equal training time (wall and, where the runs
    logged it, CPU): both runs' curves read at the smaller of their two totals, linear between
    evaluations, so neither side is extrapolated;
  - the responses and the time to reach the baseline's final accuracy on that seed (the first
    crossing, linear between evaluations; the baseline reaches it by definition) and their ratio
    baseline / strategy, with how many seeds reach it;
  - the share of the baseline's gain per step: (final - start) / (baseline final - start); both runs
    train the same number of steps from the same start, so this is learning per step.
Means over seeds come with a Student-t 95% interval of the mean of the paired differences; ratios
with the geometric mean and its interval. The baseline may be several replicate runs of each seed
(`config.replicate`, named "A+B"): its curve is then their mean (accuracy and budgets averaged at each
evaluation), which halves the baseline's share of the training noise with two replicates. Wall-clock
excludes compilation (reported apart by the runs); CPU seconds (the process's, all threads) include it,
since JAX reports compile time only as wall time.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from greso_jax.run.run_stats import accuracy_on_curves, run_curves, spent_at_evaluations

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30; beyond, the normal's 1.96 is within 2%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
BUDGETS = (("responses", "responses"), ("wall", "step_s"), ("cpu", "cpu_s"))  # (name, run_curves key)


def print_and_save(text: str, path: str = "") -> None:
    """Prints a report's tables and, given a path (a script's --out), writes them there too."""
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


def t_quantile_975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_interval(values: Sequence[float]) -> dict:
    """Mean of the finite `values`, its 95% t interval (NaN bounds with fewer than two) and n."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    if x.size == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    mean = float(x.mean())
    if x.size < 2:
        return {"mean": mean, "low": float("nan"), "high": float("nan"), "n": 1}
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": int(x.size)}


def ratio_interval(ratios: Sequence[float]) -> dict:
    """Geometric mean of positive `ratios` with the 95% t interval of their mean log."""
    logs = mean_interval([math.log(r) for r in ratios if r is not None and math.isfinite(r) and r > 0])
    return {k: (math.exp(v) if k != "n" and math.isfinite(v) else v) for k, v in logs.items()}


def cost_to_reach(curves: dict, key: str, target: float) -> float | None:
    """The `key` budget at which the accuracy curve first reaches `target`, linear between the evaluation
    below it and the first one at or above it; None if it never does."""
    spent, accuracy = spent_at_evaluations(curves, key), curves["eval_accuracy"]
    for i, a in enumerate(accuracy):
        if a >= target:
            if i == 0 or accuracy[i - 1] >= a:
                return float(spent[i])
            share = (target - accuracy[i - 1]) / (a - accuracy[i - 1])
            return float(spent[i - 1] + share * (spent[i] - spent[i - 1]))
    return None


def _has(curves: dict, key: str) -> bool:
    return curves[key][-1] > 0


_RUN_SHAPE = ("steps", "eval_steps")  # what replicates of one config share: run_curves' step axes


def mean_curves(replicates: Sequence[dict]) -> dict:
    """run_curves of [R] replicate runs (one config and seed: the same steps and evaluations) -> one
    run_curves whose every curve (budgets and accuracies, [steps] / [E]) is the replicates' mean."""
    first = replicates[0]
    for other in replicates[1:]:
        if any(other[key] != first[key] for key in _RUN_SHAPE):
            raise ValueError("mean_curves: the replicates log different steps or evaluations "
                             f"({first['eval_steps'][-1:]} against {other['eval_steps'][-1:]} last evaluated)")
    return {key: (list(value) if key in _RUN_SHAPE else
                  float(np.mean([c[key] for c in replicates])) if np.isscalar(value) else
                  [float(x) for x in np.mean([c[key] for c in replicates], axis=0)])
            for key, value in first.items()}


def paired_seed(records: Sequence[dict], *baseline_runs: Sequence[dict]) -> dict:
    """One seed's paired numbers of a strategy's run against the baseline's run of that seed, or against the
    mean curve of its [R] replicate runs when several are given."""
    mine, base = run_curves(records), mean_curves([run_curves(r) for r in baseline_runs])
    out = {"final_diff": mine["eval_accuracy"][-1] - base["eval_accuracy"][-1]}
    start = base["eval_accuracy"][0]
    base_gain = base["eval_accuracy"][-1] - start
    out["gain_share"] = (mine["eval_accuracy"][-1] - start) / base_gain if base_gain > 0 else float("nan")
    target = base["eval_accuracy"][-1]
    for name, key in BUDGETS:
        if not (_has(mine, key) and _has(base, key)):
            out[f"equal_{name}_diff"] = out[f"reach_{name}_ratio"] = float("nan")
            out[f"reach_{name}"] = None
            continue
        budget = min(mine[key][-1], base[key][-1])
        out[f"equal_{name}_diff"] = accuracy_on_curves(mine, budget, key) - accuracy_on_curves(base, budget, key)
        reached, base_reached = cost_to_reach(mine, key, target), cost_to_reach(base, key, target)
        out[f"reach_{name}"] = reached
        out[f"reach_{name}_ratio"] = (base_reached / reached if reached and base_reached else float("nan"))
    return out


def baseline_names(baseline: str) -> list[str]:
    """"A" -> [A]; "A+B" (replicates of one baseline, averaged) -> [A, B]."""
    return [name for name in baseline.split("+") if name]


def claims(runs: dict[str, dict[int, list[dict]]], baseline: str) -> dict:
    """Per strategy: `per_seed` paired numbers and their summaries over the seeds shared with `baseline`
    ("A+B": the mean of replicate runs A and B, over the seeds every one of them has)."""
    names = baseline_names(baseline)
    missing = [name for name in names if name not in runs]
    if missing:
        raise ValueError(f"claims: no runs named {', '.join(missing)} for the baseline {baseline!r}")
    base_seeds = set.intersection(*(set(runs[name]) for name in names))
    out = {}
    for name, seeds in runs.items():
        if name in names:
            continue
        shared = sorted(s for s in seeds if s in base_seeds)
        per_seed = {s: paired_seed(seeds[s], *(runs[b][s] for b in names)) for s in shared}
        rows = list(per_seed.values())
        summary = {key: mean_interval([r[key] for r in rows])
                   for key in ("final_diff", "gain_share", *(f"equal_{n}_diff" for n, _ in BUDGETS))}
        for n, _ in BUDGETS:
            summary[f"reach_{n}_ratio"] = ratio_interval([r[f"reach_{n}_ratio"] for r in rows])
            summary[f"reached_{n}"] = f"{sum(r[f'reach_{n}'] is not None for r in rows)}/{len(rows)}"
        out[name] = {"seeds": shared, "per_seed": {str(s): r for s, r in per_seed.items()}, **summary}
    return out


def _interval_cell(v: dict, digits: int = 3, sign: bool = True) -> str:
    if not math.isfinite(v["mean"]):
        return "—"
    fmt = f"{{:{'+' if sign else ''}.{digits}f}}"
    if not math.isfinite(v["low"]):
        return fmt.format(v["mean"]) + " (n=1)"
    return f"{fmt.format(v['mean'])} [{fmt.format(v['low'])}, {fmt.format(v['high'])}]"


def _ratio_cell(v: dict) -> str:
    if v["n"] == 0:
        return "—"
    if v["n"] == 1:
        return f"{v['mean']:.2f}x (n=1)"
    return f"{v['mean']:.2f}x [{v['low']:.2f}, {v['high']:.2f}]"


def claims_table(result: dict, baseline: str) -> str:
    """The markdown claim table: one row per strategy, paired differences with [95% CI]."""
    names = baseline_names(baseline)
    against = names[0] if len(names) == 1 else f"the mean of {len(names)} replicates ({', '.join(names)})"
    lines = [f"**The claim, paired per seed against {against}** (mean over seeds [95% t interval]; accuracy "
             "differences are the strategy's minus the baseline's; equal budget = both curves at the smaller "
             "of the two runs' totals; reach = the responses / time to the baseline's final accuracy on the "
             "seed, as baseline / strategy, geometric mean over the seeds that reach it; wall-clock excludes "
             "compilation, CPU seconds include it)", "",
             "| strategy | seeds | final accuracy Δ | Δ at equal wall-clock | Δ at equal CPU s | Δ at equal responses | "
             "wall-clock to reach (seeds) | CPU s to reach | responses to reach | share of the baseline's gain per step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in result.items():
        lines.append(
            f"| {name} | {len(row['seeds'])} | {_interval_cell(row['final_diff'])} | "
            f"{_interval_cell(row['equal_wall_diff'])} | {_interval_cell(row['equal_cpu_diff'])} | "
            f"{_interval_cell(row['equal_responses_diff'])} | "
            f"{_ratio_cell(row['reach_wall_ratio'])} ({row['reached_wall']}) | "
            f"{_ratio_cell(row['reach_cpu_ratio'])} ({row['reached_cpu']}) | "
            f"{_ratio_cell(row['reach_responses_ratio'])} ({row['reached_responses']}) | "
            f"{_interval_cell(row['gain_share'], 2, sign=False)} |")
    return "\n".join(lines)
