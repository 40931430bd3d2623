"""The trainer in stream mode: strategies train from a lane stream, carried groups are run state (a
resumed run equals the uninterrupted one), AERO is refused."""

import sys
import os

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


def _stream_config(strategy, policy, in_flight="abort", steps=3):
    c = trainer_config.get_config(f"{strategy},{policy}")
    c.selection.rollout_mode = "stream"
    c.selection.stream_lanes = 3
    c.selection.stream_chunk_steps = 2
    c.selection.stream_in_flight = in_flight
    c.train.num_steps = steps
    return c


@pytest.mark.parametrize("strategy", ["dynamic_sampling", "posterior"])
def test_strategies_train_from_the_stream(tmp_path, strategy, warm_policy):
    Trainer(_stream_config(strategy, warm_policy), str(tmp_path), log=lambda *a: None).run()
    records = read_metrics(str(tmp_path))[1:]
    assert len(records) == 3
    for r in records:
        assert r["train/groups"] <= 4 and r["rollout/step_responses"] > 0
        assert 0 < r["stream/lanes_busy_share"] <= 1 and r["stream/admitted"] >= 3
        if r["train/groups"]:
            assert np.isfinite(r["actor/loss"])
    assert sum(r["train/groups"] for r in records) > 0
    assert sum(r["stream/aborted_tokens"] for r in records) > 0  # lanes in flight at a full batch


@pytest.mark.slow
def test_carry_resumes_exactly(tmp_path, warm_policy):
    Trainer(_stream_config("dynamic_sampling", warm_policy, "carry", steps=4), str(tmp_path / "full"),
            log=lambda *a: None).run()
    Trainer(_stream_config("dynamic_sampling", warm_policy, "carry", steps=2), str(tmp_path / "split"),
            log=lambda *a: None).run()
    Trainer(_stream_config("dynamic_sampling", warm_policy, "carry", steps=4), str(tmp_path / "split"),
            log=lambda *a: None).run()  # resumes from the step-2 checkpoint, carry included
    full, split = read_metrics(str(tmp_path / "full")), read_metrics(str(tmp_path / "split"))
    assert [r["step"] for r in split] == [r["step"] for r in full] == list(range(5))
    assert sum(r["stream/carried_groups"] for r in full[3:]) > 0, "a carried group must cross the resume"
    assert full[2]["stream/carry_out_groups"] > 0
    for a, b in zip(full, split):  # the split run also evaluated at its first run's last step
        drop = lambda r: {k: v for k, v in _deterministic(r).items() if not k.startswith("eval/")}  # noqa: E731
        assert drop(a) == drop(b), a["step"]


def test_aero_is_refused_in_stream_mode(tmp_path):
    c = _stream_config("aero", "")
    with pytest.raises(ConfigError, match="selection.rollout_mode"):
        Trainer(c, str(tmp_path))
