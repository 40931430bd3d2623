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


def finished_runs(root: str, variants: set[str] | None = None, seeds: set[int] | None = None):
    """(variant, seed, workdir) of every finished run ROOT/VARIANT/seedS, in sorted order, optionally only the
    given variants and seeds; the warm-start cache is not a run."""
    for variant in sorted(os.listdir(root)):
        folder = os.path.join(root, variant)
        if variant == "warmstart" or not os.path.isdir(folder) or (variants and variant not in variants):
            continue
        for seed_dir in sorted(os.listdir(folder)):
            if not seed_dir.startswith("seed") or not seed_dir[4:].isdigit():
                continue
            workdir = os.path.join(folder, seed_dir)
            if (not seeds or int(seed_dir[4:]) in seeds) and is_finished(workdir):
                yield variant, int(seed_dir[4:]), workdir


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
