"""The strategy comparison's arithmetic: costs to the target accuracy, speedups, precision and the report."""

import json
import math
import os

import numpy as np
import pytest

from experiments.bench import compare_strategies
from greso_jax.run.run_stats import run_stats


def _records(accuracies, responses_per_step, seconds_per_step, **per_step):
    """A run's metrics.jsonl records: evaluation at steps 0, 2, 4, ... with the given accuracies."""
    records = [{"step": 0, "eval/accuracy": accuracies[0]}]
    for step in range(1, 2 * (len(accuracies) - 1) + 1):
        record = {"step": step, "rollout/num_responses": responses_per_step * step,
                  "rollout/num_tokens": 10 * responses_per_step * step, "time/step": seconds_per_step,
                  "time/rollout": seconds_per_step / 2, "time/update": seconds_per_step / 4,
                  "selection/zero_variance_ratio": 0.5, **per_step}
        if step % 2 == 0:
            record["eval/accuracy"] = accuracies[step // 2]
            record["time/eval"] = 100.0
        records.append(record)
    return records


def test_costs_to_the_target_and_speedups():
    runs = {
        "ds_fixed": {0: _records([0.2, 0.3, 0.41], 300, 3.0), 1: _records([0.2, 0.3, 0.39], 300, 3.0)},
        "dynamic_sampling": {0: _records([0.2, 0.4, 0.4], 200, 2.0), 1: _records([0.2, 0.39, 0.41], 200, 2.0)},
        "greso": {0: _records([0.2, 0.39, 0.4], 100, 1.0), 1: _records([0.2, 0.2, 0.3], 100, 1.0)},
    }
    result = compare_strategies.compare(runs)
    assert result["target_accuracy"] == pytest.approx(0.39)
    table = result["strategies"]
    # ds_fixed reaches 0.39 at step 4 in both seeds: 1200 responses, 12 s; adaptive DS at step 2: 400, 4 s.
    assert table["ds_fixed"]["to_target_responses"] == 1200 and table["ds_fixed"]["to_target_total_s"] == 12
    assert table["dynamic_sampling"]["to_target_responses"] == 400
    assert table["dynamic_sampling"]["speedup_responses_vs_ds_fixed"] == pytest.approx(3.0)
    assert table["dynamic_sampling"]["speedup_total_s_vs_ds_fixed"] == pytest.approx(3.0)
    # GRESO's seed 1 never reaches the target: no mean cost, no speedup.
    assert table["greso"]["reached"] == "1/2" and table["greso"]["to_target_responses"] is None
    assert table["greso"]["speedup_responses_vs_ds_fixed"] is None
    assert table["ds_fixed"]["accuracy_final"] == pytest.approx(0.40)
    assert table["ds_fixed"]["eval_s"] == pytest.approx(200.0)  # two evaluations, reported apart
    assert table["ds_fixed"]["rollout_share"] == pytest.approx(0.5)
    # Per seed (targets 0.40 and 0.38): GRESO's seed 0 reaches 0.40 at step 4, its seed 1 never reaches 0.38.
    assert table["greso"]["reached_per_seed"] == "1/2" and table["greso"]["to_seed_target_responses"] is None
    assert table["dynamic_sampling"]["reached_per_seed"] == "2/2"
    assert table["dynamic_sampling"]["to_seed_target_responses"] == 400  # both reach their target at step 2
    assert table["dynamic_sampling"]["speedup_responses_vs_ds_fixed_per_seed"] == pytest.approx(3.0)
    # At equal budgets: GRESO's runs end at 400 responses and 4 s, where ds_fixed (600 responses and 6 s at its
    # step-2 evaluation of 0.3, from 0.2) stood at 0.2 + 0.1 x 2/3 on both seeds; GRESO ended at 0.4 and 0.3.
    assert table["greso"]["baseline_at_equal_responses"] == pytest.approx(0.2 + 0.1 * 2 / 3)
    assert table["greso"]["baseline_at_equal_time"] == pytest.approx(0.2 + 0.1 * 2 / 3)
    assert table["greso"]["gain_at_equal_responses"] == pytest.approx(0.35 - (0.2 + 0.1 * 2 / 3))
    assert table["ds_fixed"]["gain_at_equal_time"] == pytest.approx(0.0)  # its own curve at its own end


def test_compilation_is_taken_out_of_the_times_and_reported_apart():
    records = _records([0.2, 0.3], 100, 4.0, **{"time/rollout_compile": 1.0, "time/update_compile": 0.5})
    stats = run_stats(records)
    assert stats["compile_s"] == pytest.approx(3.0)  # two steps
    assert stats["rollout_s"] == pytest.approx(2 * (2.0 - 1.0)) and stats["update_s"] == pytest.approx(2 * 0.5)
    assert stats["total_s"] == pytest.approx(2 * (4.0 - 1.5))


def test_consistency_and_skip_precision_are_pooled_per_run():
    records = _records([0.2, 0.3], 100, 1.0, **{"zero_variance/revisited_easy": 10, "zero_variance/repeated_easy": 9,
                                                "zero_variance/revisited_hard": 4, "zero_variance/repeated_hard": 4,
                                                "audit/easy_skips": 5, "audit/easy_zero_variance": 4,
                                                "audit/hard_skips": 5, "audit/hard_zero_variance": 5,
                                                "audit/responses": 80, "time/audit": 0.5})
    stats = run_stats(records)
    assert stats["consistency_easy"] == pytest.approx(0.9) and stats["consistency_hard"] == 1.0
    assert stats["skip_precision_easy"] == pytest.approx(0.8) and stats["skip_precision"] == pytest.approx(0.9)
    assert stats["audit_responses"] == 160 and stats["audit_s"] == pytest.approx(1.0)
    # Skips without an easy / hard prediction count in the overall precision too.
    records = _records([0.2, 0.3], 100, 1.0, **{"audit/hard_skips": 3, "audit/hard_zero_variance": 3,
                                                "audit/other_skips": 1, "audit/other_zero_variance": 0})
    stats = run_stats(records)
    assert stats["audited_other"] == 2 and stats["skip_precision"] == pytest.approx(0.75)


def test_the_comparison_needs_the_baseline_and_variants_map_to_runs(tmp_path):
    with pytest.raises(ValueError, match="ds_fixed"):
        compare_strategies.compare({"greso": {0: _records([0.2, 0.3], 100, 1.0)}})
    config, overrides = compare_strategies.run_arguments("/x/c.py", "ds_fixed", 2, ["--config.train.num_steps=5"])
    assert config == "/x/c.py:dynamic_sampling"
    assert overrides == ["--config.seed=2", "--config.selection.dynamic_sampling.pass_sizing=fixed",
                         "--config.eval.skip_audit_fraction=0.1", "--config.train.num_steps=5"]
    assert compare_strategies.run_arguments("/x/c.py:consistent", "greso", 0, [])[0] == "/x/c.py:greso,consistent"
    for strategy in ("greso", "posterior", "mopps"):
        _, overrides = compare_strategies.run_arguments("/x/c.py", strategy, 0, [])
        assert "--config.eval.skip_audit_fraction=0.1" in overrides
    assert compare_strategies.default_variants()[:3] == ["vanilla", "ds_fixed", "dynamic_sampling"]
    assert "mopps_authors" in compare_strategies.default_variants()  # beside the DS-filtered mopps
    config, overrides = compare_strategies.run_arguments("/x/c.py", "greso@observed_rate", 0, [])
    assert config == "/x/c.py:greso" and "--config.selection.greso.pass_sizing=observed_rate" in overrides
    _, overrides = compare_strategies.run_arguments("/x/c.py", "mopps_authors", 0, [])
    assert {"--config.selection.mopps.filter_groups=False",
            "--config.selection.mopps.pass_sizing=exact"} <= set(overrides)


def _finished_run(root, variant, seed, records):
    workdir = compare_strategies.run_dir(str(root), variant, seed)
    os.makedirs(workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump({"steps": records[-1]["step"]}, f)


def test_strategies_added_to_a_root_are_collected_with_its_baseline(tmp_path, capsys):
    """--strategies without ds_fixed: its earlier runs in the root are collected for the pairing; with none
    there the CLI says so in one line and exits 1 (the runs themselves are kept)."""
    _finished_run(tmp_path, "greso", 0, _records([0.2, 0.45], 100, 1.0))
    argv = ["--collect_only", "--strategies", "greso", "--seeds", "0", "--root", str(tmp_path)]
    assert compare_strategies.main(argv) == 1
    assert "ds_fixed has no finished run" in capsys.readouterr().err
    _finished_run(tmp_path, "ds_fixed", 0, _records([0.2, 0.4], 300, 3.0))
    runs = compare_strategies.collect_with_baseline(str(tmp_path), ["greso"], [0])
    assert sorted(runs) == ["ds_fixed", "greso"] and runs["ds_fixed"][0][-1]["eval/accuracy"] == 0.4
    assert compare_strategies.compare(runs)["strategies"]["greso"]["accuracy_final_vs_ds_fixed"] == pytest.approx(0.05)


def test_report_has_the_tables_plots_and_json(tmp_path):
    runs = {"ds_fixed": {0: _records([0.2, 0.4], 300, 3.0)},
            "greso": {0: _records([0.2, 0.45], 100, 1.0, **{"selection/greso/p_easy": 0.5, "selection/greso/p_hard": 0.4})}}
    result = compare_strategies.compare(runs)
    path = compare_strategies.write_report(result, runs, str(tmp_path), "python compare", notes="reduced steps")
    text = open(path).read()
    assert "| greso | 1/1 |" in text and "reduced steps" in text and "`python compare`" in text
    # The report leads with the paired claim: +0.05 final accuracy on the one seed; GRESO reaches 0.4 at 160
    # responses (0.2 -> 0.45 over its 200), ds_fixed at 600: 3.75x.
    assert text.index("**The claim, paired per seed against ds_fixed**") < text.index("**To the target**")
    assert "| greso | 1 | +0.050 (n=1) |" in text and "3.75x (n=1) (1/1)" in text
    assert json.load(open(tmp_path / "strategies.json"))["claims"]["greso"]["per_seed"]["0"]["final_diff"] == \
        pytest.approx(0.05)
    assert "**At equal budgets**" in text and "| greso | 0.45 | 200 | 0.267 | 0.183 |" in text
    for image in ("accuracy_vs_responses.png", "accuracy_vs_time.png", "zero_variance.png", "greso_knobs.png"):
        assert os.path.getsize(tmp_path / image) > 1000 and f"]({image})" in text
    assert json.load(open(tmp_path / "strategies.json"))["strategies"]["greso"]["to_target_responses"] == 200
    # Whole runs: ds_fixed 600 responses and 6 s of rollout against GRESO's 200 and 2 s.
    assert result["strategies"]["greso"]["whole_responses_vs_ds_fixed"] == pytest.approx(3.0)
    assert "| greso | +0.050 | 3x | — | 3x | — | 3x | — |" in text
    assert "**What limits the selectors here**" in text and "ds_fixed meets zero-variance groups in 50.0%" in text


def test_the_limits_section_lists_only_strategies_that_skip():
    audit = {"audit/hard_skips": 4, "audit/hard_zero_variance": 3, "selection/surplus_groups": 2}
    runs = {"ds_fixed": {0: _records([0.2, 0.4], 300, 3.0)},
            "greso": {0: _records([0.2, 0.35], 100, 1.0, **audit)}, "vanilla": {0: _records([0.2, 0.3], 50, 1.0)}}
    text = compare_strategies.limits_section(compare_strategies.compare(runs))
    assert "| greso | 0/1 | 0/1 | 3x | 3x | -0.050 | 0.75 (— / 0.75) | 4 |" in text
    assert "| vanilla |" not in text and "rollout 50.0%, update 25.0%" in text


def test_simulator_is_calibrated_to_vanilla_and_set_beside_the_trainer():
    shares = {"selection/easy_ratio": 0.3, "selection/hard_ratio": 0.4}
    runs = {"vanilla": {0: _records([0.2, 0.3, 0.35], 64, 1.0, **shares)},
            "ds_fixed": {0: _records([0.2, 0.3, 0.4], 200, 2.0, **shares)},
            "greso": {0: _records([0.2, 0.3, 0.4], 100, 1.0, **shares)},
            "greso@observed_rate": {0: _records([0.2, 0.3, 0.4], 90, 1.0, **shares)},
            "mopps_authors": {0: _records([0.2, 0.3, 0.4], 64, 1.0, **shares)}}
    config = {"data": {"arith_num_train": 300}, "train": {"num_steps": 12, "train_batch_size": 16},
              "rl": {"group_size": 8},
              "selection": {"rollout_batch_size": 24, "min_pass_size": 4, "max_passes": 6}}
    sim = compare_strategies.simulate(runs, config)
    assert sim["reference"] == "vanilla"
    assert sim["fractions"]["solved"] == pytest.approx(0.3) and sim["fractions"]["never"] == pytest.approx(0.4)
    assert sum(sim["fractions"].values()) == pytest.approx(1.0)
    rows = sim["strategies"]
    assert set(rows) == {"vanilla", "ds_fixed", "greso", "greso@observed_rate", "mopps_authors"}
    assert rows["ds_fixed"]["sim_vs_ds_fixed"] == 1.0 and rows["greso"]["trainer_vs_ds_fixed"] == pytest.approx(2.0)
    assert rows["vanilla"]["sim_responses"] == 12 * 16 * 8  # vanilla rolls out exactly one batch per step
    assert np.isnan(rows["vanilla"]["sim_efficiency_vs_oracle"])  # trains fewer informative groups: no saving
    assert rows["ds_fixed"]["sim_efficiency_vs_oracle"] == 0.0
    assert rows["mopps_authors"]["sim_responses"] == 12 * 16 * 8  # one unfiltered pass of the batch
    table = compare_strategies.simulator_table(sim)
    assert "| greso |" in table and "| greso@observed_rate |" in table
    assert "**At equal sizing**" in table and "| posterior |" in table and "observed_rate" in table


def test_repeated_groups_and_distinct_prompts_per_run():
    repeats = {"selection/repeated_groups": 3, "selection/kept": 12, "selection/batch_prompts": 5}
    stats = run_stats(_records([0.2, 0.3], 100, 1.0, **repeats))
    assert stats["repeated_share"] == pytest.approx(0.25) and stats["batch_prompts"] == 5
    older = run_stats(_records([0.2, 0.3], 100, 1.0, **{"selection/kept": 12}))
    assert math.isnan(older["repeated_share"]) and math.isnan(older["batch_prompts"])  # "—", not 0
