"""logging.group_trace: groups.jsonl records every rolled-out group of a real run, agrees with its
metrics, and is cut back to the resumed step like metrics.jsonl."""

import numpy as np
import pytest

from greso_jax.run.records import GroupTraceWriter, read_group_trace, read_metrics
from greso_jax.selection.groups import Group
from greso_jax.run.trainer import Trainer

import trainer_config


def test_trace_holds_every_rolled_out_group_of_each_step(tmp_path, warm_policy):
    config = trainer_config.get_config(f"dynamic_sampling,{warm_policy}")
    config.logging.group_trace = True
    Trainer(config, str(tmp_path), log=lambda *a: None).run()
    trace, metrics = read_group_trace(str(tmp_path)), read_metrics(str(tmp_path))[1:]
    assert [line["step"] for line in trace] == [m["step"] for m in metrics] == [1, 2, 3]
    for line, m in zip(trace, metrics):
        correct, samples = np.array(line["num_correct"]), np.array(line["num_samples"])
        assert len(line["prompt_ids"]) == correct.size == samples.size > 0
        assert line["epoch"] == m["data/epoch"]
        assert samples.sum() == m["rollout/step_responses"]
        assert np.all((0 <= correct) & (correct <= samples))
        zero_variance = np.count_nonzero((correct == 0) | (correct == samples))
        assert zero_variance / correct.size == pytest.approx(m["selection/zero_variance_ratio"])
        assert all(0 <= i < config.data.arith_num_train for i in line["prompt_ids"])


def test_resume_drops_the_lines_after_the_resumed_step(tmp_path):
    group = Group.from_call(0, 0, 5, None, np.array([True, False, True]), np.zeros(3, np.float32))
    writer = GroupTraceWriter(str(tmp_path), enabled=True)
    for step in (1, 2, 3):
        writer.write(step, 0, [group])
    GroupTraceWriter(str(tmp_path), enabled=True, resume_step=2)
    assert [line["step"] for line in read_group_trace(str(tmp_path))] == [1, 2]
    assert read_group_trace(str(tmp_path))[0] == {"step": 1, "epoch": 0, "prompt_ids": [5], "num_correct": [2],
                                                 "num_samples": [3]}
    GroupTraceWriter(str(tmp_path), enabled=True)  # a fresh run starts the file anew
    assert read_group_trace(str(tmp_path)) == []


def test_a_run_without_a_trace_says_how_to_record_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="logging.group_trace=True"):
        read_group_trace(str(tmp_path))
    assert not (tmp_path / GroupTraceWriter.FILE).exists()
    GroupTraceWriter(str(tmp_path), enabled=False).write(1, 0, [])
    assert not (tmp_path / GroupTraceWriter.FILE).exists()
