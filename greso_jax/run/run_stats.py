"""Reading a finished run's metrics.jsonl records: cumulative curves, whole-run statistics, the cost to reach a
target accuracy and the accuracy reached within a budget (the strategy comparison's numbers)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def number(record: dict, key: str) -> float | None:
    """record[key] as a float when it is a finite number, else None."""
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def run_curves(records: Sequence[dict]) -> dict[str, list[float]]:
    """Per-step cumulative curves of one run (index 0 = before training), and its evaluations."""
    steps = sorted((r for r in records if r.get("step", 0) > 0), key=lambda r: r["step"])
    cumulative = {"responses": [0.0], "tokens": [0.0], "rollout_s": [0.0], "update_s": [0.0], "step_s": [0.0],
                  "audit_responses": [0.0], "audit_s": [0.0]}
    cumulative.update(compile_s=[0.0], cpu_s=[0.0], cpu_rollout_s=[0.0])
    # CPU seconds of the training process (all threads, compilation included): on a shared machine
    # other jobs stretch wall time but not the work done. Runs before cpu/* existed give zeros.
    keys = {"rollout_s": ("time/rollout",), "update_s": ("time/update",), "step_s": ("time/step",),
            "cpu_s": ("cpu/step",), "cpu_rollout_s": ("cpu/rollout",),
            "audit_responses": ("audit/responses",), "audit_s": ("time/audit",),
            "compile_s": ("time/rollout_compile", "time/reward_compile", "time/update_compile")}
    # Times exclude compilation (a fixed cost per program shape, reported apart as compile_s).
    compile_part = {"rollout_s": ("time/rollout_compile",), "update_s": ("time/update_compile",),
                    "step_s": keys["compile_s"]}
    for record in steps:
        cumulative["responses"].append(number(record, "rollout/num_responses") or cumulative["responses"][-1])
        cumulative["tokens"].append(number(record, "rollout/num_tokens") or cumulative["tokens"][-1])
        for name, metric_keys in keys.items():
            spent = sum(number(record, k) or 0.0 for k in metric_keys)
            spent -= sum(number(record, k) or 0.0 for k in compile_part.get(name, ()))
            cumulative[name].append(cumulative[name][-1] + spent)
    evals = [(int(r["step"]), number(r, "eval/accuracy")) for r in records if number(r, "eval/accuracy") is not None]
    eval_time = sum(number(r, "time/eval") or 0.0 for r in records)
    return {**cumulative, "eval_steps": [s for s, _ in evals], "eval_accuracy": [a for _, a in evals],
            "eval_s": eval_time, "steps": [0] + [int(r["step"]) for r in steps]}


def step_total(records, key) -> float:
    """The sum of a metric over a run's training steps (missing: 0)."""
    return float(sum(number(r, key) or 0.0 for r in records if r.get("step", 0) > 0))


def step_mean(records, key) -> float:
    """The mean of a metric over the training steps that logged it (none: NaN)."""
    values = [v for r in records if r.get("step", 0) > 0 and (v := number(r, key)) is not None]
    return float(np.mean(values)) if values else float("nan")


def run_stats(records: Sequence[dict]) -> dict[str, float]:
    """Whole-run numbers of one run."""
    curves = run_curves(records)

    def ratio(a, b):
        return a / b if b else float("nan")

    stats = {
        "accuracy_start": curves["eval_accuracy"][0] if curves["eval_accuracy"] else float("nan"),
        "accuracy_final": curves["eval_accuracy"][-1] if curves["eval_accuracy"] else float("nan"),
        "responses": curves["responses"][-1], "tokens": curves["tokens"][-1],
        "rollout_s": curves["rollout_s"][-1], "update_s": curves["update_s"][-1], "total_s": curves["step_s"][-1],
        "eval_s": curves["eval_s"], "audit_s": curves["audit_s"][-1], "audit_responses": curves["audit_responses"][-1],
        "compile_s": curves["compile_s"][-1],
        "cpu_s": curves["cpu_s"][-1] if any("cpu/step" in r for r in records) else float("nan"),
        "cpu_rollout_s": curves["cpu_rollout_s"][-1] if any("cpu/rollout" in r for r in records) else float("nan"),
        "effective_prompts": step_mean(records, "selection/effective_prompts"),
        "surplus_groups": step_total(records, "selection/surplus_groups"),
        # Runs before these metrics existed give NaN ("—"), not 0.
        "repeated_share": ratio(step_total(records, "selection/repeated_groups"), step_total(records, "selection/kept"))
        if any("selection/repeated_groups" in r for r in records) else float("nan"),
        "batch_prompts": step_mean(records, "selection/batch_prompts"),
        "update_tokens": step_total(records, "actor/update_tokens"),
        "zero_variance_ratio": step_mean(records, "selection/zero_variance_ratio"),
        "consistency_easy": ratio(step_total(records, "zero_variance/repeated_easy"),
                                  step_total(records, "zero_variance/revisited_easy")),
        "consistency_hard": ratio(step_total(records, "zero_variance/repeated_hard"),
                                  step_total(records, "zero_variance/revisited_hard")),
        "skips_easy": step_total(records, "selection/skipped_easy"), "skips_hard": step_total(records, "selection/skipped_hard"),
    }
    first = next((r for r in records if r.get("step") == 0), {})
    stats["warmstart_steps"] = number(first, "warmstart/steps") or float("nan")
    stats["warmstart_accuracy"] = number(first, "warmstart/accuracy") or float("nan")
    stats["rollout_share"] = ratio(stats["rollout_s"], stats["total_s"])
    # Every audited skip counts in the overall precision, also those the strategy made no easy / hard
    # prediction for ("other"; logged since the audit classifies skips by `skip_kinds`).
    kinds = ("easy", "hard", "other")
    zero_variance = {kind: step_total(records, f"audit/{kind}_zero_variance") for kind in kinds}
    for kind in kinds:
        stats[f"audited_{kind}"] = step_total(records, f"audit/{kind}_skips")
        stats[f"skip_precision_{kind}"] = ratio(zero_variance[kind], stats[f"audited_{kind}"])
    stats["skip_precision"] = ratio(sum(zero_variance.values()), sum(stats[f"audited_{kind}"] for kind in kinds))
    return stats


def cost_to_target(records: Sequence[dict], target: float) -> dict[str, float] | None:
    """Responses, tokens and times spent until the first evaluation at or above `target` (None: never)."""
    curves = run_curves(records)
    for step, accuracy in zip(curves["eval_steps"], curves["eval_accuracy"]):
        if accuracy >= target:
            i = curves["steps"].index(step) if step in curves["steps"] else 0
            return {"step": step, "responses": curves["responses"][i], "tokens": curves["tokens"][i],
                    "rollout_s": curves["rollout_s"][i], "update_s": curves["update_s"][i],
                    "total_s": curves["step_s"][i]}
    return None


def spent_at_evaluations(curves: dict, key: str) -> list[float]:
    """The cumulative `key` (a run_curves curve) at each of the run's evaluations, [E]."""
    return [curves[key][curves["steps"].index(step)] for step in curves["eval_steps"]]


def accuracy_on_curves(curves: dict, budget: float, key: str) -> float:
    """Held-out accuracy after `budget` of `key` on a run's curves (run_curves), linear between its
    evaluations; at most its last evaluation's accuracy."""
    spent = spent_at_evaluations(curves, key)
    return float(np.interp(budget, spent, curves["eval_accuracy"])) if spent else float("nan")


def accuracy_within(records: Sequence[dict], budget: float, key: str) -> float:
    """Held-out accuracy of one run at a budget of `key` ("responses" or "step_s": cumulative responses or
    training seconds), linear between its evaluations; at most its last evaluation's accuracy."""
    return accuracy_on_curves(run_curves(records), budget, key)
