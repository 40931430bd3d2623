"""The predictor replay (greso_jax.selection.replay): its measures on known data, and the script
(experiments/bench/predictor_replay.py) on a real run's trace."""

import itertools
import json

import numpy as np
import pytest

from experiments.bench import predictor_replay as script
from greso_jax.run.trainer import Trainer
from greso_jax.selection import replay as predictor_replay

import trainer_config


def _trace(rates, steps: int, group_size: int = 8, seed: int = 0):
    """Every prompt rolled out once per step at its fixed success rate."""
    rng = np.random.default_rng(seed)
    ids = list(range(len(rates)))
    return [{"step": s, "epoch": s, "prompt_ids": ids, "num_correct": rng.binomial(group_size, rates).tolist(),
             "num_samples": [group_size] * len(rates)} for s in range(1, steps + 1)]


def test_auc_counts_ties_half_and_matches_pairwise_counting():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 200).astype(float)
    positive = rng.random(200) < 0.4
    pairs = [(a, b) for a, b in itertools.product(scores[positive], scores[~positive])]
    expected = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs])
    assert predictor_replay.auc(scores, positive) == pytest.approx(expected)
    assert np.isnan(predictor_replay.auc(scores, np.ones(200, bool)))


def test_stable_rates_are_ranked_and_the_keep_share_selects_the_informative():
    rates = np.repeat([0.0, 1.0, 0.5, 0.97], 25)  # 25 each: never, always, mixed, rarely wrong
    trace = _trace(rates, steps=12)
    levels = np.full(rates.size, -1)
    replayed = predictor_replay.replay(trace, levels, 8)
    # those that predict, then the named variants that do (greso_patient and the one-sided GRESOs: GRESO's
    # streak score as their rules count it; greso_fill, greso_rested, greso_spaced, greso_frontier and
    # mopps_authors: the same predictors as greso and mopps, another adaptation, rest, revisit, floor or step
    # shape), then hindsight
    assert list(replayed) == ["greso", "mopps", "posterior", "greso_patient", "greso_fill", "greso_hard_only",
                              "greso_easy_only", "greso_rested", "greso_spaced", "greso_frontier", "mopps_authors",
                              "hindsight"]
    assert not replayed["greso"]["probability"] and replayed["mopps"]["probability"]
    rows = {r["predictor"]: r for r in predictor_replay.summarize(replayed)}
    assert rows["posterior"]["groups"] == 11 * 100  # the first step has no history
    for name in ("posterior", "hindsight"):
        assert rows[name]["auc"] > 0.85
        assert rows[name]["informative_kept_0.2"] > 0.9  # the kept fifth is the mixed quarter
    assert rows["greso"]["auc"] > 0.7 and np.isnan(rows["greso"]["brier"])  # a score, not a chance
    # Each GRESO variant is replayed with its own rule: the one-sided ones rank only one side's streaks.
    assert rows["greso_fill"]["auc"] == rows["greso_rested"]["auc"] == rows["greso"]["auc"]
    assert len({rows[n]["auc"] for n in ("greso", "greso_hard_only", "greso_easy_only")}) == 3
    base = rows["hindsight"]["informative_kept_0.5"]
    assert rows["posterior"]["informative_kept_0.2"] > base
    bins = predictor_replay.calibration(replayed["posterior"]["scores"], replayed["posterior"]["zero_variance"])
    assert sum(count for *_, count in bins) == 12 * 100
    assert all(0 <= predicted <= 1 and 0 <= observed <= 1 for _, predicted, observed, _ in bins)


def test_groups_are_split_by_their_prompts_previous_outcome():
    trace = [{"step": 1, "prompt_ids": [0, 1, 2], "num_correct": [4, 0, 2], "num_samples": [4, 4, 4]},
             {"step": 2, "prompt_ids": [0, 2], "num_correct": [3, 2], "num_samples": [4, 4]},
             {"step": 4, "prompt_ids": [1, 2, 0], "num_correct": [0, 4, 2], "num_samples": [4, 4, 4]}]
    rows = {(r["steps"], r["previous"]): r for r in predictor_replay.by_previous_outcome(trace, phases=2)}
    first = rows[("1-2", "none")]
    assert first["groups_per_step"] == 1.5 and first["informative"] == pytest.approx(1 / 3)
    assert np.isnan(first["median_gap"])
    assert rows[("1-2", "all-correct")]["informative"] == 1.0 and rows[("1-2", "mixed")]["informative"] == 1.0
    late = rows[("4-4", "mixed")]  # prompts 2 and 0, both mixed at step 2
    assert late["groups_per_step"] == 2 and late["informative"] == 0.5 and late["median_gap"] == 2
    assert rows[("4-4", "all-incorrect")]["median_gap"] == 3 and rows[("4-4", "all-incorrect")]["informative"] == 0


def test_script_replays_a_recorded_run(tmp_path, warm_policy, capsys):
    config = trainer_config.get_config(f"dynamic_sampling,{warm_policy}")
    config.logging.group_trace = True
    config.train.num_steps = 4
    Trainer(config, str(tmp_path / "run"), log=lambda *a: None).run()
    out = tmp_path / "replay.json"
    variant = "posterior:decay=0.3,fit_prior=False"
    assert script.main([str(tmp_path / "run"), "--json", str(out), "--with", variant]) == 0
    printed = capsys.readouterr().out
    assert "| greso |" in printed and "calibration of 'posterior'" in printed and "calibration of 'mopps'" in printed
    assert "| mixed |" in printed and "calibration of 'greso'" not in printed
    rows = json.loads(out.read_text())["pooled"]
    assert [r["predictor"] for r in rows] == ["greso", "mopps", "posterior", "greso_patient", "greso_fill",
                                              "greso_hard_only", "greso_easy_only", "greso_rested", "greso_spaced",
                                              "greso_frontier",
                                              "mopps_authors",
                                              "posterior decay=0.3 fit_prior=False", "hindsight"]
    assert len({r["groups"] for r in rows}) == 1 and rows[0]["groups"] > 0
    for argv in (["--predictors", "magic"], ["--with", "magic:x=1"], ["--with", "posterior:decay"]):
        with pytest.raises(SystemExit):
            script.main([str(tmp_path / "run"), *argv])
