"""Preemption with real signals sent to real train CLI processes: SIGTERM and SIGINT stop after the
step in flight with a verified checkpoint, one line and exit status 143 / 130; the relaunch resumes
and writes the same metrics rows as a run that was never stopped; a second Ctrl-C exits at once; on
two processes a SIGTERM that reaches one host stops both after the same step."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from fault_harness import CONFIG, ENV, ROOT
from greso_jax.run.checkpoint import step_damage

NUM_STEPS = 30  # long enough that a signal sent after step 2 lands well before the end
TIMEOUT = 600
# Checkpoints only at the end: what a stopped run resumes from is the checkpoint the stop wrote.
FLAGS = [f"--config={CONFIG}", f"--config.train.num_steps={NUM_STEPS}", "--config.checkpoint.every_steps=100"]


def _train_command(workdir, *extra):
    return [sys.executable, "-m", "greso_jax.train", *FLAGS, f"--workdir={workdir}", *extra]


def _rows(workdir):
    """metrics.jsonl without wall and CPU seconds (the only fields that differ between identical runs)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "cpu/"))} for line in f]


def _wait_for_step(workdir, step, process, timeout=TIMEOUT):
    """Polls metrics.jsonl until it holds a row of `step` or later (fails if the process ends first)."""
    path = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before it could be signalled"
        if os.path.exists(path):
            with open(path) as f:
                steps = [json.loads(line)["step"] for line in f if line.endswith("\n")]
            if steps and steps[-1] >= step:
                return
        time.sleep(0.05)
    raise AssertionError(f"no metrics row of step {step} within {timeout} s")


def _stopped_step(stderr, name):
    """The step named in the stop line, which must be stderr's last line."""
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"stopped by {name} after step "), stderr[-3000:]
    assert "resume with: python -m greso_jax.train" in line and "Traceback" not in stderr, line
    return int(line.split("after step ")[1].split()[0])


def _assert_verified_checkpoint(workdir, step):
    folder = os.path.join(workdir, "checkpoints", str(step))
    assert os.path.exists(os.path.join(folder, "manifest.json")), os.listdir(folder)
    assert step_damage(folder) is None


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted") / "run"
    done = subprocess.run(_train_command(workdir), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return _rows(workdir)


@pytest.mark.slow
@pytest.mark.parametrize("signum, name, code", [(signal.SIGTERM, "SIGTERM", 143), (signal.SIGINT, "SIGINT", 130)])
def test_a_signal_stops_after_the_step_in_flight_and_the_resume_is_exact(tmp_path, uninterrupted, signum, name,
                                                                         code):
    workdir = tmp_path / "run"
    # Its own process group, signalled as a whole: what a terminal's Ctrl-C and a scheduler's SIGTERM
    # reach (the grading workers too, which must leave the stop to the trainer).
    run = subprocess.Popen(_train_command(workdir), env=ENV, cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_step(workdir, 2, run)
        os.killpg(run.pid, signum)
        _, stderr = run.communicate(timeout=TIMEOUT)
    finally:
        run.kill()
    assert run.returncode == code, stderr[-3000:]
    step = _stopped_step(stderr, name)
    assert 2 <= step < NUM_STEPS
    _assert_verified_checkpoint(workdir, step)
    assert all(r.get("rewards/grading_failures", 0) == 0 for r in _rows(workdir))
    assert [r["step"] for r in _rows(workdir)] == list(range(step + 1))  # the records hold every finished step
    assert not (workdir / "summary.json").exists()  # the run is not finished
    assert (workdir / "run.lock").read_text() == ""  # released: the relaunch takes no stale lock over

    resumed = subprocess.run(_train_command(workdir), env=ENV, cwd=ROOT, capture_output=True, text=True,
                             timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from step {step}" in resumed.stdout
    assert "taking over the lock" not in resumed.stdout + resumed.stderr
    assert _rows(workdir) == uninterrupted


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once(tmp_path):
    workdir = tmp_path / "run"
    # A checkpoint every step, so that a relaunch after the hard stop has a step to resume from.
    run = subprocess.Popen(_train_command(workdir, "--config.checkpoint.every_steps=1"), env=ENV, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_step(workdir, 2, run)
        run.send_signal(signal.SIGINT)
        time.sleep(0.2)  # the first one is received (a signal still pending would merge with the second)
        run.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, stderr = run.communicate(timeout=60)
        seconds = time.monotonic() - start
    finally:
        run.kill()
    assert run.returncode == 130, stderr[-3000:]
    assert "second interrupt: stopping now" in stderr.strip().splitlines()[-1], stderr[-3000:]
    assert "Traceback" not in stderr and seconds < 10, (seconds, stderr[-3000:])
    resumed = subprocess.run(_train_command(workdir, "--config.train.num_steps=4"), env=ENV, cwd=ROOT,
                             capture_output=True, text=True, timeout=TIMEOUT)
    assert resumed.returncode in (0, 2), resumed.stderr[-3000:]  # 2: it had already passed step 4
    assert "Traceback" not in resumed.stderr, resumed.stderr[-3000:]


# ------------------------------------------------------------------------------------------ two processes


def _two_processes(workdir, *extra):
    """Two train CLI processes x 2 CPU devices on this machine (as launch/local_multiprocess.sh starts them)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(ENV, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    return [subprocess.Popen(_train_command(workdir, "--config.mesh.data=4", f"--coordinator_address=127.0.0.1:{port}",
                                            "--num_processes=2", f"--process_id={i}", *extra),
                             env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(2)]


def _finish(processes, timeout=TIMEOUT):
    outputs = []
    try:
        for p in processes:
            outputs.append(p.communicate(timeout=timeout))
    finally:
        for p in processes:
            p.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


@pytest.mark.slow
def test_sigterm_on_one_of_two_processes_stops_both_after_the_same_step_and_resumes_exactly(tmp_path):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    for code, _, err in _finish(_two_processes(whole)):
        assert code == 0, err[-3000:]

    processes = _two_processes(stopped)
    _wait_for_step(stopped, 2, processes[0])
    processes[1].send_signal(signal.SIGTERM)  # only the second host is told: the first learns it at the next step
    results = _finish(processes)
    for code, _, err in results:
        assert code == 143, err[-3000:]
    step = _stopped_step(results[0][2], "SIGTERM")
    assert _stopped_step(results[1][2], "SIGTERM") == step and 2 <= step < NUM_STEPS
    _assert_verified_checkpoint(stopped, step)

    resumed = _finish(_two_processes(stopped))
    for code, _, err in resumed:
        assert code == 0, err[-3000:]
    assert f"resumed from step {step}" in resumed[0][1]
    assert _rows(stopped) == _rows(whole)


def test_the_resume_command_of_a_multi_host_stop_asks_for_a_fresh_coordinator_port(monkeypatch):
    from greso_jax.parallel import preemption

    for given in (["--coordinator_address=10.0.0.1:1234"], ["--coordinator_address", "10.0.0.1:1234"]):
        monkeypatch.setattr(sys, "argv", ["train", "--config=x.py", *given, "--num_processes=2", "--process_id=1"])
        line = str(preemption.stopped(signal.SIGTERM, 5, 5, "/w"))
        assert "1234" not in line and "--coordinator_address=10.0.0.1:FREE_PORT --num_processes=2" in line, line
        assert "not the one this run used" in line
    monkeypatch.setattr(sys, "argv", ["train", "--config=x.py", "--workdir=/w"])
    line = str(preemption.stopped(signal.SIGTERM, 5, 5, "/w"))
    assert line.endswith("resume with: python -m greso_jax.train --config=x.py --workdir=/w"), line


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (its SigCgt mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signum - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the signal mask in /proc")
@pytest.mark.parametrize("module", ["greso_jax.train", "greso_jax.evaluate", "greso_jax.export"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_cli_imports_gives_one_line(tmp_path, module, signum):
    """Python catches no SIGTERM by default: once the process does, the CLI's startup handler is in and
    JAX is still to import; the signal then ends it with one line (no traceback) and 128 + signum."""
    process = subprocess.Popen([sys.executable, "-m", module, f"--workdir={tmp_path}/run"], env=ENV, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not _catches(process.pid, signal.SIGTERM) and process.poll() is None and time.time() < deadline:
        time.sleep(0.001)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert process.returncode == 128 + signum, stderr
    assert len(lines) == 1 and "Traceback" not in stderr, stderr


def test_a_sigterm_inside_a_gc_callback_is_delivered_after_it(tmp_path):
    """An exception raised inside a gc callback is swallowed ("Exception ignored"): the handler sends the
    signal again instead, and Terminated reaches the main code once the callback has returned."""
    script = tmp_path / "gc_signal.py"
    script.write_text(
        "import gc, os, signal, sys, time\n"
        "from greso_jax.parallel import preemption\n"
        "preemption.stop_at_once_on_sigterm()\n"
        "def callback(phase, info):\n"
        "    if phase == 'start' and not getattr(callback, 'sent', False):\n"
        "        callback.sent = True\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        for _ in range(1000):\n"  # bytecodes run here, inside the callback: the handler runs here
        "            pass\n"
        "gc.callbacks.append(callback)\n"
        "try:\n"
        "    gc.collect()\n"
        "    time.sleep(5)\n"
        "    print('not stopped')\n"
        "except preemption.Terminated:\n"
        "    print('stopped after the callback')\n")
    done = subprocess.run([sys.executable, str(script)], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "stopped after the callback", done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
