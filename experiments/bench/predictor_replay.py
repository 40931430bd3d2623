"""Replays a training run's group trace through the selectors' predictors: how well each one, from
the history before a group, ranks that group as zero-variance, on the trainer's own outcomes.

A selector's savings come from two things: which prompts its prediction ranks as zero-variance, and
how its keep rule and pass sizing act on that ranking. The selection simulator measures both on a
synthetic population; this measures the first on a real run. Record a run whose every pulled prompt
is rolled out (ds_fixed or vanilla), so each prompt's outcomes are seen at every visit and no
predictor's own skips bias the record:

    python experiments/bench/compare_strategies.py --strategies ds_fixed --seeds 0,1,2 --root ROOT \\
        --config.logging.group_trace=True
    python experiments/bench/predictor_replay.py ROOT/ds_fixed/seed0 ROOT/ds_fixed/seed1 ...

Every predictor is the registered strategy's own class, fed the trace step by step with
`observe_counts`; each step's groups are scored before any of them is observed, as one pass would
be. Per predictor, over the groups whose prompt was rolled out before (the first visit carries no
history of its own):
- AUC: the chance that a random zero-variance group scored above a random informative one.
- Informative share kept at q: each step keeps the share q of its groups with the lowest scores
  (ties in a seeded random order); the share of kept groups that had reward variance. The first
  row gives the rate with no selection.
- Brier score and a 10-bin calibration table, for predictors that give a probability.
Per run it also splits the groups by the outcome of the prompt's previous group, in four phases of
the run: on a selector's own trace that shows where its informative groups came from.
`hindsight` is not a predictor: it scores each group by its prompt's success rate over all its
other groups in the run, later ones included, so it bounds what a per-prompt rate can rank.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Callable

import ml_collections
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from greso_jax.run.build import prompt_levels, train_rows_from_config  # noqa: E402
from greso_jax.run.records import read_group_trace  # noqa: E402
from greso_jax.selection import STRATEGIES, make_selector  # noqa: E402
from greso_jax.selection.posterior import zero_variance_chance  # noqa: E402

KEEP_SHARES = (0.1, 0.2, 0.35, 0.5)
CALIBRATION_BINS = 10


class SelectorScores:
    """A registered strategy's prediction as a score per prompt (higher: more likely zero-variance)."""

    def __init__(self, strategy: str, score: Callable, *, num_prompts: int, group_size: int, levels, settings=None,
                 probability: bool = False):
        extras = {"prompt_levels": levels} if STRATEGIES.get(strategy).uses_prompt_levels else {}
        self.selector = make_selector(strategy, num_prompts=num_prompts, group_size=group_size, seed=0,
                                      settings=settings, **extras)
        self._score, self.probability = score, probability

    def begin_step(self, step: int, epoch: int) -> None:
        self.selector.begin_step(step, epoch=epoch)

    def scores(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(self._score(self.selector, ids), np.float64)

    def observe(self, ids, num_correct, num_samples) -> None:
        self.selector.observe_counts(ids, num_correct, num_samples)
        self.selector.end_step()


def _posterior(**overrides):
    settings = ml_collections.ConfigDict(overrides)
    return lambda n, g, levels: SelectorScores("posterior", lambda s, ids: s.zero_variance_chances(ids),
                                               num_prompts=n, group_size=g, levels=levels, settings=settings,
                                               probability=True)


def _mopps(n, g, levels):
    def chance(selector, ids):
        alpha, beta = selector.posterior(ids)
        return zero_variance_chance(alpha, beta, selector.group_size)
    return SelectorScores("mopps", chance, num_prompts=n, group_size=g, levels=levels, probability=True)


def _greso_streak(n, g, levels):
    return SelectorScores("greso", lambda s, ids: np.abs(s.streak[ids]), num_prompts=n, group_size=g, levels=levels)


# name -> builder(num_prompts, group_size, levels)
PREDICTORS: dict[str, Callable] = {
    "greso streak": _greso_streak,
    "mopps posterior": _mopps,
    "posterior (default)": _posterior(),
    "posterior decay 0.3": _posterior(decay=0.3),
    "posterior decay 1.0": _posterior(decay=1.0),
    "posterior step_decay 1.0": _posterior(step_decay=1.0),
    "posterior no level prior": _posterior(level_prior=False),
    "posterior uniform prior": _posterior(fit_prior=False),
}


def load_run(workdir: str) -> tuple[list[dict], np.ndarray, int]:
    """(trace lines, level per prompt id int64 [num_prompts], group size) of a run folder."""
    trace = read_group_trace(workdir)
    with open(os.path.join(workdir, "config.json")) as f:
        config = ml_collections.ConfigDict(json.load(f))
    return trace, prompt_levels(train_rows_from_config(config)), int(config.rl.group_size)


def replay(trace: list[dict], levels: np.ndarray, group_size: int, names=None) -> dict[str, dict]:
    """Scores of every traced group, per predictor: {name: {"scores", "zero_variance", "seen", "step",
    "probability"}} (arrays in trace order)."""
    names = list(names or PREDICTORS)
    predictors = {name: PREDICTORS[name](levels.size, group_size, levels) for name in names}
    out = {name: {"scores": [], "probability": p.probability} for name, p in predictors.items()}
    seen, zero_variance, seen_before, steps = np.zeros(levels.size, bool), [], [], []
    for line in trace:
        ids = np.asarray(line["prompt_ids"], np.int64)
        correct, samples = np.asarray(line["num_correct"], np.int64), np.asarray(line["num_samples"], np.int64)
        if ids.size == 0:
            continue
        for name, predictor in predictors.items():
            predictor.begin_step(line["step"], line["epoch"])
            out[name]["scores"].append(predictor.scores(ids))
            predictor.observe(ids, correct, samples)
        zero_variance.append((correct == 0) | (correct == samples))
        seen_before.append(seen[ids].copy())
        steps.append(np.full(ids.size, line["step"]))
        seen[ids] = True
    flat = {"zero_variance": np.concatenate(zero_variance), "seen": np.concatenate(seen_before),
            "step": np.concatenate(steps)}
    result = {name: {**flat, "scores": np.concatenate(v["scores"]), "probability": v["probability"]}
              for name, v in out.items()}
    result["hindsight"] = {**flat, "scores": hindsight_scores(trace, group_size), "probability": True}
    return result


def hindsight_scores(trace: list[dict], group_size: int) -> np.ndarray:
    """Per traced group: p^G + (1-p)^G at its prompt's success rate over its other groups in the run
    (earlier and later; +0.5 / +1 smoothing), float64 in trace order."""
    ids = np.concatenate([np.asarray(line["prompt_ids"], np.int64) for line in trace])
    correct = np.concatenate([np.asarray(line["num_correct"], np.float64) for line in trace])
    samples = np.concatenate([np.asarray(line["num_samples"], np.float64) for line in trace])
    size = int(ids.max()) + 1
    total_correct = np.bincount(ids, correct, size)[ids] - correct
    total_samples = np.bincount(ids, samples, size)[ids] - samples
    rate = (total_correct + 0.5) / (total_samples + 1.0)
    return rate ** group_size + (1 - rate) ** group_size


def by_previous_outcome(trace: list[dict], phases: int = 4) -> list[dict]:
    """Where a run's informative groups came from: per phase of its steps (equal parts) and per
    outcome of the prompt's previous group (mixed, all-correct, all-incorrect, none: first visit),
    the groups per step, the share of them with reward variance and the median steps since that
    previous group. Any trace: under a selector it shows what its kept prompts were."""
    last = {}  # prompt id -> (step, outcome) of its latest group
    rows = []  # (step, previous outcome, informative, gap)
    for line in trace:
        for prompt, correct, samples in zip(line["prompt_ids"], line["num_correct"], line["num_samples"]):
            outcome = "all-correct" if correct == samples else "all-incorrect" if correct == 0 else "mixed"
            step, previous = last.get(prompt, (None, "none"))
            rows.append((line["step"], previous, outcome == "mixed", -1 if step is None else line["step"] - step))
            last[prompt] = (line["step"], outcome)
    steps = sorted({line["step"] for line in trace})
    out = []
    for part in np.array_split(np.asarray(steps), phases):
        if not part.size:
            continue
        lo, hi = int(part[0]), int(part[-1])
        for previous in ("mixed", "all-correct", "all-incorrect", "none"):
            chosen = [r for r in rows if lo <= r[0] <= hi and r[1] == previous]
            gaps = [r[3] for r in chosen if r[3] >= 0]
            out.append({"steps": f"{lo}-{hi}", "previous": previous, "groups_per_step": len(chosen) / part.size,
                        "informative": float(np.mean([r[2] for r in chosen])) if chosen else math.nan,
                        "median_gap": float(np.median(gaps)) if gaps else math.nan})
    return out


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a random positive > score of a random negative), ties counted half."""
    positives, negatives = int(positive.sum()), int((~positive).sum())
    if not positives or not negatives:
        return math.nan
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(scores.size, np.float64)
    sorted_scores = scores[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    last = np.r_[first[1:], scores.size]
    for lo, hi in zip(first, last):  # average rank over ties
        ranks[order[lo:hi]] = (lo + hi + 1) / 2.0
    return float((ranks[positive].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def informative_kept(scores, zero_variance, steps, share: float, seed: int = 0) -> float:
    """Informative share of the groups kept when each step keeps `share` of its groups with the lowest scores."""
    rng = np.random.default_rng(seed)
    kept_informative = kept = 0
    for step in np.unique(steps):
        rows = np.flatnonzero(steps == step)
        order = rows[np.lexsort((rng.random(rows.size), scores[rows]))]
        chosen = order[:math.ceil(share * rows.size)]
        kept += chosen.size
        kept_informative += int(np.count_nonzero(~zero_variance[chosen]))
    return kept_informative / kept if kept else math.nan


def calibration(scores, zero_variance, bins: int = CALIBRATION_BINS) -> list[tuple[float, float, float, int]]:
    """(bin low, mean predicted, observed zero-variance rate, groups) per non-empty bin of the predicted chance."""
    index = np.minimum((scores * bins).astype(int), bins - 1)
    return [(b / bins, float(scores[index == b].mean()), float(zero_variance[index == b].mean()),
             int(np.count_nonzero(index == b))) for b in range(bins) if np.any(index == b)]


def summarize(replayed: dict[str, dict], *, seen_only: bool = True) -> list[dict]:
    """One row per predictor: AUC, informative share kept at each KEEP_SHARES, Brier score."""
    rows = []
    for name, r in replayed.items():
        mask = r["seen"] if seen_only else np.ones(r["seen"].shape, bool)
        scores, zero_variance, steps = r["scores"][mask], r["zero_variance"][mask], r["step"][mask]
        row = {"predictor": name, "groups": int(mask.sum()), "zero_variance": float(zero_variance.mean()),
               "auc": auc(scores, zero_variance)}
        for share in KEEP_SHARES:
            row[f"informative_kept_{share}"] = informative_kept(scores, zero_variance, steps, share)
        row["brier"] = float(np.mean((scores - zero_variance) ** 2)) if r["probability"] else math.nan
        rows.append(row)
    return rows


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


def pooled(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """The replays of several runs as one (steps offset so that each run's steps stay apart)."""
    out = {}
    for name in runs[0]:
        parts = [run[name] for run in runs]
        offsets = np.cumsum([0] + [int(p["step"].max()) + 1 for p in parts[:-1]])
        out[name] = {"scores": np.concatenate([p["scores"] for p in parts]),
                     "zero_variance": np.concatenate([p["zero_variance"] for p in parts]),
                     "seen": np.concatenate([p["seen"] for p in parts]),
                     "step": np.concatenate([p["step"] + o for p, o in zip(parts, offsets)]),
                     "probability": parts[0]["probability"]}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdirs", nargs="+", help="run folders recorded with logging.group_trace=True")
    parser.add_argument("--predictors", default="", help="comma-separated names (default: all): "
                        + ", ".join(PREDICTORS))
    parser.add_argument("--calibration", default="posterior (default)",
                        help="predictor whose 10-bin calibration table is printed ('' for none)")
    parser.add_argument("--json", default="", help="write the rows (per run and pooled) here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.predictors.split(",") if n.strip()] or list(PREDICTORS)
    unknown = [n for n in names if n not in PREDICTORS]
    if unknown:
        parser.error(f"--predictors: unknown {unknown}; known: {list(PREDICTORS)}")
    runs = []
    for workdir in args.workdirs:
        trace, levels, group_size = load_run(workdir)
        runs.append(replay(trace, levels, group_size, names))
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
    if args.calibration:
        r = everything[args.calibration]
        mask = r["seen"]
        print(f"## calibration of {args.calibration!r} (groups with history)\n\n"
              "| predicted chance from | mean predicted | observed zero-variance | groups |\n|---|---|---|---|")
        for low, predicted, observed, count in calibration(r["scores"][mask], r["zero_variance"][mask]):
            print(f"| {low:.1f} | {predicted:.3f} | {observed:.3f} | {count:,} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": list(args.workdirs), "pooled": rows,
                       "per_run": [summarize(run) for run in runs]}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
