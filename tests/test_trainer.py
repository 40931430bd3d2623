"""End-to-end trainer: every strategy, exact resume after SIGKILL, fail-fast configs, NaN guard."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from greso_jax.config import ConfigError
from greso_jax.run.records import read_group_trace, read_metrics
from greso_jax.run.trainer import Trainer

HERE = os.path.dirname(__file__)
CONFIG = os.path.join(HERE, "trainer_config.py")
sys.path.insert(0, HERE)
import trainer_config  # noqa: E402

DETERMINISTIC_PREFIXES = ("rollout/", "selection/", "actor/", "eval/", "train/", "response/", "rewards/")
NONDETERMINISTIC = ("actor/lr",)


def _deterministic(record):
    return {k: v for k, v in record.items()
            if k.startswith(DETERMINISTIC_PREFIXES) and not k.startswith("perf/") and "time" not in k}


@pytest.mark.parametrize("strategy", ["vanilla", "dynamic_sampling", "greso",
                                      pytest.param("aero", marks=pytest.mark.slow)])
def test_each_strategy_runs_three_steps(tmp_path, strategy, warm_policy):
    config = trainer_config.get_config(f"{strategy},{warm_policy}")
    if strategy == "dynamic_sampling":
        config.sampling.max_rows_per_call = 8  # passes are generated two prompts per sampler call
    summary = Trainer(config, str(tmp_path), log=lambda *a: None).run()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records[1:]:
        assert r["selection/passes"] >= 1 and r["time/step"] > 0 and r["rollout/num_responses"] > 0
        assert r["train/groups"] <= 4
        if r["train/groups"]:  # a DS/GRESO step may find no group with variance within max_passes
            assert np.isfinite(r["actor/loss"])
    assert sum(r["train/groups"] for r in records[1:]) > 0
    assert "eval/accuracy" in records[0] and "eval/accuracy" in records[-1]
    assert summary["strategy"] == strategy and summary["rollouts_generated"] == records[-1]["rollout/num_responses"]
    assert os.path.exists(tmp_path / "plots" / "accuracy.png")
    if strategy == "greso":
        # The warm policy has solved and unsolved prompts: once they have streaks, GRESO skips some.
        assert sum(r["selection/skipped_hard"] + r["selection/skipped_easy"] for r in records[2:]) > 0
    if strategy == "vanilla":
        assert all(r["selection/skipped_hard"] == 0 and r["selection/passes"] == 1 for r in records[1:])


@pytest.mark.slow
def test_refill_trains_the_run_without_it(tmp_path, warm_policy):
    """Continuous batching changes how rows are scheduled, not what is sampled: rollout passes of 6
    prompts and evaluation through 2 lanes give the plain sampler's run, step by step."""
    runs = []
    for lanes in (0, 2):
        config = trainer_config.get_config(f"dynamic_sampling,{warm_policy}")
        config.sampling.live_prompts = lanes
        Trainer(config, str(tmp_path / str(lanes)), log=lambda *a: None).run()
        runs.append([_deterministic(r) for r in read_metrics(str(tmp_path / str(lanes)))])
    plain, refilled = runs
    assert len(plain) == 4 and [set(r) for r in plain] == [set(r) for r in refilled]
    for before, after in zip(plain, refilled):
        for name, value in before.items():  # sampled log-probs agree to float32 rounding, so losses nearly
            assert after[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_bucketed_update_trains_the_padded_run_and_the_sampler_agrees_with_the_learner(tmp_path, warm_policy):
    """The same run with each update layout: the bucketed one computes fewer tokens and trains the
    same (to float32 rounding); in float32 the sampler's log-probs are the learner's to 1e-5."""
    runs = {}
    for layout in ("padded", "bucketed"):
        config = trainer_config.get_config(f"vanilla,{warm_policy}")
        config.rl.update_layout = layout
        Trainer(config, str(tmp_path / layout), log=lambda *a: None).run()
        runs[layout] = read_metrics(str(tmp_path / layout))[1:]
    for padded, bucketed in zip(runs["padded"], runs["bucketed"]):
        for record in (padded, bucketed):
            assert record["actor/logprob_mismatch"] <= 1e-5 and record["actor/logprob_mismatch_max"] <= 1e-4
        assert bucketed["actor/update_tokens"] < padded["actor/update_tokens"]
        assert bucketed["actor/update_padding_share"] < padded["actor/update_padding_share"]
        for name in ("actor/loss", "actor/grad_norm", "actor/entropy", "rollout/reward_mean"):
            assert bucketed[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-5), name


def _train_cmd(workdir, *overrides, policy=""):
    return [sys.executable, "-m", "greso_jax.train", f"--config={CONFIG}" + (f":greso,{policy}" if policy else ""),
            f"--workdir={workdir}", *overrides]


@pytest.mark.slow
@pytest.mark.parametrize("rule", [(), ("--config.selection.greso.rest_steps=2",
                                         "--config.selection.greso.revisit_steps=1",
                                         "--config.selection.greso.measured_floor=True")],
                         # the second keeps each prompt's last rollout step and the floor's counts per level
                         ids=["paper", "rest_revisit_floor"])
def test_sigkill_then_resume_reproduces_the_uninterrupted_run(tmp_path, warm_policy, rule):
    steps = ("--config.train.num_steps=6", "--config.logging.group_trace=True", *rule)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run(_train_cmd(tmp_path / "full", *steps, policy=warm_policy), check=True, timeout=600, env=env,
                   capture_output=True)
    killed = subprocess.Popen(_train_cmd(tmp_path / "killed", *steps, policy=warm_policy), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and killed.poll() is None:
        if any(r["step"] >= 3 for r in read_metrics(str(tmp_path / "killed"))):
            break
        time.sleep(0.2)
    assert killed.poll() is None, "the run finished before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    resumed = subprocess.run(_train_cmd(tmp_path / "killed", *steps, policy=warm_policy), timeout=600, env=env,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step" in resumed.stdout + resumed.stderr
    full, again = read_metrics(str(tmp_path / "full")), read_metrics(str(tmp_path / "killed"))
    assert sum(r.get("train/groups", 0) for r in full) > 0, "the run must train for the comparison to mean anything"
    assert [r["step"] for r in again] == [r["step"] for r in full] == list(range(7))
    for a, b in zip(full, again):
        assert _deterministic(a) == _deterministic(b), a["step"]
    assert read_group_trace(str(tmp_path / "killed")) == read_group_trace(str(tmp_path / "full"))


@pytest.mark.slow
def test_extending_a_finished_run_continues_it(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run(_train_cmd(tmp_path, "--config.train.num_steps=2"), check=True, timeout=600, env=env,
                   capture_output=True)
    subprocess.run(_train_cmd(tmp_path, "--config.train.num_steps=4"), check=True, timeout=600, env=env,
                   capture_output=True)
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("override,field", [
    ("--config.selection.greso.delta_p=-1", "selection.greso.delta_p"),
    ("--config.rl.group_size=1", "rl.group_size"),
    ("--config.selection.strategy=magic", "selection.strategy"),
    ("--config.data.source=jsonl", "data.path"),
])
def test_invalid_config_fails_fast_naming_the_field(tmp_path, override, field):
    start = time.time()
    result = subprocess.run(_train_cmd(tmp_path, override), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"error: {field}:" in result.stderr
    assert not os.path.exists(tmp_path / "checkpoints"), "nothing may be built before validation"
    assert time.time() - start < 60


def test_missing_data_file_is_named(tmp_path):
    config = trainer_config.get_config()
    config.data.source, config.data.path = "parquet", str(tmp_path / "absent.parquet")
    with pytest.raises(ConfigError, match=r"^data\.path: no such file: .*absent\.parquet"):
        Trainer(config, str(tmp_path / "run"))


def test_nan_loss_is_skipped_and_never_checkpointed(tmp_path):
    config = trainer_config.get_config("vanilla")
    config.train.max_bad_steps = 2
    trainer = Trainer(config, str(tmp_path), log=lambda *a: None)
    clean_update = trainer.learner.update

    def poisoned_update(batch, **kwargs):  # a NaN in the sampling log-probs makes the loss NaN
        return clean_update(batch._replace(old_logprobs=batch.old_logprobs * np.nan), **kwargs)

    trainer.learner.update = poisoned_update
    with pytest.raises(FloatingPointError, match="2 consecutive non-finite updates"):
        trainer.run()
    records = read_metrics(str(tmp_path))
    assert [r["actor/nonfinite_skipped"] for r in records[1:]] == [1, 1]
    assert trainer.checkpointer.latest_step() is None
    for leaf in __import__("jax").tree_util.tree_leaves(trainer.learner.train_state()["params"]):
        assert np.all(np.isfinite(np.asarray(leaf)))
