"""The fault cases of a run's life beyond one launch (tests/fault_cases.py adds them to its list): a
run stopped by a signal and relaunched, checkpoint steps that are unverified (no manifest) or hold
non-finite state. Same `Case` contract as fault_cases.py; the files are damaged independently of
the package (orbax is used directly to write a NaN into a saved step)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable

from fault_checks import expect_steps, launches, verify_step
from fault_files import step_dir
from fault_harness import CONFIG, ENV, EVAL_FAST, Case, Ctx, Result, last_line, run_cli
from greso_jax.core.files import sha256_of

T = "greso_jax.train"


def _train(*overrides: str) -> Callable[[Ctx], list[str]]:
    """The train CLI on the tiny config in the case's run folder; overrides may name {model}."""
    return lambda c: [f"--config={CONFIG}", f"--workdir={c.run or os.path.join(c.dir, 'run')}",
                      *[o.format(model=c.model) for o in overrides]]


# ------------------------------------------------------------------------------------------ signals

def _wait_for_row(workdir: str, step: int, process: subprocess.Popen, timeout: float = 300) -> bool:
    path = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if os.path.exists(path):
            with open(path) as f:
                if any(line.endswith("\n") and json.loads(line)["step"] >= step for line in f):
                    return True
        time.sleep(0.05)
    return False


def signalled_then_relaunched(signals: tuple[int, ...]) -> Callable[[Ctx], Result]:
    """A 30-step run signalled (each of `signals`, 0.2 s apart) once step 2 is recorded, then the
    same command again; the relaunch is the case's result, the stopped run's exit status and
    stderr go to c.extra["stopped"]."""
    def run(c: Ctx) -> Result:
        c.run = os.path.join(c.dir, "run")
        args = [f"--config={CONFIG}", f"--workdir={c.run}", "--config.train.num_steps=30",
                "--config.checkpoint.every_steps=100"]
        first = subprocess.Popen([sys.executable, "-m", T, *args], env=ENV, cwd=c.dir, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            reached = _wait_for_row(c.run, 2, first)
            for i, signum in enumerate(signals):
                time.sleep(0.2 if i else 0)
                first.send_signal(signum)
            _, err = first.communicate(timeout=300)
        finally:
            first.kill()
        c.extra["stopped"] = (first.returncode, err, reached)
        return run_cli(c, T, args)
    return run


def stopped_then_resumed(name: str, code: int) -> Callable[[Ctx, Result], list[str]]:
    """The stopped run exited `code` with one line naming the signal, the step and how to resume,
    left a verified checkpoint of that step and no summary; the relaunch resumed from it and finished."""
    def check(c: Ctx, r: Result) -> list[str]:
        rc, err, reached = c.extra["stopped"]
        if not reached:
            return ["the run ended before it could be signalled"]
        line = last_line(err)
        problems = [] if rc == code else [f"the stopped run exited {rc}, not {code}"]
        if "Traceback" in err or not line.startswith(f"stopped by {name} after step ") or "resume with:" not in line:
            return problems + [f"the stop line is {line!r}"]
        step = int(line.split("after step ")[1].split()[0])
        if verify_step(step_dir(c.run, step)):
            problems.append(f"checkpoint {step} is not verified: {verify_step(step_dir(c.run, step))}")
        if f"resumed from step {step}" not in r.stdout:
            problems.append(f"the relaunch did not resume from step {step}")
        r.note = f"stopped: exit {rc}, {line[:90]}…; relaunch resumed from step {step}, exit {r.returncode}"
        return problems + expect_steps(c.run, list(range(31)))
    return check


def hard_stop_then_relaunch(c: Ctx, r: Result) -> list[str]:
    rc, err, reached = c.extra["stopped"]
    if not reached:
        return ["the run ended before it could be signalled"]
    line = last_line(err)
    r.note = f"stopped: exit {rc}, {line[:80]}; relaunch exit {r.returncode}"
    problems = [] if rc == 130 else [f"exit {rc}, not 130"]
    if "second interrupt: stopping now" not in line or "Traceback" in err:
        problems.append(f"the stop line is {line!r}")
    return problems + expect_steps(c.run, list(range(31)))


# ------------------------------------------------------------------------------------------ unverified steps

def _rewrite_manifest(folder: str) -> None:
    """A manifest matching the step's files as they are now (the damage is then invisible to it)."""
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder)
            if rel != "manifest.json":
                files[rel] = {"size": os.path.getsize(os.path.join(root, n)), "sha256": sha256_of(os.path.join(root, n))}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"files": files}, f)


def nan_in_step(step: int) -> Callable[[Ctx], None]:
    """Writes NaN into one parameter of `step`'s train state with orbax and a manifest that matches."""
    def setup(c: Ctx) -> None:
        import jax
        import numpy as np
        import orbax.checkpoint as ocp

        path = os.path.join(step_dir(c.run, step), "train_state")
        checkpointer = ocp.PyTreeCheckpointer()
        tree = checkpointer.metadata(path).item_metadata.tree
        state = checkpointer.restore(path, restore_args=jax.tree.map(
            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree))
        leaf = next(x for x in jax.tree.leaves(state["params"]) if np.issubdtype(x.dtype, np.floating))
        leaf.reshape(-1)[0] = np.nan
        shutil.rmtree(path)
        checkpointer.save(path, state)
        _rewrite_manifest(step_dir(c.run, step))
    return setup


def fell_back_from_2(why: str) -> Callable[[Ctx, Result], list[str]]:
    def check(c: Ctx, r: Result) -> list[str]:
        out = r.stdout + r.stderr
        damaged = [line for line in out.splitlines() if "is damaged" in line]
        problems = expect_steps(c.run, [0, 1, 2, 3])
        if len(damaged) != 1 or "checkpoint step 2 is damaged" not in damaged[0] or why not in damaged[0]:
            problems.append(f"damage of step 2 ({why}) not reported once: {damaged}")
        if "resumed from step 1" not in out:
            problems.append("did not resume from step 1")
        if not os.listdir(os.path.join(c.run, "damaged_checkpoints")):
            problems.append("step 2 not kept in damaged_checkpoints/")
        last = launches(c.run)[-1]  # the launch record names the step resumed, not the damaged one
        if last["step"] != 1 or os.path.exists(os.path.join(c.run, "configs", "2.json")):
            problems.append(f"the launch record says step {last['step']} ({last['config']})")
        return problems
    return check


def only_step_unverified(c: Ctx, r: Result) -> list[str]:
    out = r.stdout + r.stderr
    lines = [line for line in out.splitlines() if "using it unverified" in line]
    problems = expect_steps(c.run, [0, 1, 2, 3])
    if len(lines) != 1 or "checkpoint step 2 has no manifest.json" not in lines[0]:
        problems.append(f"the unverified step is not named in one line: {lines}")
    return problems + ([] if "resumed from step 2" in out else ["did not resume from step 2"])


def cases() -> list[Case]:
    sig, ckpt, rund, hashes = "signal", "unverified checkpoint", "run directory", "content hash"
    E = "greso_jax.evaluate"
    no_checkpoints = lambda c: shutil.rmtree(os.path.join(c.run, "checkpoints"))  # noqa: E731
    return [
        Case(rund, "checkpoints/ gone, relaunched with another strategy", T,
             _train("--config.train.num_steps=3", "--config.selection.strategy=aero"), copy_run=True,
             setup=no_checkpoints, protect=records_of,
             needles=["holds the records of a run", "no checkpoint", "selection.strategy ('greso' -> 'aero')"]),
        Case(rund, "checkpoints/ gone, relaunched with the same config", T, _train("--config.train.num_steps=3"),
             copy_run=True, setup=no_checkpoints, expect="ok", check=started_again),
        Case(sig, "SIGTERM mid-run, then the same command", T, None,
             custom=signalled_then_relaunched((signal.SIGTERM,)), expect="ok",
             check=stopped_then_resumed("SIGTERM", 143), timeout=900),
        Case(sig, "Ctrl-C (SIGINT) mid-run, then the same command", T, None,
             custom=signalled_then_relaunched((signal.SIGINT,)), expect="ok",
             check=stopped_then_resumed("SIGINT", 130), timeout=900),
        Case(sig, "Ctrl-C twice: stops at once, the relaunch resumes", T, None,
             custom=signalled_then_relaunched((signal.SIGINT, signal.SIGINT)), expect="ok",
             check=hard_stop_then_relaunch, timeout=900),
        Case(ckpt, "step 2 without manifest.json -> falls back to step 1", T, _train("--config.train.num_steps=3"),
             copy_run=True, setup=lambda c: os.remove(os.path.join(step_dir(c.run, 2), "manifest.json")),
             expect="ok", check=fell_back_from_2("manifest.json: missing")),
        Case(ckpt, "the only step, without manifest.json -> used, named unverified", T,
             _train("--config.train.num_steps=3"), copy_run=True,
             setup=lambda c: (shutil.rmtree(step_dir(c.run, 1)),
                              os.remove(os.path.join(step_dir(c.run, 2), "manifest.json"))) and None,
             expect="ok", check=only_step_unverified),
        Case(ckpt, "NaN in step 2's parameters (manifest matches) -> falls back to step 1", T,
             _train("--config.train.num_steps=3"), copy_run=True, setup=nan_in_step(2), expect="ok",
             check=fell_back_from_2("not finite")),
        Case(ckpt, "NaN in every step's parameters -> one line, nothing trained", T,
             _train("--config.train.num_steps=3"), copy_run=True,
             setup=lambda c: (nan_in_step(1)(c), nan_in_step(2)(c)) and None,
             needles=["no intact checkpoint", "not finite"]),
        Case(hashes, "warm-start cache with eight flipped bytes -> trained again", T, None,
             custom=damaged_warm_start_cache, expect="ok", check=cache_rebuilt, timeout=900),
        Case(hashes, "evaluate: a NaN weight in the model folder -> the tensor named", E,
             lambda c: [f"--checkpoint={c.model}", f"--config={CONFIG}", *EVAL_FAST], copy_model=True,
             setup=nan_weight, needles=lambda c: [c.model, c.extra["tensor"], "non-finite"]),
        Case(hashes, "train: model.path with a NaN weight -> the tensor named", T,
             _train("--config.model.path={model}"), copy_model=True, setup=nan_weight,
             needles=lambda c: [c.model, c.extra["tensor"], "non-finite"]),
        *data_cases(),
        *records_cases(),
        *evaluate_cases(),
    ]


# ------------------------------------------------------------------------------------------ records without checkpoints

def records_of(c: Ctx) -> list[str]:
    """The finished run's records besides its checkpoints (what a relaunch may not overwrite)."""
    names = ["metrics.jsonl", "summary.json", "config.json", "configs/0.json", "configs/launches.jsonl"]
    return [os.path.join(c.run, n) for n in names] + [
        os.path.join(root, n) for root, _, files in os.walk(os.path.join(c.run, "plots")) for n in files]


def started_again(c: Ctx, r: Result) -> list[str]:
    """Said so in one line, kept the old records aside, recorded a fresh three-step run."""
    out = r.stdout + r.stderr
    said = [line for line in out.splitlines() if "starting the same run again" in line]
    problems = [] if len(said) == 1 else [f"the restart is not said in one line: {said}"]
    aside = os.path.join(c.run, "previous_records")
    kept = [os.path.join(aside, d, "metrics.jsonl") for d in (os.listdir(aside) if os.path.isdir(aside) else [])]
    if not kept or expect_steps(os.path.dirname(kept[0]), [0, 1, 2]):
        problems.append("the old metrics.jsonl (steps 0-2) is not kept under previous_records/")
    return problems + expect_steps(c.run, [0, 1, 2, 3])


# ------------------------------------------------------------------------------------------ content hashes

WARM = ["--config.train.warmstart_steps=20", "--config.train.num_steps=1"]


def damaged_warm_start_cache(c: Ctx) -> Result:
    """A run fills a warm-start cache; eight bytes of its weights are flipped; a second run (another
    workdir, the same cache) is the result. c.extra["cache"]: the cache folder."""
    cache = c.extra["cache"] = os.path.join(c.dir, "cache")
    args = [f"--config={CONFIG}", *WARM, f"--config.train.warmstart_cache_dir={cache}"]
    first = run_cli(c, T, [*args, f"--workdir={c.dir}/first"])
    if first.returncode != 0:
        return first
    (folder,) = [d for d in os.listdir(cache) if ".partial" not in d]
    weights = os.path.join(cache, folder, "model.safetensors")
    with open(weights, "r+b") as f:
        f.seek(os.path.getsize(weights) - 64)
        data = f.read(8)
        f.seek(os.path.getsize(weights) - 64)
        f.write(bytes(b ^ 0xFF for b in data))
    c.extra["folder"] = folder
    return run_cli(c, T, [*args, f"--workdir={c.dir}/second"])


def cache_rebuilt(c: Ctx, r: Result) -> list[str]:
    out = r.stdout + r.stderr
    problems = [] if f"{c.extra['folder']} is damaged (model.safetensors: content differs" in out else [
        "the damaged cache was not named"]
    if "reusing" in out or "supervised steps" not in out:
        problems.append("the damaged cache was loaded instead of trained again")
    return problems


def nan_weight(c: Ctx) -> None:
    """The first float32 tensor of the model folder's model.safetensors starts with a NaN."""
    import struct

    path = os.path.join(c.model, "model.safetensors")
    with open(path, "r+b") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
        name = sorted(n for n, t in header.items() if n != "__metadata__" and t["dtype"] == "F32")[0]
        f.seek(8 + length + header[name]["data_offsets"][0])
        f.write(struct.pack("<f", float("nan")))
    c.extra["tensor"] = name


# ------------------------------------------------------------------------------------------ data warnings

def _jsonl_with(name: str, edit: Callable[[list[str]], list[str]]) -> Callable[[Ctx], None]:
    """c.dir/name: the shared good training file's lines after `edit`."""
    def setup(c: Ctx) -> None:
        with open(c.good_jsonl) as f:
            lines = f.read().splitlines()
        with open(os.path.join(c.dir, name), "w") as f:
            f.write("".join(line + "\n" for line in edit(lines)))
    return setup


def _other_gold(lines: list[str]) -> list[str]:
    """Line 5 repeats line 2's question with another answer."""
    row = json.loads(lines[1])
    return [*lines[:4], json.dumps({"question": row["question"], "answer": row["answer"] + "1"}), *lines[4:]]


def _foreign_character(lines: list[str]) -> list[str]:
    """Line 3's question holds a character the arithmetic alphabet lacks."""
    row = json.loads(lines[2])
    return [*lines[:2], json.dumps({"question": row["question"] + " ≈", "answer": row["answer"]}), *lines[3:]]


def conflict_warned(c: Ctx, r: Result) -> list[str]:
    return [] if "different gold answers" in r.stderr and "dup.jsonl:5" in r.stderr else [
        "the conflicting golds were not reported"]


def data_cases() -> list[Case]:
    data = "bad data"
    jsonl = ["--config.data.source=jsonl", "--config.train.num_steps=1"]
    return [
        Case(data, "the same prompt twice with different golds (lines 2 and 5)", T,
             lambda c: _train(*jsonl, f"--config.data.path={c.dir}/dup.jsonl")(c),
             setup=_jsonl_with("dup.jsonl", _other_gold),
             needles=["dup.jsonl:2", "dup.jsonl:5", "different gold answers", "data.allow_conflicting_golds"]),
        Case(data, "... with data.allow_conflicting_golds=true: trains, warned", T,
             lambda c: _train(*jsonl, f"--config.data.path={c.dir}/dup.jsonl",
                              "--config.data.allow_conflicting_golds=true")(c),
             setup=_jsonl_with("dup.jsonl", _other_gold), expect="ok", check=conflict_warned),
        Case(data, "a character the char tokenizer cannot encode (line 3)", T,
             lambda c: _train(*jsonl, f"--config.data.path={c.dir}/chars.jsonl")(c),
             setup=_jsonl_with("chars.jsonl", _foreign_character), needles=["chars.jsonl:3", "not in the alphabet"]),
        Case(data, "every prompt longer than data.max_prompt_length", T,
             lambda c: _train(*jsonl, f"--config.data.path={c.good_jsonl}", "--config.data.max_prompt_length=2")(c),
             needles=["good.jsonl", "every prompt is longer than data.max_prompt_length=2"]),
    ]


# ------------------------------------------------------------------------------------------ records that do not read back

def append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def garble_line_2(c: Ctx) -> None:
    path = os.path.join(c.run, "metrics.jsonl")
    with open(path) as f:
        lines = f.readlines()
    lines[1] = lines[1][: len(lines[1]) // 2] + "\n"
    with open(path, "w") as f:
        f.writelines(lines)


def no_lock_left(c: Ctx, r: Result) -> list[str]:
    return [f"{c.dir}/run/run.lock is left"] if os.path.exists(os.path.join(c.dir, "run", "run.lock")) else []


def records_cases() -> list[Case]:
    rund = "run directory"
    return [
        Case(rund, "metrics.jsonl ends in a partial line (a killed write) -> resumes", T,
             _train("--config.train.num_steps=3"), copy_run=True,
             setup=lambda c: append(os.path.join(c.run, "metrics.jsonl"), '{"step": 3, "rollout/rew'),
             expect="ok", check=lambda c, r: expect_steps(c.run, [0, 1, 2, 3])),
        Case(rund, "metrics.jsonl with a garbled line 2 -> one line, nothing rewritten", T,
             _train("--config.train.num_steps=3"), copy_run=True, setup=garble_line_2,
             protect=lambda c: [os.path.join(c.run, n) for n in ("config.json", "configs/launches.jsonl",
                                                                 "metrics.jsonl", "summary.json")],
             needles=["metrics.jsonl:2", "unreadable record"]),
        Case(rund, "mesh error in a new workdir leaves no run.lock", T, _train("--config.mesh.data=3"),
             needles=["mesh.data*mesh.fsdp*mesh.tensor = 3"], check=no_lock_left),
    ]


def evaluate_cases() -> list[Case]:
    E = "greso_jax.evaluate"

    def quiet(c: Ctx, r: Result) -> list[str]:
        info = [line for line in r.stderr.splitlines() if line.startswith("I") and "] " in line]  # absl INFO
        return [f"{len(info)} INFO log lines, the first: {info[0][:100]}"] if info else []

    return [
        Case("bad config", "evaluate --output onto a folder -> one line before evaluating", E,
             lambda c: [f"--checkpoint={c.run}", *EVAL_FAST, f"--output={c.dir}"], copy_run=True,
             needles=["--output", "is a folder"],
             check=lambda c, r: ["it evaluated first"] if r.seconds > 60 or "eval" in r.stdout else []),
        Case("run directory", "evaluate a run workdir: no orbax INFO logging", E,
             lambda c: [f"--checkpoint={c.run}", *EVAL_FAST], copy_run=True, expect="ok", check=quiet),
    ]
