"""The precise-evaluation bench (experiments/bench/precise_eval.py): its sampling-noise estimate against
simulated Bernoulli draws, its pairing, and the script on real runs (with the runs' own sample count it
reproduces their final evaluation; a second call reads its cache instead of regrading)."""

import json

import numpy as np
import pytest

from experiments.bench import archive_runs
from experiments.bench import precise_eval as script
from greso_jax.run.trainer import Trainer

import trainer_config


def test_sampling_sd_matches_the_spread_of_simulated_evaluations():
    rng = np.random.default_rng(0)
    rates = rng.choice([0.0, 1.0, 0.3, 0.7, 0.5], size=400)
    k_counted, k_eval = 256, 4
    counts = rng.binomial(k_counted, rates)
    simulated = [rng.binomial(k_eval, rates).sum() / (k_eval * rates.size) for _ in range(4000)]
    assert script.sampling_sd(counts, k_counted, k_eval) == pytest.approx(np.std(simulated), rel=0.08)
    # deterministic prompts carry no sampling noise
    assert script.sampling_sd([0, 8, 8, 0], 8, 4) == 0.0
    # more samples, less noise: sd scales as 1 / sqrt(samples)
    assert script.sampling_sd(counts, k_counted, 64) == pytest.approx(script.sampling_sd(counts, k_counted, 4) / 4)


def _graded(accuracy, recorded, counts=(2, 2)):
    return script.with_noise({"step": 4, "samples": 4, "accuracy": accuracy, "recorded": recorded,
                              "recorded_samples": 4, "correct_counts": list(counts)})


def test_paired_rows_use_the_seeds_both_graded_at_each_step():
    per_run = {"ds_fixed": {0: {4: _graded(0.5, 0.5)}, 1: {4: _graded(0.6, 0.55)}},
               "greso": {0: {4: _graded(0.45, 0.5), 8: _graded(0.5, 0.5)}, 1: {4: _graded(0.6, 0.6)},
                         2: {4: _graded(0.9, 0.9)}}}
    (row,) = script.paired_rows(per_run, "ds_fixed")  # step 8: no baseline there, no row
    assert row["step"] == 4 and row["seeds"] == [0, 1]
    assert row["per_seed"] == pytest.approx([-0.05, 0.0])
    assert row["diff"]["mean"] == pytest.approx(-0.025) and row["recorded_diff"]["mean"] == pytest.approx(0.025)
    # two prompts at p = 1/2, 4 samples (unbiased: x 4/3): var of one run 1/4 * 4/3 / (4 * 2), doubled for a pair
    assert row["sd"] == pytest.approx(np.sqrt(2 * (0.25 * 4 / 3) / 8))
    text = script.tables(per_run, "ds_fixed")
    assert "| greso | 4 | 2 | -0.025 [" in text and "-0.050, +0.000" in text


def test_replicates_of_the_baseline_pair_as_their_mean():
    first, second = _graded(0.5, 0.5, counts=(2, 2)), _graded(0.6, None, counts=(4, 0))
    both = script.averaged([first, second])
    assert both["accuracy"] == pytest.approx(0.55) and both["recorded"] is None and both["replicates"] == 2
    assert both["sd"] == pytest.approx(np.hypot(first["sd"], second["sd"]) / 2)
    per_run = {"ds_fixed": {0: {4: both}}, "greso": {0: {4: _graded(0.6, 0.6)}}}
    (row,) = script.paired_rows(per_run, "ds_fixed")
    assert row["diff"]["mean"] == pytest.approx(0.05) and row["recorded_diff"]["n"] == 0
    assert "the mean of its 2 replicates" in script.tables(per_run, "ds_fixed")


def test_bad_arguments_fail_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        script.main(["--root", str(tmp_path), "--strategies", "greso", "--samples", "1"])
    assert "--samples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["--root", str(tmp_path), "--strategies", "greso", "--steps", "4,x"])
    assert "--steps" in capsys.readouterr().err


@pytest.mark.slow
def test_script_regrades_real_runs_and_resumes_from_its_cache(tmp_path, warm_policy, capsys, monkeypatch):
    root = tmp_path / "runs"
    for strategy in ("ds_fixed", "greso"):
        config = trainer_config.get_config(f"{'dynamic_sampling' if strategy == 'ds_fixed' else strategy},"
                                           f"{warm_policy}")
        config.train.num_steps = 2
        # a held-out set large enough that the warm policy solves some of it: reproducing 0.0 would prove little
        config.data.arith_num_heldout, config.eval.num_samples = 64, 4
        Trainer(config, str(root / strategy / "seed0"), log=lambda *a: None).run()
    capsys.readouterr()  # the runs' own step lines
    samples = config.eval.num_samples
    cache, out = tmp_path / "cache.json", tmp_path / "precise.md"
    args = ["--root", str(root), "--strategies", "greso", "--seeds", "0", "--steps", "2", "--samples", str(samples),
            "--cache", str(cache), "--out", str(out)]
    assert script.main(args) == 0
    printed = capsys.readouterr().out
    assert out.read_text() in printed
    graded = json.loads(cache.read_text())
    assert len(graded) == 2
    for strategy in ("ds_fixed", "greso"):
        (entry,) = [v for k, v in graded.items() if f"/{strategy}/seed0@2x{samples}" in k]
        # the run's own sample count and seed: the run's own final evaluation, exactly
        assert entry["accuracy"] == pytest.approx(entry["recorded"]) and entry["accuracy"] > 0
        assert len(entry["correct_counts"]) == config.data.arith_num_heldout
    monkeypatch.setattr(script, "grade_checkpoint", lambda *a: pytest.fail("regraded a cached checkpoint"))
    assert script.main(args) == 0
    assert capsys.readouterr().out == printed
    # a replicate of the baseline (the same graded run under another root): the baseline is the pair's mean
    (tmp_path / "replicates").mkdir()
    (tmp_path / "replicates" / "ds_fixed").symlink_to(root / "ds_fixed")
    assert script.main([*args, "--baseline_replicates", str(tmp_path / "replicates")]) == 0
    assert "the mean of its 2 replicates" in capsys.readouterr().out
    # archived (records and grades, no checkpoints), the runs pair as before
    archive = tmp_path / "archive"
    assert archive_runs.main(["--root", str(root), "--out", str(archive), "--precise_cache", str(cache)]) == 0
    capsys.readouterr()
    assert not (archive / "greso" / "seed0" / "checkpoints").exists()
    assert script.main(["--root", str(archive), *args[2:-4]]) == 0  # neither the cache nor --out
    assert capsys.readouterr().out == printed
