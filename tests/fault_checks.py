"""Checks of the fault cases' outputs, independent of the package: each takes the case's folder and
the run's result and returns the problems it finds ([] = fine)."""

from __future__ import annotations

import json
import os
import re

from fault_files import step_dir
from fault_harness import CONFIG, Ctx, Result, last_line, run_cli
from greso_jax.core.files import sha256_of


def verify_step(folder: str) -> str | None:
    """None when every file of the checkpoint step matches its manifest.json, else what does not."""
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError) as e:
        return f"no usable manifest ({e})"
    for rel, entry in files.items():
        path = os.path.join(folder, rel)
        if not os.path.exists(path):
            return f"{rel} missing"
        if os.path.getsize(path) != entry["size"] or sha256_of(path) != entry["sha256"]:
            return f"{rel} differs"
    return None


def metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(workdir: str) -> dict | None:
    path = os.path.join(workdir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def launches(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "configs", "launches.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def expect_steps(workdir: str, steps: list[int]) -> list[str]:
    got = [m["step"] for m in metrics(workdir)]
    return [] if got == steps else [f"metrics steps {got}, expected {steps}"]


def resumed_to_3(c: Ctx, r: Result) -> list[str]:
    return expect_steps(c.run, [0, 1, 2, 3]) + ([] if "resumed from step 2" in r.stdout + r.stderr
                                                else ["no 'resumed from step 2'"])


def stale_lock_taken_over(c: Ctx, r: Result) -> list[str]:
    problems = resumed_to_3(c, r)
    if "taking over the lock" not in r.stdout + r.stderr:
        problems.append("no warning about the stale lock")
    last = launches(c.run)[-1]
    if last["step"] != 2 or "train.num_steps" not in last["changed"]:
        problems.append(f"launch record {last}")
    return problems


def allowed_lr_recorded(c: Ctx, r: Result) -> list[str]:
    problems = resumed_to_3(c, r)
    last = launches(c.run)[-1]
    if last.get("changed", {}).get("train.learning_rate") != [3e-4, 1e-4]:
        problems.append(f"learning-rate change not recorded: {last.get('changed')}")
    with open(os.path.join(c.run, "configs", "2.json")) as f:
        if json.load(f)["train"]["learning_rate"] != 1e-4:
            problems.append("configs/2.json lacks the new learning rate")
    return problems


def train_fell_back(c: Ctx, r: Result) -> list[str]:
    """The damage to step 2 (c.extra["damaged"]) was reported once, the run resumed from step 1, kept
    the damaged step aside and wrote an intact step 3."""
    out = r.stdout + r.stderr
    problems = expect_steps(c.run, [0, 1, 2, 3])
    damaged = [line for line in out.splitlines() if "is damaged" in line]
    if len(damaged) != 1 or "checkpoint step 2 is damaged" not in damaged[0] or c.extra["damaged"] not in damaged[0]:
        problems.append(f"damage not reported once naming {c.extra['damaged']}: {damaged}")
    if "resumed from step 1" not in out:
        problems.append("did not resume from step 1")
    aside = os.path.join(c.run, "damaged_checkpoints")
    if not os.path.isdir(aside) or not os.listdir(aside):
        problems.append("damaged step not kept in damaged_checkpoints/")
    damage = verify_step(step_dir(c.run, 3))
    if damage:
        problems.append(f"the new step 3 is not intact: {damage}")
    return problems


def fell_back_to_step_1(done: str):
    """A check that the damage to step 2 was reported and the CLI then `done` step 1 (a regex verb)."""
    def check(c: Ctx, r: Result) -> list[str]:
        out = r.stdout + r.stderr
        problems = [] if "checkpoint step 2 is damaged" in out else ["damage not reported"]
        if not re.search(rf"{done} \S+ step 1\b", out):
            problems.append(f"did not fall back to step 1 (no '{done} ... step 1')")
        return problems

    return check


def jsonl_run_finished(c: Ctx, r: Result) -> list[str]:
    """A two-step run on a jsonl file: metrics, summary (no held-out accuracy: a jsonl source has no
    held-out pool) and plots."""
    run = os.path.join(c.dir, "run")
    s = summary(run)
    if s is None:
        return ["no summary.json"]
    problems = expect_steps(run, [0, 1, 2])
    if s.get("steps") != 2:
        problems.append(f"summary steps {s.get('steps')}")
    if (s.get("accuracy_before"), s.get("accuracy_after")) != (None, None):
        problems.append(f"summary accuracies {s.get('accuracy_before')}, {s.get('accuracy_after')} without "
                        "a held-out pool")
    if not os.path.isdir(os.path.join(run, "plots")):
        problems.append("no plots/")
    if any(isinstance(v, float) and v != v for v in s.values()):
        problems.append("NaN in summary")
    return problems


def long_prompt_dropped(c: Ctx, r: Result) -> list[str]:
    problems = jsonl_run_finished(c, r)
    count = r.stdout.count("dropping prompts longer than data.max_prompt_length")
    if count != 1:
        problems.append(f"the drop was logged {count} times")
    last = metrics(os.path.join(c.dir, "run"))[-1]
    if not last.get("data/dropped_too_long", 0) >= 1:
        problems.append(f"data/dropped_too_long = {last.get('data/dropped_too_long')}")
    return problems


def bad_row_skipped(c: Ctx, r: Result) -> list[str]:
    problems = jsonl_run_finished(c, r)
    last = metrics(os.path.join(c.dir, "run"))[-1]
    if last.get("data/bad_rows") != 1:
        problems.append(f"data/bad_rows = {last.get('data/bad_rows')}, expected the one skipped row")
    return problems


def full_disk_kept_the_previous_step(c: Ctx, r: Result) -> list[str]:
    """The failed save names its step (3 or later: which save first crosses the limit depends on how
    the checkpoint's files fill up) and says the step before is intact, which it is; no half-written
    step is left; a run without the limit resumes from that step."""
    line = last_line(r.stderr)
    m = re.search(r"checkpoint step (\d+)", line)
    if not m:
        return ["the error names no checkpoint step"]
    failed = int(m.group(1))
    problems = [] if failed >= 3 else [f"step {failed} failed, below the first new step 3"]
    if f"step {failed - 1} is intact" not in line:
        problems.append(f"does not say step {failed - 1} is intact")
    damage = verify_step(step_dir(c.run, failed - 1))
    if damage:
        problems.append(f"step {failed - 1} is not intact: {damage}")
    if os.path.isdir(step_dir(c.run, failed)):
        problems.append(f"a half-written step {failed} is left as a finished step")
    again = run_cli(c, "greso_jax.train", [f"--config={CONFIG}", f"--workdir={c.run}",
                                           f"--config.train.num_steps={failed}"])
    if again.returncode != 0 or f"resumed from step {failed - 1}" not in again.stdout:
        problems.append(f"the run without the limit did not resume from step {failed - 1} "
                        f"(exit {again.returncode}: {last_line(again.stderr)})")
    return problems


def first_writer_unharmed(c: Ctx, r: Result) -> list[str]:
    first = c.extra["first_rc"]
    problems = [] if first == 0 else [f"the first run exited {first}"]
    problems += expect_steps(c.run, [0, 1, 2, 3])
    with open(os.path.join(c.run, "config.json")) as f:
        lr = json.load(f)["train"]["learning_rate"]
    if lr != 3e-4:
        problems.append(f"config.json has the second run's learning rate {lr}")
    return problems


def summary_untouched(c: Ctx, r: Result) -> list[str]:
    return [] if summary(c.run)["steps"] == 2 else ["summary.json rewritten"]


def exported_folder_complete(c: Ctx, r: Result) -> list[str]:
    out = os.path.join(c.dir, "out")
    need = ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json"]
    return [f"{n} missing" for n in need if not os.path.exists(os.path.join(out, n))]
