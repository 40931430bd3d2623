"""Selection simulator: every registered strategy and variant through the real step driver on ~20k prompts
with drifting latent success (the world: greso_jax/selection/sim/population.py), printed as tables.

Per run: responses, effective prompts, passes, surplus, skip precision and coverage; the
efficiency of every strategy that predicts, against both baselines and the bound; each chance
predictor's calibration; and the sweep of each strategy's declared ablation (GRESO's Δp).

  python experiments/bench/selection_sim.py            # full tables (~20k prompts, 200 steps)
  python experiments/bench/selection_sim.py --quick    # a smaller run
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from greso_jax.selection import STRATEGIES, baseline, bound, default_settings
from greso_jax.selection.sim import SimSettings, all_runs, efficiency, run_strategy


def print_tables(settings: SimSettings, results: dict[str, dict], levels: bool) -> None:
    print(f"settings: {settings}")
    print("\n| strategy | responses | effective prompts | responses / effective prompt | full-batch steps "
          "| mean passes | surplus groups | skip precision | coverage |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['responses']:.0f} | {r['effective_prompts']:.0f} | "
              f"{r['responses_per_effective']:.2f} | {r['full_batch_fraction']:.3f} | {r['mean_passes']:.2f} | "
              f"{r['surplus_groups']:.0f} | {r['skip_precision']:.3f} | {r['coverage']:.3f} |")
    limit = bound()
    for base in (baseline().strategy, baseline().name):
        for name, r in results.items():
            if r["predicts"]:
                theirs, mine = results[base]["responses"], r["responses"]
                print(f"vs {base}: {name} efficiency ({base} − {name}) / ({base} − {limit}) = "
                      f"{efficiency(theirs, mine, results[limit]['responses']):.3f}; "
                      f"{base} / {name} responses = {theirs / mine:.2f}x")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(SimSettings):
        flag = f"--{field.name.replace('_', '-')}"
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=int, default=field.default)
    parser.add_argument("--quick", action="store_true", help="5k prompts, 80 steps")
    parser.add_argument("--levels", action="store_true", help="prompts carry their class as a data level "
                        "(strategies that take levels also run without)")
    args = parser.parse_args()
    settings = SimSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SimSettings)})
    if args.quick:
        settings = dataclasses.replace(settings, num_prompts=5000, steps=80)
    started = time.perf_counter()
    print_tables(settings, all_runs(settings, levels=args.levels), args.levels)
    print(f"\nwall time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
