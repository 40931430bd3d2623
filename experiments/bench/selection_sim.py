"""Selection simulator: every registered strategy and variant through the real step driver on ~20k prompts
with drifting latent success (the world: greso_jax/selection/sim/population.py), printed as tables.

Per run: responses, effective prompts, passes, surplus, skip precision and coverage; the
efficiency of every strategy that predicts, against both baselines and the bound; each chance
predictor's calibration; the sweep of each strategy's declared ablation (GRESO's Δp); and the
selector x sizer table: every strategy that sizes its passes by a sizer, with each one it can use
(NAME@SIZER), its efficiency relative to the oracle and to known_rate at the same sizer, the mean
over --seeds (the other tables are the first seed's).

  python experiments/bench/selection_sim.py            # full tables (~20k prompts, 200 steps)
  python experiments/bench/selection_sim.py --quick    # a smaller run
  python experiments/bench/selection_sim.py --num-prompts 5000 --steps 600 --seeds 0,1,2 --sizing-only
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from greso_jax.selection import STRATEGIES, baseline, bound, causal_bound, default_settings
from greso_jax.selection.pass_sizing import SIZERS
from greso_jax.selection.sim import SimSettings, all_runs, efficiency, run_strategy, sizing_grid, sizing_table


def print_tables(settings: SimSettings, results: dict[str, dict], levels: bool) -> None:
    print(f"settings: {settings}")
    print_runs(results)
    limit = bound()
    for base in (baseline().strategy, baseline().name):
        for name, r in results.items():
            if r["predicts"]:
                theirs, mine = results[base]["responses_per_effective"], r["responses_per_effective"]
                print(f"vs {base}: {name} efficiency ({base} − {name}) / ({base} − {limit}) = "
                      f"{efficiency(theirs, mine, results[limit]['responses_per_effective']):.3f} (responses "
                      f"per effective prompt); {base} / {name} = {theirs / mine:.2f}x")
    for name, r in results.items():
        if r["calibration"]:
            print(f"\n{name}: predicted zero-variance chance vs outcome (rolled-out groups observed, skipped "
                  "ones foreseen; at decision time)\n")
            print("| predicted in | groups | mean predicted | zero-variance share |")
            print("|---|---:|---:|---:|")
            for row in r["calibration"]:
                print(f"| [{row['low']:.1f}, {row['high']:.1f}) | {row['groups']} | {row['predicted']:.3f} | "
                      f"{row['observed']:.3f} |")
    for name, cls in STRATEGIES.items():
        if cls.ablation is not None:
            print_ablation(settings, results, name, levels)


def print_ablation(settings: SimSettings, results: dict[str, dict], name: str, levels: bool) -> None:
    """One run per value of the strategy's declared ablation; its knobs as epoch 1 begins and at the end."""
    cls = STRATEGIES.get(name)
    sweep, knobs = cls.ablation, cls.knobs
    print(f"\n{results[name]['epochs']} epochs of the prompt stream; {', '.join(knobs)} of {name} as epoch 1 "
          "begins and at the end:")
    print(f"\n| {sweep.label or sweep.field} | responses | mean effective batch | responses / effective prompt | "
          f"{', '.join(knobs)} at epoch 1 | " + " | ".join(f"final {k}" for k in knobs) + " |")
    print("|---:|---:|---:|---:|---|" + "---:|" * len(knobs))
    for value in sweep.values:
        default = value == default_settings(name)[sweep.field]  # the strategy's row above already ran it
        r = results[name] if default else run_strategy(name, settings, levels=levels, **{sweep.field: value})
        at_epoch_1 = ", ".join(f"{r['knobs_epoch_1'][k]:.3f}" for k in knobs)
        print(f"| {value} | {r['responses']:.0f} | {r['mean_effective_batch']:.2f} | "
              f"{r['responses_per_effective']:.2f} | {at_epoch_1} | "
              + " | ".join(f"{r['knobs'][k]:.3f}" for k in knobs) + " |")


def print_runs(results: dict[str, dict]) -> None:
    print("\n| strategy | responses | effective prompts | responses / effective prompt | full-batch steps "
          "| mean passes | surplus groups | skip precision | coverage |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['responses']:.0f} | {r['effective_prompts']:.0f} | "
              f"{r['responses_per_effective']:.2f} | {r['full_batch_fraction']:.3f} | {r['mean_passes']:.2f} | "
              f"{r['surplus_groups']:.0f} | {r['skip_precision']:.3f} | {r['coverage']:.3f} |")


def sizing_markdown(tables: list[dict[str, dict[str, tuple[float, float]]]]) -> str:
    """The selector x sizer table over seeds (`sizing_table` per seed): per cell the mean efficiency vs
    the oracle / vs known_rate at the same sizer; * marks each strategy's own sizing."""
    own = {name: default_settings(name)["pass_sizing"] for name in tables[0]}
    lines = [f"Efficiency over {baseline().name}, in responses per effective prompt: share of the {bound()}'s "
             f"saving / share of {causal_bound()}'s at the same sizer (mean of {len(tables)} seed(s); * the "
             "strategy's own sizing)", "", "| strategy | " + " | ".join(SIZERS.names()) + " |",
             "|---|" + "---:|" * len(SIZERS.names())]
    for name, row in tables[0].items():
        cells = []
        for sizer in SIZERS.names():
            if sizer not in row:
                cells.append("—")
                continue
            vs_oracle, vs_known = (float(np.mean([t[name][sizer][i] for t in tables])) for i in (0, 1))
            cells.append(f"{vs_oracle:.3f} / {vs_known:.3f}" + (" *" if sizer == own[name] else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(SimSettings):
        flag = f"--{field.name.replace('_', '-')}"
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true")
        elif field.name != "seed":
            parser.add_argument(flag, type=int, default=field.default)
    parser.add_argument("--seeds", default="0", help="comma-separated; the sizer table is their mean")
    parser.add_argument("--quick", action="store_true", help="5k prompts, 80 steps")
    parser.add_argument("--levels", action="store_true", help="prompts carry an observable level (a noisy "
                        "difficulty bin; strategies that take levels also run without)")
    parser.add_argument("--sizing-only", action="store_true", help="only the selector x sizer table (and each "
                        "seed's runs behind it)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = SimSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SimSettings)
                              if f.name != "seed"}, seed=seeds[0])
    if args.quick:
        settings = dataclasses.replace(settings, num_prompts=5000, steps=80)
    started = time.perf_counter()
    tables = []
    for seed in seeds:
        seeded = dataclasses.replace(settings, seed=seed)
        results = {} if args.sizing_only else all_runs(seeded, levels=args.levels)
        if not args.sizing_only and seed == seeds[0]:
            print_tables(seeded, results, args.levels)
        grid = sizing_grid(seeded, levels=args.levels, done=results)
        print(f"\nseed {seed}: runs behind the sizer table")
        print_runs(grid)
        tables.append(sizing_table(grid))
    print(f"\nsettings: {settings}, seeds {seeds}, levels {args.levels}\n")
    print(sizing_markdown(tables))
    print(f"\nwall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
