"""engine_compare names each root's runs VARIANT@LABEL and pairs them against a baseline of any root."""

import json
import os

import pytest

from experiments.bench import engine_compare


def _write_run(workdir, accuracy_gain, rollout_s, responses_per_step):
    os.makedirs(workdir)
    records = [{"step": 0, "eval/accuracy": 0.4}]
    for step in range(1, 11):
        records.append({"step": step, "time/rollout": rollout_s, "time/update": 0.5, "time/step": rollout_s + 0.5,
                        "rollout/num_responses": responses_per_step * step, "train/groups": 4,
                        "cpu/rollout": 2 * rollout_s, "cpu/update": 0.7, "cpu/step": 2 * rollout_s + 0.7,
                        **({"eval/accuracy": 0.4 + accuracy_gain * step / 10} if step % 5 == 0 else {})})
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump({}, f)


def test_runs_of_two_roots_pair_against_each_baseline(tmp_path, capsys):
    for seed, extra in ((0, 0.0), (1, 0.01)):
        _write_run(tmp_path / "passes" / "ds_fixed" / f"seed{seed}", 0.10 + extra, 1.0, 800)
        _write_run(tmp_path / "stream" / "ds_fixed" / f"seed{seed}", 0.10 + extra, 0.8, 800)
        _write_run(tmp_path / "stream" / "greso" / f"seed{seed}", 0.09 + extra, 0.4, 400)
    os.makedirs(tmp_path / "stream" / "greso" / "seed2")  # unfinished: no summary.json, left out
    runs = engine_compare.read_runs({"passes": str(tmp_path / "passes"), "stream": str(tmp_path / "stream")})
    assert set(runs) == {"ds_fixed@passes", "ds_fixed@stream", "greso@stream"}
    assert set(runs["greso@stream"]) == {0, 1}
    engine_compare.main([f"passes={tmp_path / 'passes'}", f"stream={tmp_path / 'stream'}",
                         "--baseline", "ds_fixed@passes", "--baseline", "ds_fixed@stream"])
    out = capsys.readouterr().out
    assert out.count("**The claim, paired per seed against") == 2
    greso_rows = [line for line in out.splitlines() if line.startswith("| greso@stream | 2 |")]
    assert len(greso_rows) == 3  # the time table's row and one claim row per baseline
    assert "-0.010 [-0.010, -0.010]" in greso_rows[1]  # final accuracy: 0.09 below on both seeds
    # 4,000 responses in 4 s of rollout: 1,000 µs each; 0.4 of its 0.9 s steps
    assert "| 4,000 | 0.400 | 0.500 | 0.900 | 0.44 | 1000 |" in greso_rows[0]
    assert greso_rows[0].endswith("| 0.800 | 0.700 | 1.500 |")  # CPU seconds a step


def test_a_baseline_of_two_replicates_pairs_against_their_mean(tmp_path, capsys):
    for seed in (0, 1):
        _write_run(tmp_path / "passes" / "ds_fixed" / f"seed{seed}", 0.10, 1.0, 800)
        _write_run(tmp_path / "aa" / "ds_fixed" / f"seed{seed}", 0.12, 1.0, 800)
        _write_run(tmp_path / "passes" / "greso" / f"seed{seed}", 0.10, 0.4, 400)
    engine_compare.main([f"passes={tmp_path / 'passes'}", f"aa={tmp_path / 'aa'}",
                         "--baseline", "ds_fixed@passes+ds_fixed@aa"])
    out = capsys.readouterr().out
    assert "against the mean of 2 replicates (ds_fixed@passes, ds_fixed@aa)" in out
    claim_rows = out.split("**The claim")[1].splitlines()
    assert not any(line.startswith("| ds_fixed@") for line in claim_rows)
    greso = next(line for line in claim_rows if line.startswith("| greso@passes | 2 |"))
    assert "-0.010 [-0.010, -0.010]" in greso  # 0.50 against the mean of 0.50 and 0.52
    with pytest.raises(SystemExit):
        engine_compare.main([f"passes={tmp_path / 'passes'}", "--baseline", "ds_fixed@passes+ds_fixed@aa"])


def test_unknown_baseline_names_what_exists(tmp_path):
    _write_run(tmp_path / "passes" / "ds_fixed" / "seed0", 0.1, 1.0, 800)
    with pytest.raises(SystemExit):
        engine_compare.main([f"passes={tmp_path / 'passes'}", "--baseline", "ds_fixed@stream"])


def test_a_baseline_linked_into_a_second_root_is_read_once(tmp_path):
    _write_run(tmp_path / "passes" / "ds_fixed" / "seed0", 0.1, 1.0, 800)
    _write_run(tmp_path / "stream" / "greso" / "seed0", 0.1, 0.4, 400)
    os.symlink(tmp_path / "passes" / "ds_fixed", tmp_path / "stream" / "ds_fixed")
    runs = engine_compare.read_runs({"passes": str(tmp_path / "passes"), "stream": str(tmp_path / "stream")})
    assert set(runs) == {"ds_fixed@passes", "greso@stream"}
