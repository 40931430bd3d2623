"""The Δp ablation runner: launch commands, collection, table and plot on synthetic metrics.jsonl files
(no training), and one real two-value sweep of two training steps each (slow)."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import ablate_delta_p as ablation

ROOT = os.path.join(os.path.dirname(__file__), "..")
SCRIPT = os.path.join(ROOT, "experiments", "ablate_delta_p.py")


def write_run(root, delta_p, records, finished=True):
    workdir = os.path.join(root, ablation.run_name(delta_p))
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    if finished:
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump({"steps": records[-1]["step"]}, f)


def synthetic_run(accuracies, responses_per_step, skipped_per_step, groups, zero_std, knobs=("greso/p_easy",
                                                                                            "greso/p_hard")):
    """Step 0 eval, then one record per step with an eval every second step; the two `knobs`
    (selection/<strategy>/<knob>) go down and up by 0.01 a step from 0.5."""
    records = [{"step": 0, "eval/accuracy": accuracies[0], "rollout/num_responses": 0, "selection/skipped_total": 0}]
    for step in range(1, len(responses_per_step) + 1):
        record = {"step": step, "rollout/num_responses": sum(responses_per_step[:step]),
                  "selection/skipped_total": sum(skipped_per_step[:step]), "train/groups": groups[step - 1],
                  "actor/frac_zero_std_groups": zero_std[step - 1], f"selection/{knobs[0]}": 0.5 - 0.01 * step,
                  f"selection/{knobs[1]}": 0.5 + 0.01 * step, "data/epoch": (step - 1) // 2}
        if step % 2 == 0:
            record["eval/accuracy"] = accuracies[step // 2]
        records.append(record)
    return records


def test_table_plot_and_json_from_synthetic_runs(tmp_path):
    root = str(tmp_path)
    write_run(root, 0.01, synthetic_run([0.2, 0.3, 0.4], [256, 192, 160, 128], [0, 10, 20, 30], [32, 32, 30, 32],
                                        [0.0, 0.0, 0.5, 0.25]))
    write_run(root, 0.05, synthetic_run([0.2, 0.25, 0.35], [256, 256, 256, 256], [0, 0, 5, 5], [32] * 4, [0.0] * 4))
    write_run(root, 0.02, synthetic_run([0.2, 0.3], [256, 256], [0, 1], [32, 32], [0, 0]), finished=False)
    messages = []
    runs = ablation.collect(root, [0.01, 0.02, 0.05], log=messages.append)
    assert sorted(runs) == [0.01, 0.05] and any("dp_0.02" in m for m in messages)
    table, rows = ablation.write_report(root, runs)
    first, second = rows
    assert first["delta_p"] == 0.01 and first["steps"] == 4
    assert first["accuracy_before"] == 0.2 and first["accuracy_final"] == 0.4
    assert first["responses_generated"] == 736 and first["prompts_skipped"] == 60
    assert first["mean_effective_batch"] == pytest.approx((32 + 32 + 15 + 24) / 4)
    assert first["final_p_easy"] == pytest.approx(0.46) and first["final_p_hard"] == pytest.approx(0.54)
    assert (first["p_easy_epoch_1"], first["p_hard_epoch_1"]) == pytest.approx((0.48, 0.52))  # after step 2
    assert second["accuracy_final"] == 0.35 and second["responses_generated"] == 1024
    assert second["mean_effective_batch"] == 32
    assert table.splitlines()[0].split() == ablation.table_columns() and len(table.splitlines()) == 4
    assert ablation.table_columns()[-4:] == ["p_easy_epoch_1", "p_hard_epoch_1", "final_p_easy", "final_p_hard"]
    assert open(tmp_path / "ablation.txt").read() == table + "\n"
    assert json.load(open(tmp_path / "ablation.json")) == json.loads(json.dumps(rows))
    assert (tmp_path / "accuracy_vs_rollouts.png").stat().st_size > 5000


def test_print_only_lists_one_command_per_value(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "--config", "experiments/arith_tiny.py:quick",
                             "--values", "0.0025,0.05", "--workdir_root", str(tmp_path / "sweep"), "--print_only",
                             "--config.train.num_steps=7"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    for value, line in zip(("0.0025", "0.05"), lines):
        assert "-m greso_jax.train --config " in line and "arith_tiny.py:quick" in line
        assert f"--config.selection.greso.delta_p={value}" in line and "--config.train.num_steps=7" in line
        assert line.endswith(os.path.join(str(tmp_path / "sweep"), f"dp_{value}"))
    assert not (tmp_path / "sweep").exists()


def test_bad_arguments_are_named(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, SCRIPT, "--workdir_root", str(tmp_path), *args], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)

    assert "--values" in run("--config", "experiments/arith_tiny.py", "--values", "0.01,x").stderr
    assert "--values" in run("--config", "experiments/arith_tiny.py", "--values", "0.01,2").stderr
    assert "no such file" in run("--config", "experiments/nope.py", "--print_only").stderr
    assert "--bogus" in run("--config", "experiments/arith_tiny.py", "--bogus=1").stderr
    empty = run("--config", "experiments/arith_tiny.py", "--collect_only")
    assert empty.returncode == 1 and "no finished runs" in empty.stderr


@pytest.mark.slow
def test_real_sweep_runs_trains_and_reports(tmp_path):
    """Two Δp values, two training steps each, on a shrunken arith_tiny; the second run reuses the
    first one's warm start; a second invocation launches nothing and rebuilds the same table."""
    root = tmp_path / "sweep"
    overrides = ["--config.train.num_steps=2", "--config.train.warmstart_steps=20", "--config.eval.every_steps=0",
                 "--config.data.arith_num_train=300", "--config.data.arith_num_heldout=32",
                 "--config.train.train_batch_size=8", "--config.rl.mini_batch_size=8",
                 "--config.rl.micro_batch_size=64", "--config.selection.rollout_batch_size=12",
                 "--config.checkpoint.async_save=false", "--config.train.quiet=true"]
    command = [sys.executable, SCRIPT, "--config", "experiments/arith_tiny.py:quick", "--values", "0.01,0.05",
               "--workdir_root", str(root), *overrides]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    logs = "".join(open(p).read() for p in root.glob("dp_*/train.log"))
    assert result.returncode == 0, result.stdout + result.stderr + logs
    assert "warm start: reusing" in (root / "dp_0.05" / "train.log").read_text()
    rows = json.load(open(root / "ablation.json"))
    assert [r["delta_p"] for r in rows] == [0.01, 0.05]
    for row in rows:
        assert row["steps"] == 2 and row["responses_generated"] > 0 and 0 <= row["accuracy_final"] <= 1
    assert (root / "accuracy_vs_rollouts.png").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0 and again.stdout.count("not launched again") == 2
    assert json.load(open(root / "ablation.json")) == rows


def test_another_knob_is_swept_and_reported_under_its_own_names(tmp_path):
    knob = "selection.posterior.target_zero_variance"
    command = ablation.launch_command("/x/c.py:posterior", 0.05, "/r/dp_0.05", ["--config.seed=1"], knob=knob)
    assert "--config.selection.posterior.target_zero_variance=0.05" in command and "--config.seed=1" in command
    assert not any("delta_p" in part for part in command)
    runs = {0.08: synthetic_run([0.2, 0.3, 0.4], [256] * 4, [0, 10, 20, 30], [32] * 4, [0.0] * 4,
                                knobs=("posterior/threshold", "posterior/calibration"))}
    table, (row,) = ablation.write_report(str(tmp_path), runs, knob)
    assert row["target_zero_variance"] == 0.08 and "delta_p" not in row
    assert row["final_threshold"] == pytest.approx(0.46) and row["final_calibration"] == pytest.approx(0.54)
    assert table.split("\n")[0].split()[:2] == ["target_zero_variance", "steps"] and "p_easy" not in table
    _, (row,) = ablation.write_report(str(tmp_path), runs, "selection.mopps.decay")  # MoPPS's knob: its tolerance
    assert row["decay"] == 0.08 and not any("p_easy" in k or "threshold" in k for k in row)
    assert math.isnan(row["final_tolerance"])  # not in these records
    _, (row,) = ablation.write_report(str(tmp_path), runs, "rl.steps")  # named like another column
    assert row["rl.steps"] == 0.08 and row["steps"] == 4
