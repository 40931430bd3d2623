"""Replays a training run's group trace through the strategies' predictions (greso_jax/selection/replay.py):
per predictor, AUC, the informative share kept at each keep share, the Brier score; per run, where its
informative groups came from; and the calibration of the chance predictors.

Record a run whose every pulled prompt is rolled out (the comparison baseline, or vanilla), so each
prompt's outcomes are seen at every visit and no predictor's own skips bias the record:

    python experiments/bench/compare_strategies.py --strategies ds_fixed --seeds 0,1,2 --root ROOT \\
        --config.logging.group_trace=True
    python experiments/bench/predictor_replay.py ROOT/ds_fixed/seed0 ROOT/ds_fixed/seed1 ... \\
        [--with posterior:decay=0.3 --with posterior:fit_prior=False]

The predictors are every registered training strategy (and named variant) that predicts, with its
defaults, plus each `--with STRATEGY:FIELD=VALUE[,FIELD=VALUE...]` (a variant of its settings);
`--predictors` picks some of them by name.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os

import ml_collections
import numpy as np

from greso_jax.run.build import prompt_levels, train_rows_from_config
from greso_jax.run.records import read_group_trace
from greso_jax.selection import STRATEGIES, Variant
from greso_jax.selection.replay import (KEEP_SHARES, by_previous_outcome, calibration, default_predictors, pooled,
                                        replay, summarize)


def load_run(workdir: str) -> tuple[list[dict], np.ndarray, int]:
    """(trace lines, level per prompt id int64 [num_prompts], group size) of a run folder."""
    trace = read_group_trace(workdir)
    with open(os.path.join(workdir, "config.json")) as f:
        config = ml_collections.ConfigDict(json.load(f))
    return trace, prompt_levels(train_rows_from_config(config)), int(config.rl.group_size)


def parse_variant(text: str) -> Variant:
    """"strategy:field=value[,field=value]" -> the variant named "strategy field=value ..."."""
    strategy, _, rest = text.partition(":")
    pairs = [item.partition("=") for item in rest.split(",") if item.strip()]
    if strategy not in STRATEGIES or not pairs or any(not field or not sep for field, sep, _ in pairs):
        raise ValueError(f"--with: expected a registered STRATEGY:FIELD=VALUE[,FIELD=VALUE...], got {text!r} "
                         f"(strategies: {', '.join(STRATEGIES)})")
    overrides = {field.strip(): ast.literal_eval(value.strip()) for field, _, value in pairs}
    name = " ".join([strategy, *(f"{k}={v}" for k, v in overrides.items())])
    return Variant(name, strategy, tuple(sorted(overrides.items())))


def _cell(value) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.3f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown_table(rows: list[dict]) -> str:
    header = ["predictor", "groups", "zero-variance", "AUC"] + [f"informative kept at {s}" for s in KEEP_SHARES] \
        + ["Brier"]
    keys = ["predictor", "groups", "zero_variance", "auc"] + [f"informative_kept_{s}" for s in KEEP_SHARES] + ["brier"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdirs", nargs="+", help="run folders recorded with logging.group_trace=True")
    parser.add_argument("--with", dest="variants", action="append", default=[],
                        help="STRATEGY:FIELD=VALUE[,FIELD=VALUE...]: also replay this variant of a strategy")
    parser.add_argument("--predictors", default="", help="comma-separated names to replay (default: all)")
    parser.add_argument("--json", default="", help="write the rows (per run and pooled) here")
    args = parser.parse_args(argv)
    try:
        predictors = default_predictors() + [parse_variant(text) for text in args.variants]
    except (ValueError, SyntaxError) as e:
        parser.error(str(e))
    chosen = [n.strip() for n in args.predictors.split(",") if n.strip()]
    unknown = sorted(set(chosen) - {p.name for p in predictors})
    if unknown:
        parser.error(f"--predictors: unknown {unknown}; known: {[p.name for p in predictors]}")
    predictors = [p for p in predictors if not chosen or p.name in chosen]
    runs = []
    for workdir in args.workdirs:
        trace, levels, group_size = load_run(workdir)
        runs.append(replay(trace, levels, group_size, predictors))
        print(f"## {workdir}: {len(trace)} steps\n\n{markdown_table(summarize(runs[-1]))}\n")
        print("By the outcome of the prompt's previous group:\n\n| steps | previous | groups per step | informative | "
              "median steps since |\n|---|---|---|---|---|")
        for row in by_previous_outcome(trace):
            print(f"| {row['steps']} | {row['previous']} | {row['groups_per_step']:.1f} | "
                  f"{_cell(row['informative'])} | {_cell(row['median_gap'])} |")
        print()
    everything = pooled(runs)
    rows = summarize(everything)
    print(f"## pooled over {len(runs)} run(s), groups with history\n\n{markdown_table(rows)}\n")
    for name, r in everything.items():
        if r["probability"] and name != "hindsight":
            mask = r["seen"]
            print(f"## calibration of {name!r} (groups with history)\n\n"
                  "| predicted chance from | mean predicted | observed zero-variance | groups |\n|---|---|---|---|")
            for low, predicted, observed, count in calibration(r["scores"][mask], r["zero_variance"][mask]):
                print(f"| {low:.1f} | {predicted:.3f} | {observed:.3f} | {count:,} |")
            print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": list(args.workdirs), "pooled": rows,
                       "per_run": [summarize(run) for run in runs]}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
