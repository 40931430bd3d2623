"""Where a selector's per-step deficit sits, level by level, paired with ds_fixed on the same seed.

  python experiments/bench/level_diagnosis.py --root runs/long --strategies greso@fixed --seeds 5,6 \
      [--from_step 250] [--cache precise.json --step 400 --samples 64] [--per_seed] [--out FILE.md]

For arithmetic tasks, whose rows carry a difficulty level. Runs are ROOT/VARIANT/seedS with
logging.group_trace on. Per strategy and level, over the steps after --from_step:
  - what it trains on: mixed groups a step, distinct prompts with a mixed group, mixed groups per such
    prompt (a selector that keeps few prompts trains the same ones again and again);
  - its view of the frontier: for each mixed group ds_fixed rolled out at a step, what the strategy had
    last seen of that prompt before that step (all incorrect, all correct, mixed, never) and, for the all
    incorrect ones, how many steps before (median). A selector skips on that view, so an informative
    prompt it last saw all incorrect long ago is frontier it does not find;
  - with --cache (precise_eval.py's graded checkpoints): the held-out accuracy per level at --step, the
    strategy's minus ds_fixed's.
Means over seeds with Student-t 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Sequence

import numpy as np

from experiments.bench.claim_report import mean_interval, print_and_save
from experiments.bench.precise_eval import archive_key, archived_grades, cache_key, is_archived, load_cache
from greso_jax.run.records import read_group_trace
from greso_jax.selection import baseline

BASELINE = baseline().name
VIEWS = ("hard", "easy", "mixed", "never")


def run_levels(workdir: str) -> tuple[np.ndarray, np.ndarray]:
    """(level of each training prompt by prompt id, int [num_prompts]; level of each held-out prompt, int [E])
    from the run's saved config (an archived run's config.json)."""
    import ml_collections

    from greso_jax.evaluate import resolve_checkpoint, run_config
    from greso_jax.run.build import rows_from_config

    if is_archived(workdir):
        with open(os.path.join(workdir, "config.json")) as f:
            config = ml_collections.ConfigDict(json.load(f))
    else:
        config = run_config(resolve_checkpoint(workdir, log=lambda *a: None), None)
    train_rows, eval_sets = rows_from_config(config)
    train = np.full(max(r.prompt_id for r in train_rows) + 1, -1, np.int64)
    for row in train_rows:
        train[row.prompt_id] = row.difficulty
    held_out = np.array([row.difficulty for row in eval_sets.get("synthetic", [])], np.int64)
    return train, held_out


def _outcomes(row: dict) -> tuple[np.ndarray, list[str]]:
    correct, samples = np.asarray(row["num_correct"]), np.asarray(row["num_samples"])
    kinds = np.where(correct == samples, "easy", np.where(correct == 0, "hard", "mixed"))
    return np.asarray(row["prompt_ids"], np.int64), kinds.tolist()


def training_use(trace: Sequence[dict], levels: np.ndarray, from_step: int) -> dict[int, dict]:
    """Per level: mixed groups a step, distinct prompts with a mixed group, mixed groups per such prompt,
    over the trace's steps after `from_step`."""
    steps = {row["step"] for row in trace if row["step"] > from_step}
    mixed: dict[int, list[int]] = {}
    for row in trace:
        if row["step"] <= from_step:
            continue
        ids, kinds = _outcomes(row)
        for prompt, kind in zip(ids.tolist(), kinds):
            if kind == "mixed":
                mixed.setdefault(int(levels[prompt]), []).append(prompt)
    return {level: {"mixed_per_step": len(prompts) / max(len(steps), 1), "distinct": len(set(prompts)),
                    "per_prompt": len(prompts) / len(set(prompts))} for level, prompts in mixed.items()}


def frontier_view(trace: Sequence[dict], base_trace: Sequence[dict], levels: np.ndarray,
                  from_step: int) -> dict[int, dict]:
    """Per level, over ds_fixed's mixed groups after `from_step`: the share the strategy had last seen (before
    that step) all incorrect / all correct / mixed / never, and the median age in steps of the all-incorrect
    sightings. Both traces in step order."""
    last_seen: dict[int, tuple[str, int]] = {}
    counts: dict[int, dict[str, int]] = {}
    hard_ages: dict[int, list[int]] = {}
    position = 0
    for row in base_trace:
        step = row["step"]
        while position < len(trace) and trace[position]["step"] < step:
            ids, kinds = _outcomes(trace[position])
            for prompt, kind in zip(ids.tolist(), kinds):
                last_seen[prompt] = (kind, trace[position]["step"])
            position += 1
        if step <= from_step:
            continue
        ids, kinds = _outcomes(row)
        for prompt, kind in zip(ids.tolist(), kinds):
            if kind != "mixed":
                continue
            level = int(levels[prompt])
            seen, when = last_seen.get(prompt, ("never", step))
            tally = counts.setdefault(level, dict.fromkeys(VIEWS, 0))
            tally[seen] += 1
            if seen == "hard":
                hard_ages.setdefault(level, []).append(step - when)
    out = {}
    for level, tally in counts.items():
        total = sum(tally.values())
        out[level] = {f"seen_{view}": tally[view] / total for view in VIEWS}
        ages = hard_ages.get(level)
        out[level]["hard_age"] = float(np.median(ages)) if ages else float("nan")
    return out


def held_out_by_level(correct_counts: Sequence[int], samples: int, levels: np.ndarray) -> dict[int, float]:
    """Held-out accuracy per level from a graded checkpoint's per-prompt correct counts [E]."""
    counts = np.asarray(correct_counts, np.float64)
    if counts.shape != levels.shape:
        raise ValueError(f"held-out set: {counts.size} graded prompts but {levels.size} levels")
    return {int(level): float(counts[levels == level].mean() / samples) for level in np.unique(levels)}


def _graded(workdir: str, cache: dict, step: int, samples: int) -> dict | None:
    """A run's graded checkpoint at `step`: from its archive's grades, else from precise_eval.py's cache."""
    if is_archived(workdir):
        return archived_grades(workdir).get(archive_key(step, samples))
    return cache.get(cache_key(workdir, step, samples))


def paired(workdir: str, base_workdir: str, levels: np.ndarray, held_out_levels: np.ndarray, from_step: int,
           cache: dict, step: int, samples: int) -> dict[int, dict]:
    """Per level: the strategy's and ds_fixed's training use, the strategy's view of ds_fixed's frontier and,
    when both checkpoints are in `cache`, the held-out accuracy difference."""
    trace, base_trace = read_group_trace(workdir), read_group_trace(base_workdir)
    mine, base = training_use(trace, levels, from_step), training_use(base_trace, levels, from_step)
    view = frontier_view(trace, base_trace, levels, from_step)
    graded = [_graded(d, cache, step, samples) for d in (workdir, base_workdir)]
    accuracy = ([held_out_by_level(g["correct_counts"], samples, held_out_levels) for g in graded]
                if all(graded) else None)
    out = {}
    for level in sorted(set(base) | set(mine)):
        empty = {"mixed_per_step": 0.0, "distinct": 0, "per_prompt": float("nan")}
        row = {**mine.get(level, empty), **{f"base_{k}": v for k, v in base.get(level, empty).items()},
               **view.get(level, {})}
        if accuracy is not None and level in accuracy[1]:
            row["held_out_diff"] = accuracy[0][level] - accuracy[1][level]
            row["base_held_out"] = accuracy[1][level]
        out[level] = row
    return out


COLUMNS = (("base_mixed_per_step", f"{BASELINE} mixed / step", 1), ("mixed_per_step", "mixed / step", 1),
           ("base_distinct", f"{BASELINE} distinct", 0), ("distinct", "distinct", 0),
           ("base_per_prompt", f"{BASELINE} per prompt", 1), ("per_prompt", "per prompt", 1),
           ("seen_hard", "seen all incorrect", 2), ("seen_easy", "seen all correct", 2),
           ("seen_mixed", "seen mixed", 2), ("seen_never", "never seen", 2), ("hard_age", "age of all incorrect", 0),
           ("base_held_out", f"{BASELINE} held-out", 3), ("held_out_diff", "held-out Δ", 3))


def _cell(values: list[float], digits: int) -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "—"
    interval = mean_interval(values)
    if interval["n"] < 2:
        return f"{interval['mean']:.{digits}f}"
    return f"{interval['mean']:.{digits}f} [{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def table(result: dict[str, dict[int, dict[int, dict]]], from_step: int) -> str:
    lines = [f"**By level, steps after {from_step}, against {BASELINE}** (mean over seeds [95% t interval]; "
             f"'seen …': what the strategy had last seen of the prompts {BASELINE} found mixed; age in steps)", "",
             "| strategy | level | seeds | " + " | ".join(label for _, label, _ in COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(COLUMNS)]
    for name, seeds in result.items():
        for level in sorted({lv for per_level in seeds.values() for lv in per_level}):
            rows = [per_level[level] for per_level in seeds.values() if level in per_level]
            cells = [_cell([r.get(key) for r in rows], digits) for key, _, digits in COLUMNS]
            lines.append(f"| {name} | {level} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--strategies", default="greso@fixed")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--from_step", type=int, default=0, help="only steps after this one")
    parser.add_argument("--cache", default="", help="precise_eval.py's --cache, for held-out accuracy per level")
    parser.add_argument("--step", type=int, default=400, help="the graded checkpoint's step")
    parser.add_argument("--samples", type=int, default=64, help="the graded checkpoint's samples a prompt")
    parser.add_argument("--per_seed", action="store_true", help="a row per seed instead of means over seeds")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    cache = load_cache(args.cache)
    result: dict[str, dict[int, dict[int, dict]]] = {}
    for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
        base_workdir = os.path.join(args.root, BASELINE, f"seed{seed}")
        if not os.path.exists(os.path.join(base_workdir, "summary.json")):
            print(f"  {base_workdir}: not finished, seed {seed} left out", file=sys.stderr)
            continue
        levels, held_out_levels = run_levels(base_workdir)
        for strategy in (s.strip() for s in args.strategies.split(",") if s.strip()):
            workdir = os.path.join(args.root, strategy, f"seed{seed}")
            if not os.path.exists(os.path.join(workdir, "summary.json")):
                print(f"  {workdir}: not finished, left out", file=sys.stderr)
                continue
            name = f"{strategy}, seed {seed}" if args.per_seed else strategy
            result.setdefault(name, {})[seed] = paired(workdir, base_workdir, levels, held_out_levels,
                                                           args.from_step, cache, args.step, args.samples)
    print_and_save(table(result, args.from_step), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
