"""stream_staleness: which usable groups a stream step trained and which it carried, by level, from a hand-made
trace; the table of an archived run."""

import os

import numpy as np
import pytest

from experiments.bench import stream_staleness as staleness


def test_a_steps_own_groups_fill_what_the_carried_left_in_finishing_order():
    levels = np.array([0, 0, 2, 2, 3, 3])
    trace = [  # groups of 4; mixed when 0 < correct < 4
        {"step": 1, "prompt_ids": [0, 2, 4, 5], "num_correct": [1, 2, 3, 0], "num_samples": [4] * 4},
        {"step": 2, "prompt_ids": [1, 3, 4], "num_correct": [2, 4, 1], "num_samples": [4] * 3},
    ]
    # batch 2: step 1 trains prompts 0 and 2 and carries 4 (two carried in step 2 leave no room: 1 and 4 carried)
    out = staleness.carried_by_level(trace, {1: 0, 2: 2}, levels, batch=2, from_step=0)
    assert out == {0: {"usable": 2, "carried": 0.5}, 2: {"usable": 1, "carried": 0.0},
                   3: {"usable": 2, "carried": 1.0}}
    assert staleness.carried_by_level(trace, {}, levels, batch=2, from_step=1)[3] == {"usable": 1, "carried": 0.0}


def test_an_archived_stream_run_carries_its_frontier_level_most():
    run = os.path.join(os.path.dirname(__file__), "..", "experiments", "results", "2026-12-05-long-task",
                       "sixth_pass", "runs", "greso_frontier", "seed5")
    result = staleness.run_staleness(run, batch=64, from_step=150)
    assert result["batch_carried"] == pytest.approx(0.72, abs=0.005)
    assert result["levels"][3]["carried"] > 2 * result["levels"][0]["carried"]
    assert "| greso_frontier, seed 5 | 0.72 |" in staleness.table({"greso_frontier, seed 5": result})
