"""The level diagnosis on hand-made traces: training use per level, the strategy's view of ds_fixed's mixed
prompts (what it last saw, how long before), held-out accuracy per level."""

import numpy as np
import pytest

from experiments.bench import level_diagnosis as diagnosis


def _trace(rows):
    """rows: (step, prompt ids, correct counts) with groups of 4."""
    return [{"step": step, "epoch": 0, "prompt_ids": ids, "num_correct": correct, "num_samples": [4] * len(ids)}
            for step, ids, correct in rows]


LEVELS = np.array([0, 0, 2, 2, 2])  # prompts 0-1 level 0, prompts 2-4 level 2


def test_training_use_counts_mixed_groups_distinct_prompts_and_repeats_after_from_step():
    trace = _trace([(1, [2, 3], [1, 2]), (2, [2, 0], [3, 4]), (3, [2, 1], [2, 1])])
    use = diagnosis.training_use(trace, LEVELS, from_step=1)
    assert use[2] == {"mixed_per_step": 1.0, "distinct": 1, "per_prompt": 2.0}  # prompt 2 at steps 2 and 3
    assert use[0] == {"mixed_per_step": 0.5, "distinct": 1, "per_prompt": 1.0}  # prompt 1 at step 3; 0 all correct


def test_frontier_view_is_what_the_strategy_saw_last_before_the_step_and_how_long_before():
    # The strategy saw prompt 2 all incorrect at step 1, prompt 3 all correct at step 2, prompt 4 mixed at step 3;
    # ds_fixed's mixed group of prompt 4 at step 3 is the same step, not after it: never seen before.
    strategy = _trace([(1, [2], [0]), (2, [3], [4]), (3, [4], [2])])
    base = _trace([(1, [2], [1]), (3, [4], [2]), (5, [2, 3, 0], [2, 1, 4]), (9, [2], [1])])
    view = diagnosis.frontier_view(strategy, base, LEVELS, from_step=1)
    assert set(view) == {2}  # prompt 0's group was all correct: not frontier
    level2 = view[2]
    assert level2["seen_hard"] == pytest.approx(0.5) and level2["seen_easy"] == pytest.approx(0.25)
    assert level2["seen_never"] == pytest.approx(0.25) and level2["seen_mixed"] == 0
    assert level2["hard_age"] == pytest.approx(6.0)  # steps 5 and 9, seen at step 1: ages 4 and 8


def test_held_out_accuracy_per_level_and_a_size_mismatch_is_named():
    accuracy = diagnosis.held_out_by_level([4, 2, 0, 8], samples=8, levels=np.array([0, 0, 3, 3]))
    assert accuracy == {0: pytest.approx(0.375), 3: pytest.approx(0.5)}
    with pytest.raises(ValueError, match="3 graded prompts but 4 levels"):
        diagnosis.held_out_by_level([1, 2, 3], samples=8, levels=np.array([0, 0, 3, 3]))


def test_table_has_a_row_per_strategy_and_level():
    result = {"greso": {0: {2: {"mixed_per_step": 1.0, "base_mixed_per_step": 2.0, "seen_hard": 0.5}},
                        1: {2: {"mixed_per_step": 3.0, "base_mixed_per_step": 2.0, "seen_hard": 0.7}}}}
    text = diagnosis.table(result, from_step=250)
    assert "steps after 250" in text
    assert "| greso | 2 | 2 | 2.0 [2.0, 2.0] | 2.0 [-10.7, 14.7] |" in text


def test_archived_runs_give_the_committed_diagnosis():
    """Two runs archived by archive_runs.py (records, traces, config and precise grades, no checkpoints) read
    back into the sixth pass's committed row: greso_frontier in stream mode, seed 5, level 2."""
    import os

    archive = os.path.join(os.path.dirname(__file__), "..", "experiments", "results", "2026-12-05-long-task",
                           "sixth_pass", "runs")
    run, base = (os.path.join(archive, name, "seed5") for name in ("greso_frontier", "ds_fixed"))
    levels, held_out_levels = diagnosis.run_levels(run)
    row = diagnosis.paired(run, base, levels, held_out_levels, from_step=250, cache={}, step=400, samples=64)[2]
    assert (row["distinct"], row["base_distinct"]) == (1545, 1832)
    assert row["base_held_out"] == pytest.approx(0.625, abs=5e-4)
    assert row["held_out_diff"] == pytest.approx(-0.176, abs=5e-4)
