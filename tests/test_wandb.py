"""The Weights & Biases sink of greso_jax.run.records, run by the real wandb client in offline mode;
what it logged is read back from the offline run's transaction log with wandb's own protobufs."""

import glob
import json
import math
import os
import sys
import time

import pytest

wandb = pytest.importorskip("wandb", reason="wandb is an optional extra: pip install -e .[wandb] "
                                            "(requirements-test.txt pins it)")

from wandb.proto import wandb_internal_pb2  # noqa: E402

from greso_jax.config import get_config  # noqa: E402
from greso_jax.run.records import MetricsWriter, WandbSink  # noqa: E402
from greso_jax.run.trainer import Trainer  # noqa: E402
import trainer_config  # noqa: E402

_BLOCK = 32768  # the transaction log is a LevelDB-style log: 32 KiB blocks of 7-byte-headed chunks
_HEADER = 7  # b":W&B", a 2-byte magic number and a version byte before the first chunk


def _records(path):
    data = open(path, "rb").read()
    if len(data) < _HEADER:  # not written yet
        return []
    assert data[:4] == b":W&B"
    pos, pending, records = _HEADER, b"", []
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a chunk header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            records.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return records


def _finished_records(path, timeout_s=60.0):
    """The records of a run's log once its `exit` record is there: wandb's service process writes
    the log on its own schedule, and on a loaded machine `finish()` can return before it has."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = _records(path)
        if any(r.HasField("exit") for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _offline_run(wandb_dir, run_id, index=-1):
    """(run record, config dict, history lines) of an offline run with this id (the index-th one)."""
    path = sorted(glob.glob(os.path.join(wandb_dir, "wandb", f"offline-run-*-{run_id}", f"run-{run_id}.wandb")))[index]
    records = _finished_records(path)
    run = next(r.run for r in records if r.HasField("run"))
    updates = [run.config] + [r.config for r in records if r.HasField("config")]  # the run record carries the first
    config = {item.key: json.loads(item.value_json) for update in updates for item in update.update}
    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.HasField("history")]
    return run, config, history


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    os.makedirs(tmp_path / "wandb_dir")
    return str(tmp_path / "wandb_dir")


def test_lines_reach_wandb_and_a_resumed_run_keeps_its_id(tmp_path, offline, monkeypatch):
    config = get_config()
    config.logging.wandb, config.logging.wandb_project, config.logging.wandb_run_name = True, "greso-test", "run-a"
    workdir = str(tmp_path / "run")
    writer = MetricsWriter(workdir, tensorboard=False, config=config)
    writer.write(0, {"eval/accuracy": 0.25})
    writer.write(1, {"rollout/reward_mean": 0.5, "actor/loss": float("nan"), "eval/correct_counts": [1, 2],
                     "train/stopped": False})
    writer.close()
    run_id = open(os.path.join(workdir, WandbSink.ID_FILE)).read().strip()

    run, logged_config, history = _offline_run(offline, run_id)
    assert (run.project, run.display_name) == ("greso-test", "run-a")
    assert logged_config["selection"]["strategy"] == "greso"
    assert [(h["_step"], h.get("eval/accuracy"), h.get("rollout/reward_mean")) for h in history] == \
        [(0, 0.25, None), (1, None, 0.5)]
    assert not any("actor/loss" in h or "eval/correct_counts" in h or "train/stopped" in h for h in history)

    # wandb names an offline run's folder by the second it started in, so a resume within the same
    # second would share the first run's folder: the resumed run gets a wandb dir of its own.
    resumed_dir = str(tmp_path / "wandb_dir_resumed")
    os.makedirs(resumed_dir)
    monkeypatch.setenv("WANDB_DIR", resumed_dir)
    resumed = MetricsWriter(workdir, tensorboard=False, resume_step=1, config=config)
    resumed.write(2, {"rollout/reward_mean": 0.75})
    resumed.close()
    _, _, history = _offline_run(resumed_dir, run_id)  # the resumed run: same id, its own offline folder
    assert [(h["_step"], h["rollout/reward_mean"]) for h in history] == [(2, 0.75)]


def test_the_trainer_logs_every_step_with_its_config(tmp_path, offline):
    config = trainer_config.get_config("vanilla")
    config.train.num_steps = 2
    config.logging.wandb = True
    workdir = tmp_path / "greso_run"
    Trainer(config, str(workdir), log=lambda *a: None).run()
    run, logged_config, history = _offline_run(offline, (workdir / WandbSink.ID_FILE).read_text().strip())
    assert (run.project, run.display_name) == ("greso_jax", "greso_run")
    assert logged_config["rl"]["group_size"] == 4
    assert [h["_step"] for h in history] == [0, 1, 2]
    assert all(math.isfinite(h["rollout/reward_mean"]) for h in history[1:])
    assert "eval/accuracy" in history[0] and "eval/accuracy" in history[2]


def test_without_wandb_installed_the_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` meets where it is not installed
    config = get_config()
    config.logging.wandb = True
    with pytest.raises(ImportError, match=r"pip install -e \.\[wandb\]"):
        MetricsWriter(str(tmp_path), tensorboard=False, config=config)
