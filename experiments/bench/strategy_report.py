"""The strategy comparison's report: its markdown tables (to the target, at equal budgets, whole runs,
consistency and skip precision, starting points), the simulator beside the trainer, and the plots.
The baselines are the registry's (the comparison baseline and its strategy at its defaults), the
knobs plotted those each strategy declares."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform

import numpy as np

from experiments.bench.claim_report import claims_table
from experiments.bench.selection_sim import sizing_markdown
from greso_jax.run.run_stats import number, run_curves
from greso_jax.selection import STRATEGIES, baseline, bound
from greso_jax.selection import variant as registered_variant

BASELINE, ADAPTIVE = baseline().name, baseline().strategy  # the papers' DS, and its strategy at its defaults


def _cell(value, digits=3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, str):
        return value
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}" if abs(value) < 1 else f"{value:,.{digits - 1}f}".rstrip("0").rstrip(".")


def _ratio_cell(value) -> str:
    """A ratio as "2.31x"; "—" where there is none (None, NaN)."""
    text = _cell(value)
    return text if text == "—" else text + "x"


_SPEEDUPS = (("responses", BASELINE), ("responses", ADAPTIVE), ("rollout_s", BASELINE), ("total_s", BASELINE),
             ("total_s", ADAPTIVE))


def _target_table(rows: dict, title: str, reached: str, costs: str, speedups: str) -> list[str]:
    """One to-target table: `reached` / `costs`+key / speedup_<key>_vs_<base>`speedups` columns of each row."""
    lines = [title, "", "| strategy | reached | step | responses | tokens | rollout s | update s | total s | "
             + " | ".join(f"{key.replace('_s', ' s')} vs {base}" for key, base in _SPEEDUPS) + " |",
             "|" + "---|" * 13]
    for name, r in rows.items():
        ratios = [r[f"speedup_{k}_vs_{b}{speedups}"] for k, b in _SPEEDUPS]
        lines.append("| " + " | ".join([name, r[reached]] + [_cell(r[f"{costs}{k}"]) for k in (
            "step", "responses", "tokens", "rollout_s", "update_s", "total_s")] + [
            _ratio_cell(x) for x in ratios]) + " |")
    return lines


def equal_budget_table(rows: dict) -> list[str]:
    """Each strategy's final accuracy beside the baseline's at the same responses and at the same training time."""
    lines = [f"**At equal budgets** (means over seeds: {BASELINE}'s held-out accuracy, linear between its evaluations, "
             "when it had spent what this strategy spent over its whole run; at most its own final accuracy)", "",
             f"| strategy | accuracy final | responses | {BASELINE} at these responses | difference | total s | "
             f"{BASELINE} at this time | difference |", "|" + "---|" * 8]
    for name, r in rows.items():
        lines.append("| " + " | ".join([name] + [_cell(r[k]) for k in (
            "accuracy_final", "responses", "baseline_at_equal_responses", "gain_at_equal_responses", "total_s",
            "baseline_at_equal_time", "gain_at_equal_time")]) + " |")
    return lines


def markdown_tables(result: dict) -> str:
    rows = result["strategies"]
    lines = [f"Target accuracy: {result['target_accuracy']:.3f} ({BASELINE}'s final mean "
             f"{result['baseline_final_accuracy']:.3f} minus one point).", ""]
    lines += _target_table(rows, "**To the target** (means over seeds; — where not every seed reached it)",
                           "reached", "to_target_", "")
    lines += [""] + _target_table(rows, f"**To each seed's own target** (that seed's {BASELINE} final accuracy "
                                  "minus one point; means over seeds, — where not every seed reached it)",
                                  "reached_per_seed", "to_seed_target_", "_per_seed")
    lines += [""] + equal_budget_table(rows)
    lines += [""] + whole_run_speedups(rows)
    lines += ["", "**Whole run** (mean ± std over seeds)", "",
              "| strategy | accuracy start | accuracy final | responses | tokens | rollout s | update s | total s | "
              "rollout share | eval s (apart) | compile s (apart) | effective prompts/step | surplus groups | "
              "update tokens | zero-variance ratio | groups re-rolled in their step | distinct prompts/step |",
              "|" + "---|" * 17]
    for name, r in rows.items():
        pm = lambda k: f"{_cell(r[k])} ± {_cell(r[k + '_std'])}"  # noqa: E731
        lines.append("| " + " | ".join([name, pm("accuracy_start"), pm("accuracy_final"), pm("responses"),
                                        _cell(r["tokens"]), _cell(r["rollout_s"]), _cell(r["update_s"]),
                                        pm("total_s"), _cell(r["rollout_share"]), _cell(r["eval_s"]),
                                        _cell(r["compile_s"]),
                                        _cell(r["effective_prompts"]), _cell(r["surplus_groups"]),
                                        _cell(r["update_tokens"]), _cell(r["zero_variance_ratio"]),
                                        _cell(r["repeated_share"]), _cell(r["batch_prompts"])]) + " |")
    lines += ["", "**Zero variance from one rollout of a prompt to its next** (P(again | now), pooled per run, "
              "mean over seeds), and skip precision (the share of the audited skips whose group was zero-variance)", "",
              "| strategy | consistency easy | consistency hard | skips easy | skips hard | audited easy | "
              "audited hard | audited, no prediction | precision easy | precision hard | precision | "
              "audit responses (apart) | audit s (apart) |",
              "|" + "---|" * 13]
    for name, r in rows.items():
        lines.append("| " + " | ".join([name] + [_cell(r[k]) for k in (
            "consistency_easy", "consistency_hard", "skips_easy", "skips_hard", "audited_easy", "audited_hard",
            "audited_other", "skip_precision_easy", "skip_precision_hard", "skip_precision", "audit_responses",
            "audit_s")]) + " |")
    per_run = result["per_run"]
    seeds = sorted({int(seed) for runs in per_run.values() for seed in runs})
    lines += ["", "**Where each seed starts RL** (the warm start stops on its validation accuracy band)", "",
              "| seed | warm-start steps | validation accuracy at stop | held-out accuracy at step 0 |",
              "|---|---|---|---|"]
    for seed in seeds:
        stats = next(runs[str(seed)] for runs in per_run.values() if str(seed) in runs)
        lines.append(f"| {seed} | {_cell(stats['warmstart_steps'])} | {_cell(stats['warmstart_accuracy'])} | "
                     f"{_cell(stats['accuracy_start'])} |")
    return "\n".join(lines)


def simulator_table(sim: dict) -> str:
    f = sim["fractions"]
    reference = sim.get("reference", "the reference run")  # reports written before the key existed lack it
    lines = [f"**The simulator beside the trainer** (population calibrated to {reference}'s late all-correct "
             f"{f['solved']:.2f} / all-incorrect {f['never']:.2f} shares; whole runs; the {bound()} would need "
             f"{sim[f'oracle_vs_{BASELINE}']:.2f}x fewer responses than {BASELINE})", "",
             f"| strategy | simulated responses | simulated {BASELINE} / this | trainer responses | "
             f"trainer {BASELINE} / this | simulated efficiency vs {bound()} |", "|" + "---|" * 6]
    for name, r in sim["strategies"].items():
        lines.append("| " + " | ".join([name] + [_cell(r[k]) for k in (
            "sim_responses", f"sim_vs_{BASELINE}", "trainer_responses", f"trainer_vs_{BASELINE}",
            "sim_efficiency_vs_oracle")]) + " |")
    if "sizing" in sim:  # reports written before the selector x sizer table lack it
        lines += ["", "**At equal sizing** (the same simulated world; every selector with every sizer it can use)", "",
                  sizing_markdown([sim["sizing"]])]
    return "\n".join(lines)


def whole_run_speedups(rows: dict) -> list[str]:
    """Whole-run ratios against both baselines: how many times fewer responses / less time than each (means
    over seeds)."""
    pairs = [(key, base) for key in ("responses", "rollout_s", "total_s") for base in (BASELINE, ADAPTIVE)]
    header = [f"{key.replace('_s', ' s')} vs {base}" for key, base in pairs]
    lines = ["**Whole run against both baselines** (the baseline's mean over this strategy's mean; above 1: this "
             "strategy spent less)", "", f"| strategy | final accuracy − {BASELINE} | " + " | ".join(header) + " |",
             "|" + "---|" * (2 + len(pairs))]
    for name, r in rows.items():
        lines.append("| " + " | ".join([name, f"{r[f'accuracy_final_vs_{BASELINE}']:+.3f}"] +
                                       [_ratio_cell(r.get(f"whole_{key}_vs_{base}")) for key, base in pairs]) + " |")
    return lines


def limits_section(result: dict) -> str:
    """What bounds the selectors on this task, in numbers: the zero-variance share DS meets, its consistency,
    the oracle's saving, each skipping strategy's precision, surplus and targets reached, where time goes."""
    rows = result["strategies"]
    if BASELINE not in rows:
        return ""
    base = rows[BASELINE]
    lines = ["**What limits the selectors here** (means over seeds)", "",
             f"- {BASELINE} meets zero-variance groups in {base['zero_variance_ratio']:.1%} of its rollouts; "
             f"a prompt zero-variance now is again at its next rollout with probability "
             f"{base['consistency_easy']:.3f} (all correct) / {base['consistency_hard']:.3f} (all incorrect).",
             f"- Its time: rollout {base['rollout_share']:.1%}, update "
             f"{base['update_s'] / base['total_s'] if base['total_s'] else math.nan:.1%} of the total "
             "(compilation, evaluation and audit apart)."]
    if "simulator" in result:
        lines.append(f"- The {bound()} (skips exactly the groups that will be zero-variance) would need "
                     f"{result['simulator'][f'oracle_vs_{BASELINE}']:.2f}x fewer responses than {BASELINE} "
                     "(simulator calibrated to this task).")
    lines += ["", f"| strategy | common target reached | own target reached | responses vs {BASELINE} | "
              f"rollout s vs {BASELINE} | final accuracy − {BASELINE} | skip precision (easy / hard) | "
              "surplus groups |",
              "|" + "---|" * 8]
    for name, r in rows.items():
        audited = sum(r.get(f"audited_{kind}", 0.0) or 0.0 for kind in ("easy", "hard", "other"))
        if not audited:
            continue  # strategies that skip nothing before rollout
        precision = (f"{_cell(r['skip_precision'])} ({_cell(r['skip_precision_easy'])} / "
                     f"{_cell(r['skip_precision_hard'])})")
        lines.append("| " + " | ".join([
            name, r["reached"], r["reached_per_seed"],
            *[_ratio_cell(r.get(f"whole_{key}_vs_{BASELINE}")) for key in ("responses", "rollout_s")],
            f"{r[f'accuracy_final_vs_{BASELINE}']:+.3f}", precision, _cell(r["surplus_groups"])]) + " |")
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, list[dict]]], directory: str) -> list[str]:
    """accuracy vs responses and vs time, zero-variance ratio over steps, each strategy's knobs; returns the
    file names."""
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
    panels = [(("selection/zero_variance_ratio",), "zero-variance share of rolled-out groups", "zero_variance.png",
               runs)]
    for strategy, cls in STRATEGIES.items():  # each strategy's declared knobs, for its runs that logged them
        keys = tuple(f"selection/{strategy}/{knob}" for knob in cls.knobs)
        mine = {v: seeds for v, seeds in runs.items() if registered_variant(v).strategy == strategy
                and any(key in r for records in seeds.values() for r in records for key in keys)}
        if keys and mine:
            panels.append((keys, f"{strategy}'s knobs", f"{strategy}_knobs.png", mine))
    for keys, y_label, name, chosen in panels:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name_of_run, seeds in chosen.items():
            for key in keys:
                series = [[number(r, key) or 0.0 for r in sorted(recs, key=lambda r: r["step"]) if r["step"] > 0]
                          for recs in seeds.values()]
                length = min(len(s) for s in series)
                ax.plot(range(1, length + 1), np.mean([s[:length] for s in series], 0),
                        label=f"{name_of_run} {key.split('/')[-1]}" if len(keys) > 1 else name_of_run)
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
        f"seeds {seeds}.", "", notes, "",
        *([claims_table(result["claims"], BASELINE), ""] if result.get("claims") else []),
        markdown_tables(result), "",
        *([simulator_table(result["simulator"]), ""] if "simulator" in result else []),
        limits_section(result), "",
        *[f"![{name}]({name})" for name in images], ""])
    path = os.path.join(directory, "strategies.md")
    with open(path, "w") as f:
        f.write(text)
    return path
