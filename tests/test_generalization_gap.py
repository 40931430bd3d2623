"""The generalisation-gap bench (experiments/bench/generalization_gap.py): its counts on known traces,
and the script on real runs, whose held-out accuracy must reproduce the runs' own final evaluation."""

import json

import numpy as np
import pytest

from experiments.bench import generalization_gap as script
from greso_jax.run.trainer import Trainer

import trainer_config


def test_times_trained_counts_each_prompts_mixed_groups():
    trace = [{"prompt_ids": [0, 1, 2, 1], "num_correct": [2, 4, 0, 1], "num_samples": [4, 4, 4, 4]},
             {"prompt_ids": [1, 3], "num_correct": [3, 8], "num_samples": [4, 8]}]
    np.testing.assert_array_equal(script.times_trained(trace, 5), [1, 2, 0, 0, 0])


def test_the_training_draw_is_fixed_distinct_and_capped_by_the_pool():
    first, again = script.train_draw(1000, 50), script.train_draw(1000, 50)
    np.testing.assert_array_equal(first, again)
    assert np.unique(first).size == 50 and first.max() < 1000
    np.testing.assert_array_equal(script.train_draw(7, 50), np.arange(7))


def test_paired_differences_use_the_seeds_both_ran():
    run = lambda heldout, train: {"heldout": heldout, "train": train, "gap": train - heldout,  # noqa: E731
                                  "times_trained": 1.0, "never_trained": 0.5, "step": 4}
    per_run = {"ds_fixed": {0: run(0.4, 0.5), 1: run(0.5, 0.5)},
               "greso": {0: run(0.3, 0.5), 1: run(0.5, 0.6), 2: run(0.9, 0.9)}}
    (row,) = script.paired_table(per_run, "ds_fixed")
    assert row["seeds"] == 2
    assert row["heldout"]["mean"] == pytest.approx(-0.05) and row["gap"]["mean"] == pytest.approx(0.1)
    assert row["heldout"]["low"] < -0.05 < row["heldout"]["high"]
    assert "| greso | 2 | -0.050 [" in script.tables(per_run, "ds_fixed")


@pytest.mark.slow
def test_script_grades_real_runs_and_reproduces_their_final_evaluation(tmp_path, warm_policy, capsys):
    root = tmp_path / "runs"
    for strategy in ("ds_fixed", "greso"):
        config = trainer_config.get_config(f"{'dynamic_sampling' if strategy == 'ds_fixed' else strategy},"
                                           f"{warm_policy}")
        config.logging.group_trace = True
        config.train.num_steps = 2
        Trainer(config, str(root / strategy / "seed0"), log=lambda *a: None).run()
    out = tmp_path / "gap.md"
    assert script.main(["--root", str(root), "--strategies", "greso", "--seeds", "0,1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_text() in printed
    for strategy in ("ds_fixed", "greso"):
        workdir = root / strategy / "seed0"
        final = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
        accuracy = [r["eval/accuracy"] for r in final if "eval/accuracy" in r][-1]
        result = script.grade_run(str(workdir), None, 600, log=lambda *a: None)
        assert result["step"] == 2 and result["heldout"] == pytest.approx(accuracy)
        assert 0 <= result["train"] <= 1 and result["gap"] == pytest.approx(result["train"] - result["heldout"])
        assert f"| {strategy} | 0 | 2 | {result['heldout']:.4f} |" in printed
    assert "| greso | 1 |" in printed  # paired on the one seed both ran (seed 1 has no runs)
    with pytest.raises(SystemExit):
        script.main(["--root", str(tmp_path / "none"), "--strategies", "greso", "--seeds", "0"])
