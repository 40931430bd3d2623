"""The fault cases found by the sweep of 2026-12-02 (experiments/results/2026-12-02-fault-sweep.md), each
a fault the earlier cases did not try: an experiment variant whose get_config raises, length buckets
below data.max_prompt_length, an unreadable tokenizer.json, a warm-start cache path that is a file,
a read-only workdir, --output or --out (a real read-only mount: root writes through chmod), a full
disk (a real size-limited tmpfs: ENOSPC, not RLIMIT_FSIZE) when a fresh run writes its records, and
SIGTERM sent to evaluate. Same `Case` contract as fault_cases.py; the mounts need root and `mount`
(the cases skip where they are missing) and are unmounted after the case.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Callable

import pytest

from fault_harness import CONFIG, ENV, EVAL_FAST, ROOT, Case, Ctx, Result, last_line, run_cli

T, E, X = "greso_jax.train", "greso_jax.evaluate", "greso_jax.export"


@contextlib.contextmanager
def tmpfs(folder: str, options: str):
    """A tmpfs mounted at `folder` with mount `options` ("ro", "size=24k"); the case is skipped where
    mounting is not possible (not root, no mount(8), a container without the capability)."""
    os.makedirs(folder, exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", folder], capture_output=True,
                                 timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        mounted = False
    if not mounted:
        pytest.skip(f"cannot mount a tmpfs at {folder} here (needs root and mount)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", folder], capture_output=True, timeout=30)


def on_mount(options: str, module: str, args: Callable[[Ctx, str], list[str]], timeout: float = 300):
    """Runs `module` with `args(c, mount point)` while a tmpfs with `options` is mounted at c.dir/mnt."""
    def run(c: Ctx) -> Result:
        with tmpfs(os.path.join(c.dir, "mnt"), options) as folder:
            c.extra["mnt"] = folder
            return run_cli(c, module, args(c, folder), timeout=timeout)
    return run


def sigterm_evaluate(c: Ctx) -> Result:
    """SIGTERM to an evaluate CLI once it has started evaluating (its "evaluating ..." line), with tens
    of seconds of sampling still ahead (c.extra["stopped"]: its exit status and stderr); then the same
    evaluation, short, is the case's result. Waiting for the line, not a fixed delay, keeps the signal
    inside the evaluation on a fast machine (the tiny model evaluates the default in seconds) and out
    of the imports on a slow one."""
    args = [f"--checkpoint={c.run}", "--benchmarks=synthetic", "--num_samples=512", "--max_new_tokens=512",
            "--grading_workers=1"]
    p = subprocess.Popen([sys.executable, "-m", E, *args], env={**ENV, "PYTHONUNBUFFERED": "1"}, cwd=c.dir,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:  # EOF first (it failed before evaluating): the check reports its exit
            if line.startswith("evaluating "):
                break
        time.sleep(1)  # into the sampler's compilation and decoding
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    c.extra["stopped"] = (p.returncode, err)
    return run_cli(c, E, [f"--checkpoint={c.run}", *EVAL_FAST])


def stopped_by_sigterm(c: Ctx, r: Result) -> list[str]:
    rc, err = c.extra["stopped"]
    line = last_line(err)
    r.note = f"stopped: exit {rc}, {line[:90]}; again: exit {r.returncode}"
    problems = [] if rc == 143 else [f"exit {rc}, not 143"]
    if "Traceback" in err or not line.startswith("stopped by SIGTERM"):
        problems.append(f"the stop line is {line!r}")
    return problems


def cases() -> list[Case]:
    cfg, data, rund, model, disk, sig = ("bad config", "bad data", "run directory", "damaged model folder",
                                         "full disk", "signal")
    train = lambda *o: lambda c: [f"--config={CONFIG}", f"--workdir={c.dir}/run", *o]  # noqa: E731
    config = f"--config={CONFIG}"
    return [
        Case(cfg, "experiment variant whose get_config raises (arith_tiny.py:nosuch)", T,
             lambda c: [f"--config={ROOT}/experiments/arith_tiny.py:nosuch", f"--workdir={c.dir}/run"],
             needles=["--config: ", "arith_tiny.py:", "ValueError", "unknown variant"],
             check=lambda c, r: ["a traceback inside the line"] if "Traceback" in r.stderr + last_line(r.stderr)
             else []),
        Case(cfg, "sampling.prompt_length_buckets below data.max_prompt_length", T,
             train("--config.sampling.prompt_length_buckets=(4,)"),
             needles=["sampling.prompt_length_buckets", "data.max_prompt_length=16"]),
        Case(cfg, "train.warmstart_cache_dir is a file", T,
             lambda c: train(f"--config.train.warmstart_cache_dir={c.good_jsonl}", "--config.train.warmstart_steps=5")(c),
             needles=["train.warmstart_cache_dir", "not a folder"]),
        Case(model, "evaluate: tokenizer.json is not JSON", E,
             lambda c: [f"--checkpoint={c.model}", f"--config={CONFIG}", *EVAL_FAST], copy_model=True,
             setup=lambda c: open(os.path.join(c.model, "tokenizer.json"), "w").write("{bad"),
             needles=lambda c: [os.path.join(c.model, "tokenizer.json"), "not a readable tokenizer file"]),
        Case(rund, "train: --workdir on a read-only mount", T, None,
             custom=on_mount("ro", T, lambda c, m: [config, f"--workdir={m}/run"]),
             needles=lambda c: ["--workdir", c.extra["mnt"], "does not take writes"]),
        Case(rund, "train: --workdir is a read-only mount point", T, None,
             custom=on_mount("ro", T, lambda c, m: [config, f"--workdir={m}"]),
             needles=lambda c: ["--workdir", c.extra["mnt"], "does not take writes"]),
        Case(rund, "evaluate --output on a read-only mount -> before evaluating", E, None, copy_run=True,
             custom=on_mount("ro", E, lambda c, m: [f"--checkpoint={c.run}", *EVAL_FAST, f"--output={m}/r.json"]),
             needles=lambda c: ["--output", c.extra["mnt"], "does not take writes"],
             check=lambda c, r: ["it evaluated first"] if "avg@" in r.stdout else []),
        Case(rund, "export --out on a read-only mount", X, None, copy_run=True, prefix="export: ",
             custom=on_mount("ro", X, lambda c, m: [f"--workdir={c.run}", f"--out={m}/hf"]),
             needles=lambda c: [f"{c.extra['mnt']}/hf", "Read-only file system"]),
        Case(disk, "train: a real full disk (24 kB tmpfs) as a fresh run writes its records -> no hang", T, None,
             custom=on_mount("size=24k", T, lambda c, m: [config, f"--workdir={m}/run",
                                                           "--config.train.num_steps=2"], timeout=240),
             needles=["No space left on device"]),
        Case(sig, "SIGTERM to evaluate -> one line, exit 143", E, None, copy_run=True, custom=sigterm_evaluate,
             expect="ok", check=stopped_by_sigterm, timeout=300),
    ]
