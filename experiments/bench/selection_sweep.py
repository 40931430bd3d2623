"""Sweeps one setting of a selection strategy in the selection simulator: per value, the responses,
the efficiency vs the bound, passes per step, skip precision and coverage, beside the baseline's
strategy at its defaults (adaptive Dynamic Sampling), the bound (the oracle) and any `--beside` runs.

  python experiments/bench/selection_sweep.py --levels --beside greso \
      --sweep posterior:target_zero_variance=0.15,0.12,0.08,0.04 --set posterior:step_decay=0.99
  python experiments/bench/selection_sweep.py --population headline --steps 100 \
      --sweep known_rate:target_zero_variance=0.15,0.08

Efficiency is (DS − strategy) / (DS − oracle) in responses over the run, DS being adaptive Dynamic
Sampling; issue 18's goal asks for 0.9 with passes ≤ 1.5 and skip precision and coverage at least
GRESO's (`--beside greso`), so a setting is judged on all four. `--population headline` is the headline task's
population (all-correct / all-incorrect shares 0.24 / 0.40, its batch sizes), as in
`experiments/results/2026-11-30-selection-bounds.md`; `reference` is selection_sim's default.
"""

from __future__ import annotations

import argparse
import dataclasses

from greso_jax.selection import STRATEGIES, VARIANTS, baseline, bound
from greso_jax.selection.sim import SimSettings, calibrated_fractions, efficiency, run_strategy

HEADLINE_SETTINGS = dict(num_prompts=3000, train_batch_size=64, group_size=8, rollout_batch_size=96, min_pass_size=8,
                         max_passes=6)
HEADLINE_SHARES = (0.24, 0.40)  # vanilla GRPO's all-correct / all-incorrect shares on the headline task


def parse_setting(text: str, flag: str) -> tuple[str, str, list[float]]:
    """"strategy:field=v1,v2" -> (strategy, field, [v1, v2]); a clear error naming `flag` otherwise."""
    strategy, _, rest = text.partition(":")
    field, _, values = rest.partition("=")
    try:
        numbers = [float(v) for v in values.split(",")]
    except ValueError:
        numbers = []
    if not (strategy and field and numbers):
        raise SystemExit(f"{flag}: expected STRATEGY:FIELD=V1[,V2...], got {text!r}")
    if strategy not in STRATEGIES:
        raise SystemExit(f"{flag}: unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")
    return strategy, field, numbers


def sweep(settings, fractions, strategy: str, field: str, values, fixed: dict, levels: bool,
          beside: tuple[str, ...] = ()) -> list[dict]:
    """One simulator run per value of `field` (with the `fixed` settings), after the baseline's strategy,
    the `beside` runs (strategies or variants) and the bound."""
    reference, limit = baseline().strategy, bound()
    names = dict.fromkeys((reference, *beside, limit))
    base = {name: run_strategy(name, settings, fractions, levels) for name in names}
    ds, oracle = base[reference]["responses_per_effective"], base[limit]["responses_per_effective"]
    runs = list(base.items())
    runs += [(f"{strategy} {field}={v:g}", run_strategy(strategy, settings, fractions, levels, **{**fixed, field: v}))
             for v in values]
    return [{"name": name, "responses": r["responses"],
             "efficiency": efficiency(ds, r["responses_per_effective"], oracle),
             "passes": r["mean_passes"], "skip_precision": r["skip_precision"], "coverage": r["coverage"]}
            for name, r in runs]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="STRATEGY:FIELD=V1,V2,... (a field of its settings)")
    parser.add_argument("--set", action="append", default=[], help="STRATEGY:FIELD=V held for every run of it")
    parser.add_argument("--population", choices=("reference", "headline"), default="reference")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--num-prompts", type=int, default=None, help="default: 5000 (reference), 3000 (headline)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--levels", action="store_true", help="prompts carry their class as a data level")
    parser.add_argument("--beside", default="", help="comma-separated strategies or variants to run beside")
    args = parser.parse_args(argv)
    strategy, field, values = parse_setting(args.sweep, "--sweep")
    fixed = {}
    for text in args.set:
        name, held, (value, *extra) = parse_setting(text, "--set")
        if name != strategy or extra:
            raise SystemExit(f"--set: one value of a field of the swept strategy {strategy!r}, got {text!r}")
        fixed[held] = value
    beside = tuple(name.strip() for name in args.beside.split(",") if name.strip())
    unknown = [name for name in beside if name not in STRATEGIES and name not in VARIANTS]
    if unknown:
        raise SystemExit(f"--beside: unknown {unknown} (strategies {', '.join(STRATEGIES)}; variants "
                         f"{', '.join(VARIANTS)})")
    headline = args.population == "headline"
    settings = SimSettings(**(HEADLINE_SETTINGS if headline else {}), steps=args.steps, seed=args.seed)
    settings = dataclasses.replace(settings, num_prompts=args.num_prompts or (3000 if headline else 5000))
    fractions = calibrated_fractions(*HEADLINE_SHARES) if headline else None
    rows = sweep(settings, fractions, strategy, field, values, fixed, args.levels, beside)
    print(f"settings: {settings}; population {args.population}; levels {args.levels}; held {fixed or 'none'}\n")
    print(f"| run | responses | efficiency vs {bound()} | passes | skip precision | coverage |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['name']} | {row['responses']:.0f} | {row['efficiency']:.3f} | {row['passes']:.2f} | "
              f"{row['skip_precision']:.3f} | {row['coverage']:.3f} |")


if __name__ == "__main__":
    main()
