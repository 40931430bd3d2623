"""Launching a set of training runs one after the other (the Δp ablation, the strategy comparison):
config paths, finished-run detection, a shared supervised warm start, one logged subprocess per run."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def absolute_config(config: str) -> str:
    """experiments/x.py:variant -> /abs/experiments/x.py:variant (the runs start in the repository root)."""
    file, sep, variant = config.partition(":")
    if not os.path.exists(file):
        raise ValueError(f"--config: no such file: {file}")
    return os.path.abspath(file) + sep + variant


def train_command(config: str, workdir: str, overrides: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "greso_jax.train", "--config", config, *overrides, "--workdir", workdir]


def is_finished(workdir: str) -> bool:
    return os.path.exists(os.path.join(workdir, "summary.json"))


def shared_warmstart(root: str) -> str:
    """The override that makes every run under `root` share one keyed warm-start cache
    (ROOT/warmstart): the first run with given warm-start settings trains and publishes it, the
    others reuse it (the trainer checks the settings key)."""
    return f"--config.train.warmstart_cache_dir={os.path.join(os.path.abspath(root), 'warmstart')}"


def run_logged(command: Sequence[str], workdir: str, name: str, log=print) -> bool:
    """Runs one training command with its output in workdir/train.log; True when it exited 0."""
    os.makedirs(workdir, exist_ok=True)
    log(f"{name}: {shlex.join(command)}")
    with open(os.path.join(workdir, "train.log"), "a") as out:
        code = subprocess.run(list(command), stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT).returncode
    if code != 0:
        log(f"{name}: exited with status {code}; see {os.path.join(workdir, 'train.log')}")
    return code == 0
