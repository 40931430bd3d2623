"""The headline benchmark: every registered training strategy on one task, over seeds, compared at
equal accuracy (responses, tokens and time to reach a target), with each selector's skip precision.

  python experiments/bench/compare_strategies.py --seeds 0,1,2 --root runs/compare \
      [--config experiments/arith_headline.py:unseen] [--strategies vanilla,ds_fixed,...] [--report_dir DIR]
      [--config.x=y ...]

Each run is `python -m greso_jax.train --config CONFIG:STRATEGY --config.seed=S --workdir
ROOT/VARIANT/seedS` with the same config for all (extra --config.* flags go to every run); a named
variant (the registry's, e.g. ds_fixed: Dynamic Sampling with the papers' fixed passes; mopps_authors:
MoPPS as its authors run it) adds its settings as --config.selection.<strategy>.* flags, and NAME@SIZER
runs NAME with its passes sized by SIZER (e.g. greso@observed_rate: --config.selection.greso.pass_sizing=
observed_rate), for comparisons at equal sizing. Runs of strategies that skip before rollout
also roll out a random 10% of the prompts they skip (eval.skip_audit_fraction, never trained on,
its cost reported apart). Runs go one after the
other; a finished run is not launched again, and the runs of one seed share the seed's supervised
warm start (train.warmstart_cache_dir = ROOT/warmstart). `--collect_only` reads finished runs.

The report leads with the paired claim (claim_report.py): per strategy and seed against the
baseline on the same seed and warm start, final accuracy, accuracy at equal wall-clock, CPU
seconds and responses, and the cost to reach the baseline's final accuracy, with 95% intervals.
The target accuracy of the tables after it is the registered baseline's (ds_fixed, the papers' DS) final mean held-out
accuracy minus one point; beside the costs to reach it, each strategy's final accuracy is set
against the baseline's at the same responses and at the same training time (the report's "at
equal budgets" table); speedups are also given against the baseline's strategy at its defaults.
Rollout, update and total times exclude compilation (reported apart, as are evaluation and the
skip audit). Written to --report_dir (default ROOT): strategies.json, strategies.md (the tables
and the plots, the command, the machine, the date) and the plots; the numbers come from
greso_jax/run/run_stats.py, the report from strategy_report.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import sys
from typing import Sequence

import numpy as np

from experiments.bench.claim_report import claims, claims_table
from experiments.bench.strategy_report import (ADAPTIVE, BASELINE, limits_section, markdown_tables, simulator_table,
                                               write_report)
from experiments.sweep import absolute_config, is_finished, run_logged, shared_warmstart, train_command
from greso_jax.run.records import read_lines
from greso_jax.run.run_stats import accuracy_within, cost_to_target, number, run_stats
from greso_jax.selection import bound, named_variants, training_strategies
from greso_jax.selection import variant as registered_variant
from greso_jax.selection.sim import SimSettings, all_runs, calibrated_fractions, run_strategy, sizing_grid, sizing_table

AUDIT_FRACTION = 0.1
TARGET_MARGIN = 0.01  # the target is the baseline's final accuracy minus one point


def default_variants() -> list[str]:
    """Every registered training strategy, each after its named variants (ds_fixed before
    dynamic_sampling)."""
    return [name for strategy in training_strategies()
            for name in (*(v.name for v in named_variants(strategy)), strategy)]


def parse_list(text: str, what: str) -> list[str]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items or len(set(items)) != len(items):
        raise ValueError(f"--{what}: expected distinct comma-separated values, got {text!r}")
    return items


def run_dir(root: str, variant: str, seed: int) -> str:
    return os.path.join(root, variant, f"seed{seed}")


def run_arguments(config_file: str, name: str, seed: int, overrides: Sequence[str]) -> tuple[str, list[str]]:
    """The config argument and the overrides of one run: the config file's variant is the strategy,
    followed by any options `config_file` names (`FILE:consistent`); a named variant's settings are
    flags; every run audits a share of its pre-rollout skips."""
    run = registered_variant(name)
    extra = [f"--config.seed={seed}", *(f"--config.selection.{run.strategy}.{k}={v}" for k, v in run.overrides)]
    extra.append(f"--config.eval.skip_audit_fraction={AUDIT_FRACTION}")  # a strategy that never skips audits nothing
    file, _, options = config_file.partition(":")
    return f"{file}:{','.join([run.strategy, *filter(None, options.split(','))])}", extra + list(overrides)


def run_all(config_file: str, variants: Sequence[str], seeds: Sequence[int], root: str,
            overrides: Sequence[str] = (), log=print) -> list[str]:
    """Runs every unfinished (variant, seed) one after the other, seed by seed; returns the failed ones."""
    failed = []
    for seed in seeds:
        for variant in variants:
            workdir = run_dir(root, variant, seed)
            name = f"{variant}/seed{seed}"
            if is_finished(workdir):
                log(f"{name}: finished earlier, not launched again")
                continue
            config, run_overrides = run_arguments(config_file, variant, seed, overrides)
            run_overrides.append(shared_warmstart(root))
            command = train_command(config, workdir, run_overrides)
            if not run_logged(command, workdir, name, log=log):
                failed.append(name)
    return failed


# -- the comparison ----------------------------------------------------------------------------


def collect(root: str, variants: Sequence[str], seeds: Sequence[int], log=print) -> dict[str, dict[int, list[dict]]]:
    runs: dict[str, dict[int, list[dict]]] = {}
    for variant in variants:
        for seed in seeds:
            workdir = run_dir(root, variant, seed)
            if not is_finished(workdir):
                log(f"{variant}/seed{seed}: not finished ({workdir}); left out")
                continue
            runs.setdefault(variant, {})[seed] = read_lines(os.path.join(workdir, "metrics.jsonl"))
    return runs


def collect_with_baseline(root: str, variants: Sequence[str], seeds: Sequence[int], log=print):
    """`collect`, with the baseline's runs under `root` added when `variants` leaves it out: the report pairs
    every strategy with it, so strategies added to a root whose baseline ran earlier are paired with those runs."""
    return collect(root, variants if BASELINE in variants else [BASELINE, *variants], seeds, log=log)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return float(np.mean(values)), float(np.std(values))


def _ratio(theirs, mine) -> float | None:
    """theirs / mine where both are finite and positive; None otherwise (a cost that was never reached)."""
    ok = all(v is not None and math.isfinite(v) and v > 0 for v in (theirs, mine))
    return theirs / mine if ok else None


def compare(runs: dict[str, dict[int, list[dict]]]) -> dict:
    """Per-strategy means over seeds, the target, costs to the target and speedups vs both baselines."""
    if BASELINE not in runs:
        raise ValueError(f"the comparison needs the {BASELINE} runs (its final accuracy sets the target)")
    per_run = {v: {s: run_stats(r) for s, r in seeds.items()} for v, seeds in runs.items()}
    baseline_final, _ = _mean_std([s["accuracy_final"] for s in per_run[BASELINE].values()])
    target = baseline_final - TARGET_MARGIN
    table = {}
    for variant, seeds in runs.items():
        stats = per_run[variant]
        row = {"seeds": len(seeds)}
        for key in next(iter(stats.values())):
            row[key], row[f"{key}_std"] = _mean_std([s[key] for s in stats.values()])
        row[f"accuracy_final_vs_{BASELINE}"] = row["accuracy_final"] - baseline_final
        reached = {s: cost_to_target(r, target) for s, r in seeds.items()}
        hits = [c for c in reached.values() if c is not None]
        row["reached"] = f"{len(hits)}/{len(seeds)}"
        for key in ("step", "responses", "tokens", "rollout_s", "update_s", "total_s"):
            # Only when every seed reached the target: a mean over the seeds that did would flatter.
            row[f"to_target_{key}"] = float(np.mean([c[key] for c in hits])) if len(hits) == len(seeds) else None
        # Per seed: the target is that seed's baseline final accuracy minus one point (seeds start RL from
        # different warm starts, so one mean target can sit below one seed's start and above another's reach).
        per_seed = {s: cost_to_target(r, per_run[BASELINE][s]["accuracy_final"] - TARGET_MARGIN)
                    for s, r in seeds.items() if s in per_run[BASELINE]}
        seed_hits = [c for c in per_seed.values() if c is not None]
        row["reached_per_seed"] = f"{len(seed_hits)}/{len(per_seed)}"
        for key in ("step", "responses", "tokens", "rollout_s", "update_s", "total_s"):
            row[f"to_seed_target_{key}"] = (float(np.mean([c[key] for c in seed_hits]))
                                            if per_seed and len(seed_hits) == len(per_seed) else None)
        # At equal budgets: the baseline's accuracy, on the same seed, once it had spent what this run spent.
        shared = [s for s in seeds if s in runs[BASELINE]]
        for budget, curve_key, stat_key in (("responses", "responses", "responses"), ("time", "step_s", "total_s")):
            at = [accuracy_within(runs[BASELINE][s], per_run[variant][s][stat_key], curve_key) for s in shared]
            row[f"baseline_at_equal_{budget}"], _ = _mean_std(at)
            row[f"gain_at_equal_{budget}"], _ = _mean_std(
                [per_run[variant][s]["accuracy_final"] - a for s, a in zip(shared, at)])
        table[variant] = row
    for variant, row in table.items():
        for base in (BASELINE, ADAPTIVE):
            for key in ("responses", "rollout_s", "total_s"):
                row[f"whole_{key}_vs_{base}"] = _ratio(table.get(base, {}).get(key), row[key])
                for kind in ("to_target", "to_seed_target"):
                    suffix = "" if kind == "to_target" else "_per_seed"
                    row[f"speedup_{key}_vs_{base}{suffix}"] = _ratio(table.get(base, {}).get(f"{kind}_{key}"),
                                                                     row[f"{kind}_{key}"])
    return {"target_accuracy": target, "baseline_final_accuracy": baseline_final, "strategies": table,
            "claims": claims(runs, BASELINE),
            "per_run": {v: {str(s): st for s, st in seeds.items()} for v, seeds in per_run.items()}}


def simulate(runs: dict[str, dict[int, list[dict]]], config: dict) -> dict:
    """The same comparison in the selection simulator, its population calibrated to this task: the
    all-correct / all-incorrect shares measured over the second half of the first run that skipped no
    prompt before rollout (its groups are the unselected population's; the baseline's if none), and
    the task's pool, batch, G, pass sizing and steps. Returns per strategy the simulated responses,
    the trainer's, each as a ratio to the baseline's, and the simulated efficiency vs the bound."""
    skip_free = [name for name, seeds in runs.items()
                 if not any(number(r, f"selection/skipped_{kind}") for records in seeds.values() for r in records
                            for kind in ("easy", "hard"))]
    reference_name = skip_free[0] if skip_free else BASELINE
    reference = runs[reference_name]
    shares = []
    for records in reference.values():
        steps = [r for r in records if r.get("step", 0) > 0]
        late = steps[len(steps) // 2:]
        shares.append([np.mean([number(r, k) or 0.0 for r in late])
                       for k in ("selection/easy_ratio", "selection/hard_ratio")])
    all_correct, all_incorrect = np.mean(shares, axis=0)
    fractions = calibrated_fractions(float(all_correct), float(all_incorrect))
    sel = config["selection"]
    settings = SimSettings(
        num_prompts=int(config["data"]["arith_num_train"]), steps=int(config["train"]["num_steps"]),
        train_batch_size=int(config["train"]["train_batch_size"]), group_size=int(config["rl"]["group_size"]),
        rollout_batch_size=int(sel["rollout_batch_size"]), min_pass_size=int(sel["min_pass_size"]),
        max_passes=int(sel["max_passes"]), seed=0, once_per_step=bool(sel.get("once_per_step", False)))
    simulated = all_runs(settings, fractions)
    simulated.update({name: run_strategy(name, settings, fractions) for name in runs if name not in simulated})
    # Every selector at every sizer it can use, in the same simulated world: the ranking at equal sizing.
    sizing = sizing_table(sizing_grid(settings, fractions, done=simulated))
    base_sim = simulated[BASELINE]["responses"]
    base_real = float(np.mean([run_stats(r)["responses"] for r in runs[BASELINE].values()]))
    oracle = simulated[bound()]["responses"]
    full = simulated[BASELINE]["mean_effective_batch"]
    rows = {}
    for name in runs:
        simulated_run = simulated[name]
        sim = simulated_run["responses"]
        real = float(np.mean([run_stats(r)["responses"] for r in runs[name].values()]))
        # Efficiency compares strategies that train the same informative batches (the filtering ones);
        # those that train fewer informative groups (vanilla, AERO) do not save by using fewer responses.
        comparable = simulated_run["mean_effective_batch"] >= 0.99 * full and base_sim != oracle
        rows[name] = {"sim_responses": sim, f"sim_vs_{BASELINE}": base_sim / sim, "trainer_responses": real,
                      f"trainer_vs_{BASELINE}": base_real / real,
                      "sim_efficiency_vs_oracle": (base_sim - sim) / (base_sim - oracle) if comparable
                      else float("nan")}
    return {"fractions": fractions, "reference": reference_name, "settings": dataclasses.asdict(settings),
            "oracle_responses": oracle,
            f"oracle_vs_{BASELINE}": base_sim / oracle, "strategies": rows, "sizing": sizing}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="experiments/arith_headline.py:unseen", help="the headline task by default")
    parser.add_argument("--strategies", default=",".join(default_variants()))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--root", required=True, help="folder of the runs")
    parser.add_argument("--report_dir", default="", help="where the report goes (default: --root)")
    parser.add_argument("--notes", default="", help="a paragraph for the report (e.g. what was reduced)")
    parser.add_argument("--collect_only", action="store_true")
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if not o.startswith("--config.")]
    if bad:
        parser.error(f"unknown arguments {bad} (only --config.* overrides are passed to the runs)")
    variants = parse_list(args.strategies, "strategies")
    seeds = [int(s) for s in parse_list(args.seeds, "seeds")]
    config_file = absolute_config(args.config)
    failed = [] if args.collect_only else run_all(config_file, variants, seeds, args.root, overrides)
    runs = collect_with_baseline(args.root, variants, seeds)
    if BASELINE not in runs:
        print(f"no report: {BASELINE} has no finished run under {args.root} for seeds {seeds} (its final accuracy "
              f"sets the target); add {BASELINE} to --strategies", file=sys.stderr)
        return 1
    result = compare(runs)
    with open(os.path.join(run_dir(args.root, BASELINE, seeds[0]), "config.json")) as f:
        result["simulator"] = simulate(runs, json.load(f))
    command = shlex.join(["python", "experiments/bench/compare_strategies.py", *(argv if argv is not None
                                                                                 else sys.argv[1:])])
    path = write_report(result, runs, args.report_dir or args.root, command, args.notes)
    print(claims_table(result["claims"], BASELINE))
    print(markdown_tables(result))
    print(simulator_table(result["simulator"]))
    print(limits_section(result))
    print(f"report: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
