"""The regime check reads a run's records into the criteria a headline task is chosen by."""

from experiments.bench import regime_check


def _records(zero_variance, rollout_s=0.8, step_s=1.0, steps=200, steps_per_epoch=20, accuracy=(0.2, 0.3, 0.35)):
    records = [{"step": 0, "eval/accuracy": accuracy[0]}]
    for step in range(1, steps + 1):
        records.append({"step": step, "time/rollout": rollout_s, "time/step": step_s,
                        "time/update": step_s - rollout_s, "rollout/num_responses": 100 * step, "train/groups": 4,
                        "selection/zero_variance_ratio": zero_variance(step), "data/epoch": (step - 1) // steps_per_epoch,
                        "zero_variance/revisited_easy": 10, "zero_variance/repeated_easy": 9,
                        "zero_variance/revisited_hard": 10, "zero_variance/repeated_hard": 8})
    records[int(0.75 * steps)]["eval/accuracy"] = accuracy[1]
    records[-1]["eval/accuracy"] = accuracy[2]
    return records


def test_criteria_measured_on_the_late_half_and_the_last_quarter():
    n = regime_check.regime_numbers(_records(lambda step: 0.5 if step <= 100 else 0.8), late=0.5, group_size=5)
    assert abs(n["zero_variance_late"] - 0.8) < 1e-9
    assert abs(n["rollout_share"] - 0.8) < 1e-9 and n["consistency"] == 0.85
    assert n["epochs"] == 10 and n["steps_per_epoch"] == 20
    assert abs(n["accuracy_last_quarter_gain"] - 0.05) < 1e-9
    assert all(regime_check.verdicts(n).values())
    # 0.8 s for 100 responses, 0.2 s for 4 groups x 5 rows: a row's update costs 1.25 responses' rollout;
    # a step is 70% rollout at 7/3 x 1.25 = 2.92 responses per trained row, i.e. 66% zero variance
    assert abs(n["rollout_us_per_response"] - 8000) < 1e-6 and abs(n["update_us_per_row"] - 10000) < 1e-6
    assert abs(n["zero_variance_for_70pct"] - (1 - 1 / (7 / 3 * 1.25))) < 1e-9


def test_each_criterion_can_fail():
    n = regime_check.regime_numbers(_records(lambda step: 0.9, rollout_s=0.5, steps=100, steps_per_epoch=50,
                                             accuracy=(0.2, 0.4, 0.3)), late=0.5, group_size=5)
    met = regime_check.verdicts(n)
    assert not any(met[k] for k in ("rollout >= 70% of the step", "zero-variance 60-85% late", ">= 10 epochs",
                                    "accuracy rising in the last quarter"))
    assert met["an epoch >= 20 steps"]
