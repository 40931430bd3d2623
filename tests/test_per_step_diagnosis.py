"""The per-step diagnosis: gap, coverage, signal, frontier, entropy and re-rolls of a run against
ds_fixed's on the same seed, and an ablation's paired effect, on hand-made runs."""

import json
import os

import pytest

from experiments.bench import per_step_diagnosis as diagnosis


def _write_run(directory, accuracies, trace, **per_step):
    os.makedirs(directory)
    records = [{"step": 0, "eval/accuracy": accuracies[0]}]
    for step, accuracy in enumerate(accuracies[1:], start=1):
        records.append({"step": step, "eval/accuracy": accuracy, "rollout/num_responses": 8 * step,
                        "time/step": 1.0, **per_step})
    with open(os.path.join(directory, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    with open(os.path.join(directory, "groups.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in trace)
    with open(os.path.join(directory, "summary.json"), "w") as f:
        json.dump({}, f)


def _trace(rows):
    return [{"step": i + 1, "epoch": 0, "prompt_ids": ids, "num_correct": correct, "num_samples": [4] * len(ids)}
            for i, (ids, correct) in enumerate(rows)]


def test_gap_and_candidates_against_the_baseline_and_an_ablations_effect(tmp_path):
    # ds_fixed: prompts 1, 2, 3 mixed (p = 1/2, 1/4, 1/2), prompt 0 all correct; GRESO: prompts 1 and 1 again
    # mixed (p = 1/2, 3/4); its audit rolled out 4 easy skips, 1 of them informative.
    base = _trace([([0, 1, 2], [4, 2, 1]), ([3], [2])])
    greso = _trace([([1], [2]), ([1, 0], [3, 4])])
    for seed, (acc_base, acc_greso) in enumerate([([0.2, 0.3, 0.4], [0.2, 0.25, 0.3]),
                                                  ([0.2, 0.3, 0.3], [0.2, 0.3, 0.35])]):
        _write_run(tmp_path / "ds_fixed" / f"seed{seed}", acc_base, base,
                   **{"actor/entropy": 0.2, "selection/batch_groups": 64})
        _write_run(tmp_path / "greso" / f"seed{seed}", acc_greso, greso,
                   **{"actor/entropy": 0.1, "audit/easy_skips": 2, "audit/easy_zero_variance": 1.5,
                      "selection/skipped_easy": 10, "selection/kept": 4, "selection/repeated_groups": 1,
                      "selection/batch_groups": 56})
        _write_run(tmp_path / "greso_patient" / f"seed{seed}", acc_base, base)
    result = diagnosis.diagnose({"": str(tmp_path)}, ["greso", "greso_patient", "mopps"], [0, 1], log=lambda *a: None)
    assert set(result) == {"greso", "greso_patient"}  # no mopps runs
    seed0, seed1 = result["greso"][0], result["greso"][1]
    assert seed0["gap"] == pytest.approx((-0.05 - 0.1) / 2) and seed1["gap"] == pytest.approx(0.025)
    assert seed0["final_diff"] == pytest.approx(-0.1)
    assert seed0["coverage"] == pytest.approx(1 / 3)  # one distinct mixed prompt against three
    assert seed0["batch_fill"] == pytest.approx(56 / 64)
    assert seed0["concentration"] == 2 and seed0["concentration_baseline"] == 1
    assert seed0["spacing"] == 1  # prompt 1 mixed at steps 1 and 2; ds_fixed trains no prompt twice
    assert seed0["spacing_baseline"] != seed0["spacing_baseline"]  # NaN
    assert seed0["signal"] == pytest.approx((0.25 + 0.1875) / 2)
    assert seed0["signal_baseline"] == pytest.approx((0.25 + 0.1875 + 0.25) / 3)
    assert seed0["frontier_informative_share"] == pytest.approx(0.25)
    assert seed0["entropy"] == pytest.approx(0.1) and seed0["entropy_baseline"] == pytest.approx(0.2)
    assert seed0["reroll_share"] == pytest.approx(0.25)
    text = diagnosis.tables(result, [("greso_patient", "greso")])
    # greso_patient equals ds_fixed (gap 0): its effect over GRESO is minus GRESO's gap, -(-0.075 + 0.025) / 2.
    assert "| greso_patient | greso | 2 | 0.025 [" in text
    assert "| greso | 2 | -0.025 [" in text


def test_the_gap_by_stretch_of_the_run(tmp_path):
    # GRESO 0.05 behind at step 1 and 0.15 behind at steps 2 and 3; it rolls out half of ds_fixed's responses
    # from step 2 on; its audit finds 1 of 4 easy skips informative at step 1 and 3 of 4 at steps 2-3.
    trace = _trace([([0, 1], [2, 1])])
    _write_run(tmp_path / "ds_fixed" / "seed0", [0.2, 0.3, 0.4, 0.5], trace)
    _write_run(tmp_path / "greso" / "seed0", [0.2, 0.25, 0.25, 0.35], trace)
    records = [json.loads(line) for line in open(tmp_path / "greso" / "seed0" / "metrics.jsonl")]
    for r in records[1:]:
        r["rollout/num_responses"] = {1: 8, 2: 12, 3: 16}[r["step"]]
        r["audit/easy_skips"], r["audit/easy_zero_variance"] = 4, (3 if r["step"] == 1 else 1)
    with open(tmp_path / "greso" / "seed0" / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    result = diagnosis.diagnose({"": str(tmp_path)}, ["greso"], [0], log=lambda *a: None, split_at=[1])
    first, rest = result["greso"][0]["stretches"]
    assert first["gap"] == pytest.approx(-0.05) and rest["gap"] == pytest.approx(-0.15)
    assert first["responses_ratio"] == pytest.approx(1.0) and rest["responses_ratio"] == pytest.approx(16 / 8)
    assert first["frontier_informative_share"] == pytest.approx(0.25)
    assert rest["frontier_informative_share"] == pytest.approx(0.75)
    text = diagnosis.tables(result, [], split_at=[1])
    assert "| greso | 1-1 | 1 | -0.050 (n=1) | 1.00 (n=1) | 0.250 (n=1) |" in text
    assert "| greso | 2-end | 1 | -0.150 (n=1) | 2.00 (n=1) | 0.750 (n=1) |" in text
