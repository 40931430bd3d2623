"""The headline benchmark: every registered training strategy on one task, over seeds, compared at
equal accuracy (responses, tokens and time to reach a target), with each selector's skip precision.

  python experiments/bench/compare_strategies.py --seeds 0,1,2 --root runs/compare \
      [--config experiments/arith_headline.py] [--strategies vanilla,ds_fixed,...] [--report_dir DIR] [--config.x=y ...]

Each run is `python -m greso_jax.train --config CONFIG:STRATEGY --config.seed=S --workdir ROOT/VARIANT/seedS`
with the same config for all (extra --config.* flags go to every run; the variant ds_fixed is
Dynamic Sampling with the papers' fixed passes); runs of strategies that skip before
rollout (GRESO, posterior, MoPPS) also roll out a random 10% of the prompts they skip
(eval.skip_audit_fraction, never trained on, its cost reported apart). Runs go one after the other; a finished run is not launched again, and the
runs of one seed share the seed's supervised warm start (train.warmstart_cache_dir = ROOT/warmstart). `--collect_only` reads finished runs.

The target accuracy is DS-fixed's (the papers' baseline) final mean held-out accuracy minus one
point. Rollout, update and total times exclude compilation (reported apart, as are evaluation
and the skip audit). Written to --report_dir (default ROOT): strategies.json, strategies.md (the tables and the
plots, the command, the machine, the date) and the plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import sys
from typing import Sequence

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, REPO_ROOT)

from experiments.bench import selection_sim  # noqa: E402
from experiments.sweep import absolute_config, is_finished, run_logged, shared_warmstart, train_command  # noqa: E402
from greso_jax.metrics import read_lines  # noqa: E402
from greso_jax.selection import resolve_strategy, training_strategies  # noqa: E402

BASELINE, ADAPTIVE_DS = "ds_fixed", "dynamic_sampling"
AUDIT_FRACTION = 0.1
TARGET_MARGIN = 0.01  # the target is the baseline's final accuracy minus one point


def default_variants() -> list[str]:
    """Every registered training strategy; Dynamic Sampling twice: fixed passes (the papers'
    baseline, `ds_fixed`) and adaptive passes (`dynamic_sampling`)."""
    variants = []
    for name in training_strategies():
        variants += [BASELINE, ADAPTIVE_DS] if name == ADAPTIVE_DS else [name]
    return variants


def parse_list(text: str, what: str) -> list[str]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    if not items or len(set(items)) != len(items):
        raise ValueError(f"--{what}: expected distinct comma-separated values, got {text!r}")
    return items


def run_dir(root: str, variant: str, seed: int) -> str:
    return os.path.join(root, variant, f"seed{seed}")


def strategy_of(variant: str) -> str:
    return ADAPTIVE_DS if variant == BASELINE else resolve_strategy(variant)


def run_arguments(config_file: str, variant: str, seed: int, overrides: Sequence[str]) -> tuple[str, list[str]]:
    """The config argument and the overrides of one run: the config file's variant is the strategy,
    followed by any options `config_file` names (`FILE:consistent`); ds_fixed is Dynamic Sampling
    with fixed passes; every run audits a share of its pre-rollout skips."""
    extra = [f"--config.seed={seed}"]
    if variant == BASELINE:
        extra.append("--config.selection.dynamic_sampling.pass_sizing=fixed")
    extra.append(f"--config.eval.skip_audit_fraction={AUDIT_FRACTION}")  # a strategy that never skips audits nothing
    file, _, options = config_file.partition(":")
    return f"{file}:{','.join([strategy_of(variant), *filter(None, options.split(','))])}", extra + list(overrides)


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


# -- one run's numbers -------------------------------------------------------------------------


def _number(record: dict, key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def run_curves(records: Sequence[dict]) -> dict[str, list[float]]:
    """Per-step cumulative curves of one run (index 0 = before training), and its evaluations."""
    steps = sorted((r for r in records if r.get("step", 0) > 0), key=lambda r: r["step"])
    cumulative = {"responses": [0.0], "tokens": [0.0], "rollout_s": [0.0], "update_s": [0.0], "step_s": [0.0],
                  "audit_responses": [0.0], "audit_s": [0.0]}
    cumulative["compile_s"] = [0.0]
    keys = {"rollout_s": ("time/rollout",), "update_s": ("time/update",), "step_s": ("time/step",),
            "audit_responses": ("audit/responses",), "audit_s": ("time/audit",),
            "compile_s": ("time/rollout_compile", "time/reward_compile", "time/update_compile")}
    # Times exclude compilation (a fixed cost per program shape, reported apart as compile_s).
    compile_part = {"rollout_s": ("time/rollout_compile",), "update_s": ("time/update_compile",),
                    "step_s": keys["compile_s"]}
    for record in steps:
        cumulative["responses"].append(_number(record, "rollout/num_responses") or cumulative["responses"][-1])
        cumulative["tokens"].append(_number(record, "rollout/num_tokens") or cumulative["tokens"][-1])
        for name, metric_keys in keys.items():
            spent = sum(_number(record, k) or 0.0 for k in metric_keys)
            spent -= sum(_number(record, k) or 0.0 for k in compile_part.get(name, ()))
            cumulative[name].append(cumulative[name][-1] + spent)
    evals = [(int(r["step"]), _number(r, "eval/accuracy")) for r in records if _number(r, "eval/accuracy") is not None]
    eval_time = sum(_number(r, "time/eval") or 0.0 for r in records)
    return {**cumulative, "eval_steps": [s for s, _ in evals], "eval_accuracy": [a for _, a in evals],
            "eval_s": eval_time, "steps": [0] + [int(r["step"]) for r in steps]}


def _sum(records, key) -> float:
    return float(sum(_number(r, key) or 0.0 for r in records if r.get("step", 0) > 0))


def _mean(records, key) -> float:
    values = [v for r in records if r.get("step", 0) > 0 and (v := _number(r, key)) is not None]
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
        "effective_prompts": _mean(records, "selection/effective_prompts"),
        "surplus_groups": _sum(records, "selection/surplus_groups"),
        "update_tokens": _sum(records, "actor/update_tokens"),
        "zero_variance_ratio": _mean(records, "selection/zero_variance_ratio"),
        "consistency_easy": ratio(_sum(records, "zero_variance/repeated_easy"),
                                  _sum(records, "zero_variance/revisited_easy")),
        "consistency_hard": ratio(_sum(records, "zero_variance/repeated_hard"),
                                  _sum(records, "zero_variance/revisited_hard")),
        "skips_easy": _sum(records, "selection/skipped_easy"), "skips_hard": _sum(records, "selection/skipped_hard"),
    }
    first = next((r for r in records if r.get("step") == 0), {})
    stats["warmstart_steps"] = _number(first, "warmstart/steps") or float("nan")
    stats["warmstart_accuracy"] = _number(first, "warmstart/accuracy") or float("nan")
    stats["rollout_share"] = ratio(stats["rollout_s"], stats["total_s"])
    for kind in ("easy", "hard"):
        audited = _sum(records, f"audit/{kind}_skips")
        stats[f"audited_{kind}"] = audited
        stats[f"skip_precision_{kind}"] = ratio(_sum(records, f"audit/{kind}_zero_variance"), audited)
    audited = stats["audited_easy"] + stats["audited_hard"]
    stats["skip_precision"] = ratio(_sum(records, "audit/easy_zero_variance") + _sum(records, "audit/hard_zero_variance"),
                                    audited)
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


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return float(np.mean(values)), float(np.std(values))


def compare(runs: dict[str, dict[int, list[dict]]]) -> dict:
    """Per-strategy means over seeds, the target, costs to the target and speedups vs both DS."""
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
        reached = {s: cost_to_target(r, target) for s, r in seeds.items()}
        hits = [c for c in reached.values() if c is not None]
        row["reached"] = f"{len(hits)}/{len(seeds)}"
        for key in ("step", "responses", "tokens", "rollout_s", "update_s", "total_s"):
            # Only when every seed reached the target: a mean over the seeds that did would flatter.
            row[f"to_target_{key}"] = float(np.mean([c[key] for c in hits])) if len(hits) == len(seeds) else None
        # Per seed: the target is that seed's ds_fixed final accuracy minus one point (seeds start RL from
        # different warm starts, so one mean target can sit below one seed's start and above another's reach).
        per_seed = {s: cost_to_target(r, per_run[BASELINE][s]["accuracy_final"] - TARGET_MARGIN)
                    for s, r in seeds.items() if s in per_run[BASELINE]}
        seed_hits = [c for c in per_seed.values() if c is not None]
        row["reached_per_seed"] = f"{len(seed_hits)}/{len(per_seed)}"
        for key in ("step", "responses", "tokens", "rollout_s", "update_s", "total_s"):
            row[f"to_seed_target_{key}"] = (float(np.mean([c[key] for c in seed_hits]))
                                            if per_seed and len(seed_hits) == len(per_seed) else None)
        table[variant] = row
    for variant, row in table.items():
        for base in (BASELINE, ADAPTIVE_DS):
            for key in ("responses", "rollout_s", "total_s"):
                for kind in ("to_target", "to_seed_target"):
                    mine, theirs = row[f"{kind}_{key}"], table.get(base, {}).get(f"{kind}_{key}")
                    suffix = "" if kind == "to_target" else "_per_seed"
                    row[f"speedup_{key}_vs_{base}{suffix}"] = theirs / mine if mine and theirs else None
    return {"target_accuracy": target, "baseline_final_accuracy": baseline_final, "strategies": table,
            "per_run": {v: {str(s): st for s, st in seeds.items()} for v, seeds in per_run.items()}}


SIM_NAMES = {BASELINE: "dynamic_sampling:fixed"}  # trainer variant → simulator run name (others: the same)


def simulate(runs: dict[str, dict[int, list[dict]]], config: dict) -> dict:
    """The same comparison in the selection simulator, its population calibrated to this task: the
    all-correct / all-incorrect shares vanilla GRPO measured over the second half of its runs, and the
    task's pool, batch, G, pass sizing and steps. Returns per strategy the simulated responses, the
    trainer's, each as a ratio to ds_fixed's, and the simulated efficiency vs the oracle."""
    reference = runs.get("vanilla") or runs[BASELINE]
    shares = []
    for records in reference.values():
        steps = [r for r in records if r.get("step", 0) > 0]
        late = steps[len(steps) // 2:]
        shares.append([np.mean([_number(r, k) or 0.0 for r in late])
                       for k in ("selection/easy_ratio", "selection/hard_ratio")])
    all_correct, all_incorrect = np.mean(shares, axis=0)
    fractions = selection_sim.calibrated_fractions(float(all_correct), float(all_incorrect))
    sel = config["selection"]
    settings = selection_sim.SimSettings(
        num_prompts=int(config["data"]["arith_num_train"]), steps=int(config["train"]["num_steps"]),
        train_batch_size=int(config["train"]["train_batch_size"]), group_size=int(config["rl"]["group_size"]),
        rollout_batch_size=int(sel["rollout_batch_size"]), min_pass_size=int(sel["min_pass_size"]),
        max_passes=int(sel["max_passes"]), seed=0)
    simulated = selection_sim.all_runs(settings, fractions)
    base_sim = simulated[SIM_NAMES[BASELINE]]["responses"]
    base_real = float(np.mean([run_stats(r)["responses"] for r in runs[BASELINE].values()]))
    oracle = simulated["oracle"]["responses"]
    full = simulated[SIM_NAMES[BASELINE]]["mean_effective_batch"]
    rows = {}
    for variant in runs:
        simulated_run = simulated[SIM_NAMES.get(variant, variant)]
        sim = simulated_run["responses"]
        real = float(np.mean([run_stats(r)["responses"] for r in runs[variant].values()]))
        # Efficiency compares strategies that train the same informative batches (the filtering ones);
        # vanilla and AERO train fewer informative groups, so fewer responses is not a saving there.
        comparable = simulated_run["mean_effective_batch"] >= 0.99 * full and base_sim != oracle
        rows[variant] = {"sim_responses": sim, "sim_vs_ds_fixed": base_sim / sim, "trainer_responses": real,
                         "trainer_vs_ds_fixed": base_real / real,
                         "sim_efficiency_vs_oracle": (base_sim - sim) / (base_sim - oracle) if comparable
                         else float("nan")}
    return {"fractions": fractions, "settings": dataclasses.asdict(settings), "oracle_responses": oracle,
            "oracle_vs_ds_fixed": base_sim / oracle, "strategies": rows}


def simulator_table(sim: dict) -> str:
    f = sim["fractions"]
    lines = [f"**The simulator beside the trainer** (population calibrated to vanilla's late all-correct "
             f"{f['solved']:.2f} / all-incorrect {f['never']:.2f} shares; whole runs; the oracle would need "
             f"{sim['oracle_vs_ds_fixed']:.2f}x fewer responses than ds_fixed)", "",
             "| strategy | simulated responses | simulated ds_fixed / this | trainer responses | "
             "trainer ds_fixed / this | simulated efficiency vs oracle |", "|" + "---|" * 6]
    for name, r in sim["strategies"].items():
        lines.append("| " + " | ".join([name] + [_cell(r[k]) for k in (
            "sim_responses", "sim_vs_ds_fixed", "trainer_responses", "trainer_vs_ds_fixed",
            "sim_efficiency_vs_oracle")]) + " |")
    return "\n".join(lines)


def _cell(value, digits=3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, str):
        return value
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}" if abs(value) < 1 else f"{value:,.{digits - 1}f}".rstrip("0").rstrip(".")


_SPEEDUPS = (("responses", BASELINE), ("responses", ADAPTIVE_DS), ("rollout_s", BASELINE), ("total_s", BASELINE),
             ("total_s", ADAPTIVE_DS))


def _target_table(rows: dict, title: str, reached: str, costs: str, speedups: str) -> list[str]:
    """One to-target table: `reached` / `costs`+key / speedup_<key>_vs_<base>`speedups` columns of each row."""
    lines = [title, "", "| strategy | reached | step | responses | tokens | rollout s | update s | total s | "
             "responses vs ds_fixed | responses vs ds_adaptive | rollout s vs ds_fixed | total s vs ds_fixed | "
             "total s vs ds_adaptive |", "|" + "---|" * 13]
    for name, r in rows.items():
        ratios = [r[f"speedup_{k}_vs_{b}{speedups}"] for k, b in _SPEEDUPS]
        lines.append("| " + " | ".join([name, r[reached]] + [_cell(r[f"{costs}{k}"]) for k in (
            "step", "responses", "tokens", "rollout_s", "update_s", "total_s")] + [
            _cell(x) + ("x" if x else "") for x in ratios]) + " |")
    return lines


def markdown_tables(result: dict) -> str:
    rows = result["strategies"]
    lines = [f"Target accuracy: {result['target_accuracy']:.3f} (ds_fixed's final mean "
             f"{result['baseline_final_accuracy']:.3f} minus one point).", ""]
    lines += _target_table(rows, "**To the target** (means over seeds; — where not every seed reached it)",
                           "reached", "to_target_", "")
    lines += [""] + _target_table(rows, "**To each seed's own target** (that seed's ds_fixed final accuracy minus "
                                  "one point; means over seeds, — where not every seed reached it)",
                                  "reached_per_seed", "to_seed_target_", "_per_seed")
    lines += ["", "**Whole run** (mean ± std over seeds)", "",
              "| strategy | accuracy start | accuracy final | responses | tokens | rollout s | update s | total s | "
              "rollout share | eval s (apart) | compile s (apart) | effective prompts/step | surplus groups | "
              "update tokens | zero-variance ratio |", "|" + "---|" * 15]
    for name, r in rows.items():
        pm = lambda k: f"{_cell(r[k])} ± {_cell(r[k + '_std'])}"  # noqa: E731
        lines.append("| " + " | ".join([name, pm("accuracy_start"), pm("accuracy_final"), pm("responses"),
                                        _cell(r["tokens"]), _cell(r["rollout_s"]), _cell(r["update_s"]),
                                        pm("total_s"), _cell(r["rollout_share"]), _cell(r["eval_s"]),
                                        _cell(r["compile_s"]),
                                        _cell(r["effective_prompts"]), _cell(r["surplus_groups"]),
                                        _cell(r["update_tokens"]), _cell(r["zero_variance_ratio"])]) + " |")
    lines += ["", "**Zero variance from one rollout of a prompt to its next** (P(again | now), pooled per run, "
              "mean over seeds), and skip precision (the audited share of skips that were again zero-variance)", "",
              "| strategy | consistency easy | consistency hard | skips easy | skips hard | audited easy | audited hard "
              "| precision easy | precision hard | precision | audit responses (apart) | audit s (apart) |",
              "|" + "---|" * 12]
    for name, r in rows.items():
        lines.append("| " + " | ".join([name] + [_cell(r[k]) for k in (
            "consistency_easy", "consistency_hard", "skips_easy", "skips_hard", "audited_easy", "audited_hard",
            "skip_precision_easy", "skip_precision_hard", "skip_precision", "audit_responses", "audit_s")]) + " |")
    per_run = result["per_run"]
    seeds = sorted({int(seed) for runs in per_run.values() for seed in runs})
    lines += ["", "**Where each seed starts RL** (the warm start stops on its validation accuracy band)", "",
              "| seed | warm-start steps | validation accuracy at stop | held-out accuracy at step 0 |", "|---|---|---|---|"]
    for seed in seeds:
        stats = next(runs[str(seed)] for runs in per_run.values() if str(seed) in runs)
        lines.append(f"| {seed} | {_cell(stats['warmstart_steps'])} | {_cell(stats['warmstart_accuracy'])} | "
                     f"{_cell(stats['accuracy_start'])} |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, list[dict]]], directory: str) -> list[str]:
    """accuracy vs responses and vs time, zero-variance ratio over steps, GRESO's p; returns the file names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def band(ax, xs_by_seed, ys_by_seed, label):
        grid = np.linspace(0, min(x[-1] for x in xs_by_seed), 50)
        ys = np.array([np.interp(grid, x, y) for x, y in zip(xs_by_seed, ys_by_seed)])
        line, = ax.plot(grid, ys.mean(0), label=label)
        ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.2, color=line.get_color())

    files = []
    for x_key, x_label, name in (("responses", "responses generated", "accuracy_vs_responses.png"),
                                 ("step_s", "training time (s, evaluation excluded)", "accuracy_vs_time.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant, seeds in runs.items():
            xs, ys = [], []
            for records in seeds.values():
                c = run_curves(records)
                xs.append([c[x_key][c["steps"].index(s)] for s in c["eval_steps"]])
                ys.append(c["eval_accuracy"])
            band(ax, xs, ys, variant)
        ax.set_xlabel(x_label)
        ax.set_ylabel("held-out accuracy")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(directory, name), dpi=120)
        plt.close(fig)
        files.append(name)
    for keys, y_label, name, only in ((("selection/zero_variance_ratio",), "zero-variance share of rolled-out groups",
                                       "zero_variance.png", None),
                                      (("selection/p_easy", "selection/p_hard"), "GRESO keep probability base p",
                                       "greso_p.png", "greso")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant, seeds in runs.items():
            if only and strategy_of(variant) != only:
                continue
            for key in keys:
                series = [[_number(r, key) or 0.0 for r in sorted(recs, key=lambda r: r["step"]) if r["step"] > 0]
                          for recs in seeds.values()]
                length = min(len(s) for s in series)
                ax.plot(range(1, length + 1), np.mean([s[:length] for s in series], 0),
                        label=f"{variant} {key.split('/')[-1]}" if len(keys) > 1 else variant)
        ax.set_xlabel("step")
        ax.set_ylabel(y_label)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(directory, name), dpi=120)
        plt.close(fig)
        files.append(name)
    return files


def write_report(result: dict, runs, directory: str, command: str, notes: str = "") -> str:
    """strategies.json, the plots and strategies.md in `directory`; returns the markdown's path."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "strategies.json"), "w") as f:
        json.dump(result, f, indent=1, default=float)
    images = plot(runs, directory)
    seeds = sorted({s for v in runs.values() for s in v})
    text = "\n".join([
        f"# Strategies compared at equal accuracy ({datetime.date.today().isoformat()})", "",
        f"Command: `{command}`", "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}; "
        f"seeds {seeds}.", "", notes, "", markdown_tables(result), "",
        *([simulator_table(result["simulator"]), ""] if "simulator" in result else []),
        *[f"![{name}]({name})" for name in images], ""])
    path = os.path.join(directory, "strategies.md")
    with open(path, "w") as f:
        f.write(text)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="experiments/arith_headline.py")
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
    runs = collect(args.root, variants, seeds)
    result = compare(runs)
    with open(os.path.join(run_dir(args.root, BASELINE, seeds[0]), "config.json")) as f:
        result["simulator"] = simulate(runs, json.load(f))
    command = shlex.join(["python", "experiments/bench/compare_strategies.py", *(argv if argv is not None
                                                                                 else sys.argv[1:])])
    path = write_report(result, runs, args.report_dir or args.root, command, args.notes)
    print(markdown_tables(result))
    print(simulator_table(result["simulator"]))
    print(f"report: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
