"""The paired claim: per-seed differences to the baseline at equal budgets, costs to reach its final
accuracy, their intervals; checked against numbers worked out by hand."""

import math

import pytest

from experiments.bench import claim_report


def _records(accuracies, responses_per_step, seconds_per_step, cpu_per_step=None):
    """metrics.jsonl records: evaluations at steps 0, 2, 4, ... with `accuracies`; constant costs per step."""
    records = [{"step": 0, "eval/accuracy": accuracies[0]}]
    for step in range(1, 2 * (len(accuracies) - 1) + 1):
        record = {"step": step, "rollout/num_responses": responses_per_step * step, "time/step": seconds_per_step}
        if cpu_per_step is not None:
            record["cpu/step"] = cpu_per_step
        if step % 2 == 0:
            record["eval/accuracy"] = accuracies[step // 2]
        records.append(record)
    return records


def test_t_interval_of_the_mean():
    interval = claim_report.mean_interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # t_{0.975, 2} x sample std 1 / sqrt(3)
    assert interval["mean"] == pytest.approx(2.0) and interval["n"] == 3
    assert (interval["low"], interval["high"]) == pytest.approx((2.0 - half, 2.0 + half))
    assert math.isnan(claim_report.mean_interval([0.5])["low"])
    assert claim_report.mean_interval([float("nan"), None])["n"] == 0
    assert claim_report.t_quantile_975(100) == 1.96
    geometric = claim_report.ratio_interval([2.0, 8.0])
    assert geometric["mean"] == pytest.approx(4.0) and geometric["low"] < 4.0 < geometric["high"]


def test_cost_to_reach_interpolates_the_first_crossing():
    curves = claim_report.run_curves(_records([0.2, 0.3, 0.5, 0.4], 100, 1.0))
    # evaluations at 0, 200, 400, 600 responses; 0.4 is crossed halfway between 200 (0.3) and 400 (0.5)
    assert claim_report.cost_to_reach(curves, "responses", 0.4) == pytest.approx(300.0)
    assert claim_report.cost_to_reach(curves, "responses", 0.2) == 0.0
    assert claim_report.cost_to_reach(curves, "responses", 0.6) is None
    assert claim_report.accuracy_on_curves(curves, 3.0, "step_s") == pytest.approx(0.4)


def test_paired_claims_at_equal_budgets_and_to_the_baselines_accuracy():
    runs = {
        "ds_fixed": {0: _records([0.2, 0.3, 0.4], 300, 3.0, cpu_per_step=6.0),
                     1: _records([0.2, 0.25, 0.3], 300, 3.0, cpu_per_step=6.0)},
        "greso": {0: _records([0.2, 0.35, 0.38], 100, 2.0, cpu_per_step=3.0),
                  1: _records([0.2, 0.3, 0.32], 100, 2.0)},
    }
    result = claim_report.claims(runs, "ds_fixed")
    assert set(result) == {"greso"}
    seed0, seed1 = result["greso"]["per_seed"]["0"], result["greso"]["per_seed"]["1"]
    assert seed0["final_diff"] == pytest.approx(-0.02) and seed1["final_diff"] == pytest.approx(0.02)
    # Seed 0 at equal responses: GRESO's 400 in total; ds_fixed at 400 of its 600 per evaluation: 0.2 + 0.1 x 2/3.
    assert seed0["equal_responses_diff"] == pytest.approx(0.38 - (0.2 + 0.1 * 400 / 600))
    # At equal wall-clock: GRESO's 8 s; ds_fixed at 8 s is between its 6 s (0.3) and 12 s (0.4) evaluations.
    assert seed0["equal_wall_diff"] == pytest.approx(0.38 - (0.3 + 0.1 * 2 / 6))
    # Seed 0 never reaches ds_fixed's 0.4; seed 1 reaches its 0.3 at GRESO's step 2: 200 responses, 4 s vs
    # ds_fixed's 1,200 and 12 s.
    assert seed0["reach_responses"] is None and math.isnan(seed0["reach_responses_ratio"])
    assert seed1["reach_responses_ratio"] == pytest.approx(6.0) and seed1["reach_wall_ratio"] == pytest.approx(3.0)
    assert result["greso"]["reached_responses"] == "1/2"
    # CPU seconds only where both runs logged them: seed 0 (GRESO 12 s in all; ds_fixed's step-2 evaluation,
    # 0.3, came after 12 of its 24 CPU s).
    assert seed0["equal_cpu_diff"] == pytest.approx(0.38 - 0.3)
    assert math.isnan(seed1["equal_cpu_diff"]) and result["greso"]["equal_cpu_diff"]["n"] == 1
    # Share of the baseline's gain: (0.38 - 0.2) / 0.2 and (0.32 - 0.2) / 0.1.
    assert result["greso"]["gain_share"]["mean"] == pytest.approx((0.9 + 1.2) / 2)
    assert result["greso"]["final_diff"]["mean"] == pytest.approx(0.0, abs=1e-12)
    table = claim_report.claims_table(result, "ds_fixed")
    assert "| greso | 2 |" in table and "(1/2)" in table


def test_a_baseline_of_replicates_is_their_mean_curve():
    # Two replicates of ds_fixed on one seed: the mean curve is 0.2, 0.3, 0.4 at 300 responses a step
    # (200 and 400) and 3 s a step (2 and 4).
    runs = {
        "ds_fixed": {0: _records([0.2, 0.25, 0.35], 200, 2.0), 1: _records([0.2, 0.3, 0.4], 300, 3.0)},
        "ds_fixed@aa": {0: _records([0.2, 0.35, 0.45], 400, 4.0)},
        "greso": {0: _records([0.2, 0.35, 0.38], 100, 2.0), 1: _records([0.2, 0.3, 0.32], 100, 2.0)},
    }
    averaged = claim_report.claims(runs, "ds_fixed+ds_fixed@aa")
    assert set(averaged) == {"greso"}  # the replicates are the baseline, not rows
    assert averaged["greso"]["seeds"] == [0]  # seed 1 has one replicate only: not paired
    seed0 = averaged["greso"]["per_seed"]["0"]
    assert seed0["final_diff"] == pytest.approx(0.38 - 0.4)
    assert seed0["gain_share"] == pytest.approx((0.38 - 0.2) / (0.4 - 0.2))
    # At GRESO's 400 responses the mean curve is 2/3 of the way from 0.2 (0) to 0.3 (600).
    assert seed0["equal_responses_diff"] == pytest.approx(0.38 - (0.2 + 0.1 * 400 / 600))
    # The same as a single run with the mean curve's numbers.
    single = claim_report.paired_seed(runs["greso"][0], _records([0.2, 0.3, 0.4], 300, 3.0))
    assert seed0 == pytest.approx(single, nan_ok=True)
    # With one replicate "A+B" is the plain pairing.
    assert claim_report.claims(runs, "ds_fixed")["greso"]["per_seed"]["0"] == pytest.approx(
        claim_report.paired_seed(runs["greso"][0], runs["ds_fixed"][0]), nan_ok=True)
    assert "against the mean of 2 replicates (ds_fixed, ds_fixed@aa)" in claim_report.claims_table(
        averaged, "ds_fixed+ds_fixed@aa")
    with pytest.raises(ValueError, match="no runs named ds_fixed@bb"):
        claim_report.claims(runs, "ds_fixed+ds_fixed@bb")


def test_replicates_must_share_their_evaluations():
    short = _records([0.2, 0.3], 300, 3.0)
    with pytest.raises(ValueError, match="different steps or evaluations"):
        claim_report.mean_curves([claim_report.run_curves(_records([0.2, 0.3, 0.4], 300, 3.0)),
                                  claim_report.run_curves(short)])
