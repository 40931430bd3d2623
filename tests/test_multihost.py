"""Multi-host: 2 real processes x 2 CPU devices (gloo) vs 1 process x 4 devices; cross-host
resume; the selector-divergence check. Every subprocess has a timeout: a hang fails the test."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(HERE, "trainer_config.py")
TIMEOUT = 600


def _env(devices):
    return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def _launch_two(workdir, *flags, script=None):
    env = dict(_env(2), LOGDIR=str(workdir) + ".logs", DEVICES_PER_PROCESS="2")
    cmd = ["bash", os.path.join(ROOT, "launch", "local_multiprocess.sh"), "2", *flags]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    logs = "".join(open(os.path.join(env["LOGDIR"], f)).read()[-2000:] for f in os.listdir(env["LOGDIR"]))
    return result, logs


def _restore_final(workdir):
    """Step, parameters/selector (NumPy, whatever topology saved them) and meta of the newest checkpoint."""
    import json

    import jax
    import orbax.checkpoint as ocp

    root = os.path.join(workdir, "checkpoints")
    step = max(int(name) for name in os.listdir(root) if name.isdigit())
    checkpointer = ocp.PyTreeCheckpointer()
    items = {}
    for item in ("train_state", "selector"):
        path = os.path.join(root, str(step), item)
        tree = checkpointer.metadata(path).item_metadata.tree
        as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
        items[item] = checkpointer.restore(path, restore_args=as_numpy)
    with open(os.path.join(root, str(step), "meta", "metadata")) as f:
        items["meta"] = json.load(f)
    return step, items


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}/{k}"))
        return out
    return {prefix: np.asarray(tree)}


@pytest.mark.slow
def test_two_processes_match_one_process_and_resume_on_one(tmp_path, warm_policy):
    config = f"--config={CONFIG}:greso,{warm_policy}"
    two, one = tmp_path / "two", tmp_path / "one"
    result, logs = _launch_two(two, config, f"--workdir={two}", "--config.mesh.data=4",
                               "--config.train.host_check_every_steps=1")
    assert result.returncode == 0, result.stderr[-3000:] + logs
    single = subprocess.run([sys.executable, "-m", "greso_jax.train", config, f"--workdir={one}",
                             "--config.mesh.data=4"], env=_env(4), capture_output=True, text=True, timeout=TIMEOUT)
    assert single.returncode == 0, single.stderr[-3000:]

    step_two, state_two = _restore_final(str(two))
    step_one, state_one = _restore_final(str(one))
    assert step_two == step_one == 3
    params_two, params_one = _flat(state_two["train_state"]["params"]), _flat(state_one["train_state"]["params"])
    assert params_two.keys() == params_one.keys()
    for name in params_one:
        np.testing.assert_allclose(params_two[name], params_one[name], atol=1e-5, rtol=0, err_msg=name)
    assert any(not np.allclose(v, 0) for v in params_one.values())
    for key, value in state_one["selector"].items():
        np.testing.assert_array_equal(np.asarray(state_two["selector"][key]), np.asarray(value), err_msg=key)
    data_two, data_one = state_two["meta"]["data_state"], state_one["meta"]["data_state"]
    assert data_two["shard"] == [0, 2] and data_two["global_position"] == data_one["global_position"]

    # The 2-process checkpoint resumes in a single process (1 device) and extends the run.
    resumed = subprocess.run([sys.executable, "-m", "greso_jax.train", config, f"--workdir={two}",
                              "--config.train.num_steps=4"], env=_env(1), capture_output=True, text=True,
                             timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 3" in resumed.stdout + resumed.stderr
    assert _restore_final(str(two))[0] == 4


@pytest.mark.slow
def test_two_processes_stream_their_shards_agree_and_resume_exactly(tmp_path, warm_policy):
    """Stream mode on 2 processes: each host streams its own shard through its lanes, the hosts
    exchange finished groups every decode chunk, and the selector check (every step) finds them
    identical; the admissions logged are both hosts' (at least the groups observed, which came from
    both). Resumed from step 2
    (every host's shard position and pending prompts saved), the run equals an uninterrupted one."""
    from greso_jax.run.records import read_metrics

    def launch(work, steps):
        result, logs = _launch_two(work, f"--config={CONFIG}:dynamic_sampling,{warm_policy}", f"--workdir={work}",
                                   "--config.mesh.data=4", "--config.train.host_check_every_steps=1",
                                   "--config.selection.rollout_mode=stream", "--config.selection.stream_lanes=3",
                                   "--config.selection.stream_chunk_steps=2", f"--config.train.num_steps={steps}")
        assert result.returncode == 0, result.stderr[-3000:] + logs
        return result.stdout + result.stderr

    split, full = tmp_path / "stream", tmp_path / "full"
    launch(split, 2)
    records = read_metrics(str(split))[1:]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["stream/admitted"] >= r["selection/kept"] > 0 for r in records)
    assert sum(r["train/groups"] for r in records) > 0
    _, saved = _restore_final(str(split))
    assert [state["shard"] for state in saved["meta"]["data_states"]] == [[0, 2], [1, 2]]
    assert any(saved["meta"]["extras"]["stream_pending"]), "pending prompts must cross the resume"
    assert "resumed from step 2" in launch(split, 3)
    launch(full, 3)
    kept = ("rollout/", "selection/", "actor/", "train/", "rewards/", "stream/")
    for a, b in zip(read_metrics(str(full)), read_metrics(str(split)), strict=True):
        assert {k: v for k, v in a.items() if k.startswith(kept) and k != "actor/lr"} == \
            {k: v for k, v in b.items() if k.startswith(kept) and k != "actor/lr"}, a["step"]


DIVERGENCE = textwrap.dedent(r"""
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    import numpy as np
    from greso_jax.parallel.multihost import HostDivergenceError, check_identical_across_hosts
    from greso_jax.selection import GresoSelector
    selector = GresoSelector(100, seed=0)
    selector.observe(np.arange(4), np.array([[True] * 4, [False] * 4, [True, False] * 2, [True] * 4]))
    check_identical_across_hosts(selector.state_dict(), "the selector state", step=1)
    if jax.process_index() == 1:
        state = selector.state_dict()
        state["p_easy"] = 0.25  # deliberately altered on one host
        selector.load_state_dict(state)
    try:
        check_identical_across_hosts(selector.state_dict(), "the selector state", step=2)
    except HostDivergenceError as e:
        print("DIVERGED:", e)
        sys.exit(0)
    sys.exit("the divergence was not detected")
""")


def _two_scripts(script: str) -> list[tuple[int, str, str]]:
    """Runs `script` in two processes joined by jax.distributed; (exit code, stdout, stderr) of each."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", script, f"127.0.0.1:{port}", str(i)], env=_env(1),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
    return outputs


def test_divergence_check_fires_when_one_host_alters_its_selector():
    for code, out, err in _two_scripts(DIVERGENCE):
        assert code == 0, err[-2000:]
        assert "DIVERGED: step 2: the selector state differs between hosts: host(s) [1]" in out


EPOCHS = textwrap.dedent(r"""
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    from greso_jax.data import arith
    from greso_jax.data.pipeline import PromptPipeline
    from greso_jax.data.sources import load_source
    from greso_jax.models.tokenizer import CharTokenizer
    from greso_jax.parallel import multihost
    rows = load_source(source="arith", arith_num_train=24, arith_num_heldout=8)
    host = jax.process_index()
    pipeline = PromptPipeline(rows, CharTokenizer(arith.ARITH_ALPHABET), template="plain", max_prompt_length=200,
                              seed=0, shard_index=host, shard_count=2)
    pipeline.next_prompts(11 + host)  # host 1 reads all 12 of its epoch-0 prompts, host 0 one fewer
    print("EPOCHS", pipeline.epoch, pipeline.epoch_across_hosts(multihost.allgather))
""")


def test_streaming_hosts_agree_on_the_epoch():
    """Hosts streaming their shards at their own pace stand in different epochs; the step opens with the
    lowest, on every host."""
    outputs = _two_scripts(EPOCHS)
    for host, (code, out, err) in enumerate(outputs):
        assert code == 0, err[-2000:]
        assert f"EPOCHS {host} 0" in out, out
