"""Why a selector learns less per step than ds_fixed: the per-step gap beside each candidate cause, paired by seed.

  python experiments/bench/per_step_diagnosis.py --root runs/h5 [--root pool9k=runs/pool9k] \
      --strategies greso,posterior,mopps,greso_patient --seeds 0,1,2 [--ablation greso_patient:greso] [--out FILE]

Runs are ROOT/VARIANT/seedS as compare_strategies.py writes them, with logging.group_trace on. A root
given as LABEL=PATH names its runs VARIANT@LABEL, paired with ds_fixed@LABEL (e.g. a bigger pool).
Per run, against ds_fixed on the same seed and root:
  - gap: the mean over evaluation steps of the held-out accuracy difference (learning per step; both
    runs evaluate at the same steps), and the final difference;
  - coverage: distinct prompts trained on (groups with mixed rewards, the ones a filtering strategy
    trains on) over the run, as a share of ds_fixed's; concentration: mixed groups per such prompt;
  - batch fill: the groups a step trains on (selection/batch_groups, mean over steps) as a share of
    ds_fixed's: with passes a step ends at selection.max_passes, and a skipper's smaller passes can
    meet that cap with fewer usable groups;
  - spacing: the median number of steps between two mixed groups of one prompt (how soon a prompt is
    trained on again; a skipper whose kept set is small re-reads the pool and re-rolls the same prompts);
  - signal: the mean p(1-p) of the mixed groups (p: the group's success fraction; GRPO's per-group
    signal is largest at p = 0.5);
  - frontier: the share of the audited easy skips whose group was informative (the skip audit): how
    often a prompt skipped as mastered was still at the frontier (skip counts themselves are not
    comparable: a selector passing over a small pool several times in a step counts a prompt's skip
    at each pass);
  - entropy: the mean actor/entropy; re-rolls: the share of groups repeated within their step.
An --ablation A:B gives the paired effect of one change on the gap: gap(A) - gap(B) per seed.
--split_at S1,S2,... adds the run cut into stretches of steps (0, S1], (S1, S2], ..., (Sk, end]: per stretch
the gap, ds_fixed's responses over the run's, and the frontier, to show whether a gap grows as the
selector's histories lengthen. Means carry a Student-t 95% interval over seeds.
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import sys
from typing import Sequence

import numpy as np

from experiments.bench.claim_report import mean_interval, print_and_save
from greso_jax.run.records import read_group_trace, read_lines
from greso_jax.run.run_stats import run_curves, step_mean, step_total
from greso_jax.selection import baseline

BASELINE = baseline().name
CANDIDATES = ("coverage", "batch_fill", "concentration", "spacing", "signal", "frontier_informative_share",
              "entropy", "reroll_share")
RELATIVE = {"coverage": "mixed_prompts", "batch_fill": "batch_groups"}  # candidate -> measure, over ds_fixed's
BASELINE_COLUMNS = ("spacing", "signal", "entropy")  # candidates whose ds_fixed value the table shows beside


def group_statistics(trace: Sequence[dict]) -> dict:
    """From a group trace (in step order): distinct prompts with a mixed group, mixed groups per such prompt,
    the median steps between two mixed groups of one prompt, mean p(1-p)."""
    last_mixed_step: dict[int, int] = {}  # prompt -> the step of its latest mixed group
    spacings: list[int] = []
    mixed, signal = 0, 0.0
    for row in trace:
        correct = np.asarray(row["num_correct"], np.float64)
        samples = np.asarray(row["num_samples"], np.float64)
        is_mixed = (correct > 0) & (correct < samples)
        p = correct[is_mixed] / samples[is_mixed]
        mixed += int(is_mixed.sum())
        signal += float((p * (1 - p)).sum())
        for prompt in np.asarray(row["prompt_ids"])[is_mixed].tolist():
            if prompt in last_mixed_step:
                spacings.append(row["step"] - last_mixed_step[prompt])
            last_mixed_step[prompt] = row["step"]
    return {"mixed_prompts": len(last_mixed_step), "concentration": mixed / len(last_mixed_step) if last_mixed_step
            else float("nan"), "spacing": float(np.median(spacings)) if spacings else float("nan"),
            "signal": signal / mixed if mixed else float("nan")}


def run_diagnosis(records: Sequence[dict], trace: Sequence[dict]) -> dict:
    """One run's candidate measures (coverage in absolute prompts; made relative by `paired`)."""
    groups = group_statistics(trace)
    kept = step_total(records, "selection/kept")
    return {"mixed_prompts": groups["mixed_prompts"], "batch_groups": step_mean(records, "selection/batch_groups"),
            "concentration": groups["concentration"], "spacing": groups["spacing"],
            "signal": groups["signal"], "frontier_informative_share": frontier_share(records), "entropy": step_mean(records, "actor/entropy"),
            "reroll_share": step_total(records, "selection/repeated_groups") / kept if kept else float("nan")}


def accuracy_differences(mine: dict, base: dict) -> list[tuple[int, float]]:
    """(step, accuracy - ds_fixed's accuracy) at every evaluation step after 0 that both runs evaluated, from
    the two runs' `run_curves`."""
    at_base = dict(zip(base["eval_steps"], base["eval_accuracy"]))
    return [(s, a - at_base[s]) for s, a in zip(mine["eval_steps"], mine["eval_accuracy"]) if s in at_base and s > 0]


def stretch(records, first: int, last: float) -> list[dict]:
    """The training-step records of steps first < step <= last."""
    return [r for r in records if first < r.get("step", 0) <= last]


def responses_in(curves: dict, first: int, last: float) -> float:
    """Responses rolled out in steps first < step <= last, from a run's `run_curves` (cumulative per step)."""
    def upto(step):
        return curves["responses"][bisect.bisect_right(curves["steps"], step) - 1]
    return upto(last) - upto(first)


def frontier_share(records) -> float:
    """The share of the audited easy skips whose group was informative (NaN: none audited)."""
    audited = step_total(records, "audit/easy_skips")
    return 1.0 - step_total(records, "audit/easy_zero_variance") / audited if audited else float("nan")


def stretches(records, mine: dict, base: dict, differences, split_at: Sequence[int]) -> list[dict]:
    """Per stretch (0, S1], (S1, S2], ..., (Sk, end]: the gap, ds_fixed's responses over the run's, the frontier.
    `mine` / `base`: the two runs' `run_curves`; `differences`: their `accuracy_differences`."""
    bounds = [0, *split_at, math.inf]
    out = []
    for first, last in zip(bounds, bounds[1:]):
        inside = [d for s, d in differences if first < s <= last]
        responses = responses_in(mine, first, last)
        out.append({"gap": float(np.mean(inside)) if inside else float("nan"),
                    "responses_ratio": responses_in(base, first, last) / responses if responses else float("nan"),
                    "frontier_informative_share": frontier_share(stretch(records, first, last))})
    return out


def paired(records, trace, base_records, base_trace, split_at: Sequence[int] = ()) -> dict:
    """A run's gap and candidates beside ds_fixed's run on the same seed."""
    mine, base = run_curves(records), run_curves(base_records)
    differences = accuracy_differences(mine, base)
    out = {"gap": float(np.mean([d for _, d in differences])) if differences else float("nan"),
           "final_diff": differences[-1][1] if differences else float("nan")}
    if split_at:
        out["stretches"] = stretches(records, mine, base, differences, split_at)
    d, b = run_diagnosis(records, trace), run_diagnosis(base_records, base_trace)
    for key, measure in RELATIVE.items():
        out[key] = d[measure] / b[measure] if b[measure] else float("nan")
    for key in (k for k in CANDIDATES if k not in RELATIVE):
        out[key] = d[key]
        out[f"{key}_baseline"] = b[key]
    return out


def load(workdir: str) -> tuple[list[dict], list[dict]]:
    return read_lines(os.path.join(workdir, "metrics.jsonl")), read_group_trace(workdir)


def diagnose(roots: dict[str, str], strategies: Sequence[str], seeds: Sequence[int], log=print,
             split_at: Sequence[int] = ()) -> dict:
    """{name: {seed: paired numbers}} for every strategy x root whose runs and baseline run exist."""
    out: dict[str, dict[int, dict]] = {}
    for label, root in roots.items():
        for strategy in strategies:
            name = f"{strategy}@{label}" if label else strategy
            for seed in seeds:
                mine = os.path.join(root, strategy, f"seed{seed}")
                base = os.path.join(root, BASELINE, f"seed{seed}")
                if not all(os.path.exists(os.path.join(d, "summary.json")) for d in (mine, base)):
                    log(f"{name} seed {seed}: run or its {BASELINE} run not finished, left out")
                    continue
                out.setdefault(name, {})[seed] = paired(*load(mine), *load(base), split_at=split_at)
    return out


def _cell(interval: dict, digits: int = 3) -> str:
    if not math.isfinite(interval["mean"]):
        return "—"
    if interval["n"] < 2:
        return f"{interval['mean']:.{digits}f} (n=1)"
    return f"{interval['mean']:.{digits}f} [{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def tables(result: dict, ablations: Sequence[tuple[str, str]], split_at: Sequence[int] = ()) -> str:
    keys = ("gap", "final_diff", *CANDIDATES)
    lines = [f"**Per-step gap and candidate causes against {BASELINE}** (mean over seeds [95% t interval]; gap: "
             "mean accuracy difference over the evaluation steps; coverage: distinct prompts trained, share of "
             f"{BASELINE}'s; the {BASELINE} column pairs give its own value)", "",
             "| strategy | seeds | " + " | ".join(keys) + "".join(f" | {BASELINE} {k}" for k in BASELINE_COLUMNS) + " |",
             "|---|---|" + "---|" * (len(keys) + len(BASELINE_COLUMNS))]
    for name, seeds in result.items():
        rows = list(seeds.values())
        cells = [_cell(mean_interval([r[k] for r in rows])) for k in keys]
        base = [_cell(mean_interval([r[f"{k}_baseline"] for r in rows])) for k in BASELINE_COLUMNS]
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(cells + base) + " |")
    if ablations:
        lines += ["", "**Ablations: paired effect on the gap** (gap(A) − gap(B) per seed, [95% t interval])", "",
                  "| A | B | seeds | effect on gap | effect on final accuracy |", "|---|---|---|---|---|"]
        for a, b in ablations:
            shared = sorted(set(result.get(a, {})) & set(result.get(b, {})))
            gap = mean_interval([result[a][s]["gap"] - result[b][s]["gap"] for s in shared])
            final = mean_interval([result[a][s]["final_diff"] - result[b][s]["final_diff"] for s in shared])
            lines.append(f"| {a} | {b} | {len(shared)} | {_cell(gap)} | {_cell(final)} |")
    if split_at:
        lines += ["", f"**By stretch of the run** (gap; {BASELINE}'s responses over the strategy's; the share of its "
                  "audited easy skips that were informative)", "",
                  "| strategy | steps | seeds | gap | responses: fewer by | frontier |", "|---|---|---|---|---|---|"]
        for name, seeds in result.items():
            for i, (first, last) in enumerate(zip([0, *split_at], [*split_at, "end"])):
                label = f"{first + 1}-{last}"
                rows = [r["stretches"][i] for r in seeds.values()]
                cells = [_cell(mean_interval([r[k] for r in rows]), digits) for k, digits in
                         (("gap", 3), ("responses_ratio", 2), ("frontier_informative_share", 3))]
                lines.append(f"| {name} | {label} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _roots(values: Sequence[str]) -> dict[str, str]:
    roots = {}
    for value in values:
        label, _, path = value.rpartition("=")
        roots[label] = path
    return roots


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", action="append", required=True, help="ROOT or LABEL=ROOT (repeatable)")
    parser.add_argument("--strategies", default="greso,posterior,mopps")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--ablation", action="append", default=[], help="A:B, the paired effect of A over B")
    parser.add_argument("--split_at", default="", help="S1,S2,...: also the gap per stretch of steps")
    parser.add_argument("--out", default="", help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    split_at = [int(s) for s in args.split_at.split(",") if s.strip()]
    if split_at != sorted(set(split_at)) or any(s <= 0 for s in split_at):
        parser.error(f"--split_at: expected increasing positive steps, got {args.split_at!r}")
    ablations = [tuple(a.split(":", 1)) for a in args.ablation]
    if any(len(a) != 2 for a in ablations):
        parser.error("--ablation takes A:B")
    result = diagnose(_roots(args.root), args.strategies.split(","), [int(s) for s in args.seeds.split(",")],
                      split_at=split_at)
    print_and_save(tables(result, ablations, split_at), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
