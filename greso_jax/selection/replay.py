"""Replays a training run's group trace through the strategies' predictions: how well each one, from the
history before a group, ranks that group as zero-variance, on the trainer's own outcomes.

A selector's savings come from two things: which prompts its prediction ranks as zero-variance, and
how its keep rule and pass sizing act on that ranking. The simulator measures both on a synthetic
population; this measures the first on a real run. Every predictor is a registered strategy (or a
variant of one) asked through the interface, `predicted_zero_variance`, fed the trace step by step
with `observe_counts`; each step's groups are scored before any of them is observed, as one pass
would be. Measures: AUC (a random zero-variance group scored above a random informative one), the
informative share of the groups kept when each step keeps its lowest-scored share q, and for
chance predictors the Brier score and a calibration table. `hindsight` is not a predictor: it
scores each group by its prompt's success rate over all its other groups in the run, later ones
included, so it bounds what a per-prompt rate can rank.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from greso_jax.selection.registry import Variant, make_selector, named_variants, training_strategies, variant

KEEP_SHARES = (0.1, 0.2, 0.35, 0.5)
CALIBRATION_BINS = 10


def default_predictors() -> list[Variant]:
    """Every training strategy with its defaults, then every named variant (those that predict nothing
    drop out of `replay`)."""
    return [variant(name) for name in training_strategies()] + list(named_variants())


def replay(trace: list[dict], levels: np.ndarray, group_size: int,
           predictors: Sequence[Variant] | None = None) -> dict[str, dict]:
    """Scores of every traced group, per predictor that predicts: {name: {"scores", "zero_variance", "seen",
    "step", "probability"}} (arrays in trace order), and "hindsight". levels: the data's level per prompt
    id, int [num_prompts] (-1 none)."""
    selectors = {}
    for run in predictors if predictors is not None else default_predictors():
        selector = make_selector(run.strategy, num_prompts=levels.size, group_size=group_size, seed=0,
                                 settings=run.settings, prompt_levels=levels)
        if selector.predicted_zero_variance(np.zeros(0, np.int64)) is not None:
            selectors[run.name] = selector
    scores = {name: [] for name in selectors}
    seen, zero_variance, seen_before, steps = np.zeros(levels.size, bool), [], [], []
    for line in trace:
        ids = np.asarray(line["prompt_ids"], np.int64)
        correct, samples = np.asarray(line["num_correct"], np.int64), np.asarray(line["num_samples"], np.int64)
        if ids.size == 0:
            continue
        for name, selector in selectors.items():
            selector.begin_step(line["step"], epoch=line["epoch"])
            scores[name].append(np.asarray(selector.predicted_zero_variance(ids), np.float64))
            selector.observe_counts(ids, correct, samples)
            selector.end_step()
        zero_variance.append((correct == 0) | (correct == samples))
        seen_before.append(seen[ids].copy())
        steps.append(np.full(ids.size, line["step"]))
        seen[ids] = True
    flat = {"zero_variance": np.concatenate(zero_variance), "seen": np.concatenate(seen_before),
            "step": np.concatenate(steps)}
    result = {name: {**flat, "scores": np.concatenate(scores[name]), "probability": selector.prediction_is_chance}
              for name, selector in selectors.items()}
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
