"""The trainer in stream mode: strategies train from a lane stream, carried groups and pending prompts are
run state (a resumed run equals the uninterrupted one), grading in the background (workers) gives the
run grading at once (in-process) gives, AERO is refused."""

import json
import os
import sys

import numpy as np
import pytest

from greso_jax.config import ConfigError
from greso_jax.run.records import read_metrics
from greso_jax.run.trainer import Trainer

sys.path.insert(0, os.path.dirname(__file__))
import trainer_config  # noqa: E402

DETERMINISTIC_PREFIXES = ("rollout/", "selection/", "actor/", "eval/", "train/", "response/", "rewards/", "stream/")


def _deterministic(record):
    return {k: v for k, v in record.items() if k.startswith(DETERMINISTIC_PREFIXES) and "time" not in k
            and k != "actor/lr"}


def _stream_config(strategy, policy, in_flight="abort", steps=3, admission="fill"):
    c = trainer_config.get_config(f"{strategy},{policy}")
    c.selection.rollout_mode = "stream"
    c.selection.stream_lanes = 3
    c.selection.stream_chunk_steps = 2
    c.selection.stream_in_flight = in_flight
    c.selection.stream_admission = admission
    c.train.num_steps = steps
    return c


@pytest.mark.parametrize("strategy,lookahead", [("dynamic_sampling", 0), ("posterior", 0), ("posterior", 8)])
def test_strategies_train_from_the_stream(tmp_path, strategy, lookahead, warm_policy):
    c = _stream_config(strategy, warm_policy)
    c.selection.stream_lookahead = lookahead
    Trainer(c, str(tmp_path), log=lambda *a: None).run()
    records = read_metrics(str(tmp_path))[1:]
    assert len(records) == 3
    for r in records:
        assert r["train/groups"] <= 4 and r["rollout/step_responses"] > 0
        assert 0 < r["stream/lanes_busy_share"] <= 1 and r["stream/admitted"] >= 3
        if r["train/groups"]:
            assert np.isfinite(r["actor/loss"])
    assert sum(r["train/groups"] for r in records) > 0
    assert sum(r["stream/aborted_tokens"] for r in records) > 0  # lanes in flight at a full batch
    # Kept prompts waiting for a lane at the step's end: at most the lanes (3) without a lookahead.
    assert max(r["stream/unadmitted"] for r in records) <= (lookahead or 3)
    if lookahead:
        assert max(r["stream/unadmitted"] for r in records) > 3


@pytest.mark.slow
@pytest.mark.parametrize("in_flight,resume_at,admission", [("carry", 3, "fill"), ("abort", 2, "fill"),
                                                          ("carry", 2, "fit")])  # steps that hand on both
def test_stream_resumes_exactly(tmp_path, warm_policy, in_flight, resume_at, admission):
    config = lambda steps: _stream_config("dynamic_sampling", warm_policy, in_flight, steps, admission)  # noqa: E731
    Trainer(config(4), str(tmp_path / "full"), log=lambda *a: None).run()
    Trainer(config(resume_at), str(tmp_path / "split"), log=lambda *a: None).run()
    # resumes from the last checkpoint, carry, pending prompts and the usable share included
    Trainer(config(4), str(tmp_path / "split"), log=lambda *a: None).run()
    full, split = read_metrics(str(tmp_path / "full")), read_metrics(str(tmp_path / "split"))
    assert [r["step"] for r in split] == [r["step"] for r in full] == list(range(5))
    with open(tmp_path / "split" / "checkpoints" / str(resume_at) / "meta" / "metadata") as f:
        saved = json.load(f)
    assert saved["data_state"]["global_position"] % 24, "the resume must fall inside an epoch (24 prompts)"
    assert saved["extras"]["stream_pending"][0], "pending prompts must be saved"
    assert saved["extras"]["stream_usable_share"][1] > 0, "the step's finished groups must be saved"
    after = resume_at + 1
    assert full[resume_at]["stream/pending_out"] == full[after]["stream/pending_in"] > 0, "pending must cross"
    if in_flight == "carry" and admission == "fill":  # fit admission leaves little or nothing to carry
        assert full[resume_at]["stream/carry_out_groups"] > 0 and full[after]["stream/carried_groups"] > 0
    for a, b in zip(full, split):  # the split run also evaluated at its first run's last step
        drop = lambda r: {k: v for k, v in _deterministic(r).items() if not k.startswith("eval/")}  # noqa: E731
        assert drop(a) == drop(b), a["step"]


@pytest.mark.slow
def test_background_grading_gives_the_run_in_process_grading_gives(tmp_path, warm_policy):
    runs = {}
    for workers in (0, 2):  # 0: graded in the calling thread at submission; 2: in the pool's thread, overlapped
        c = _stream_config("dynamic_sampling", warm_policy)
        c.data.grading_workers = workers
        Trainer(c, str(tmp_path / str(workers)), log=lambda *a: None).run()
        runs[workers] = read_metrics(str(tmp_path / str(workers)))
    assert len(runs[0]) == len(runs[2]) == 4
    for a, b in zip(runs[0], runs[2]):
        assert _deterministic(a) == _deterministic(b), a["step"]
    assert sum(r["time/reward_hidden"] for r in runs[0][1:]) == 0.0  # nothing ran beside the main thread


def test_aero_is_refused_in_stream_mode(tmp_path):
    c = _stream_config("aero", "")
    with pytest.raises(ConfigError, match="selection.rollout_mode"):
        Trainer(c, str(tmp_path))
