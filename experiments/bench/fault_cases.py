"""Issue 14's hostile-but-realistic user, measured: bad configs, bad data, run-directory misuse,
damaged checkpoints, damaged model folders, a full disk and 17 hostile grader inputs, each run as
a real subprocess of the CLIs (train, evaluate, export, data.fetch) on real files in a temp dir.

    python experiments/bench/fault_cases.py [--only PATTERN] [--jobs 1] [--out FILE] [--keep] [--work DIR]
                                            [--root CHECKOUT]

One tiny two-step run (tests/trainer_config.py) is trained once and copied per case. Every case
states what it expects: a one-line error (exit status 2, last stderr line `error: ...` -- or the
CLI's own prefix for export/fetch -- naming the given field, file, row or tensor, no traceback) or
a run that finishes and passes a check of its outputs. Files that must not change (the run's
config.json, configs/*, checkpoints, summary) are hashed before and after.

Outcome classes: one-line error, traceback, ran fine, silent wrong (exit 0 where an error was
due, or outputs that fail the case's check), data lost (a protected file changed or vanished),
hang (past the case's timeout), other (another exit status without a traceback).
Prints a markdown table; exit status 1 when any case FAILs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Callable

from greso_jax.core.files import sha256_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "trainer_config.py")
ENV = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
PY = sys.executable
EVAL_FAST = ["--benchmarks=synthetic", "--num_samples=1", "--max_problems=2", "--grading_workers=0"]


# ------------------------------------------------------------------------------------------ cases


@dataclasses.dataclass
class Ctx:
    """One case's folder and the shared fixtures (read-only: cases copy what they damage)."""

    dir: str
    base_run: str  # a finished two-step run (checkpoints 1 and 2)
    hf: str  # that run exported as a Hugging Face folder (char tokenizer.json)
    good_jsonl: str
    run: str = ""  # the case's copy of base_run (when the case asks for one)
    model: str = ""  # the case's copy of hf
    extra: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Case:
    category: str
    name: str
    module: str  # the CLI: greso_jax.train, ...
    args: Callable[[Ctx], list[str]]
    expect: str = "error"  # "error" or "ok"
    needles: Callable[[Ctx], list[str]] | list[str] = ()  # what the error line must contain
    setup: Callable[[Ctx], None] | None = None
    check: Callable[[Ctx, "Result"], list[str]] | None = None  # problems with the outputs ([] = fine)
    protect: Callable[[Ctx], list[str]] | None = None  # files that must stay byte-identical
    copy_run: bool = False
    copy_model: bool = False
    prefix: str = "error: "
    fsize_limit: Callable[[Ctx], int] | None = None  # RLIMIT_FSIZE for the child (a full disk)
    timeout: float = 300
    custom: Callable[[Ctx], "Result"] | None = None  # runs the case itself (two writers, the grader)
    number: int = 0


@dataclasses.dataclass
class Result:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    note: str = ""


def _train(*overrides: str) -> Callable[[Ctx], list[str]]:
    return lambda c: [f"--config={CONFIG}", f"--workdir={c.run or os.path.join(c.dir, 'run')}",
                      *[o.format(c=c) for o in overrides]]


def _experiment(text: str) -> Callable[[Ctx], list[str]]:
    """An experiment file of the user's with `text`."""
    return lambda c: [f"--config={_write(os.path.join(c.dir, 'exp.py'), text)}", f"--workdir={c.dir}/run"]


def _write(path: str, data: bytes | str) -> str:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def _jsonl(c: Ctx, name: str, lines: list[bytes | str]) -> str:
    return _write(os.path.join(c.dir, name), b"".join((x.encode() if isinstance(x, str) else x) + b"\n"
                                                     for x in lines))


def _good_lines(c: Ctx) -> list[str]:
    with open(c.good_jsonl) as f:
        return f.read().splitlines()


def _all_files(folder: str, skip=("run.lock",)) -> list[str]:
    out = []
    for root, _, names in os.walk(folder):
        out += [os.path.join(root, n) for n in names if n not in skip]
    return sorted(out)


def _everything(c: Ctx) -> list[str]:
    return _all_files(c.run)


def _history(c: Ctx) -> list[str]:
    """What a resume may not touch: the first launch's config and step 1."""
    return [os.path.join(c.run, "configs", "0.json"), *_all_files(os.path.join(c.run, "checkpoints", "1"))]


def _ckpt(c: Ctx, step: int) -> str:
    return os.path.join(c.run, "checkpoints", str(step))


def _largest_file(step_dir: str) -> str:
    files = [f for f in _all_files(step_dir) if not f.endswith("manifest.json")]
    return max(files, key=os.path.getsize)


def _flip_bytes(path: str, count: int = 4) -> None:
    data = bytearray(open(path, "rb").read())
    for k in range(count):
        data[len(data) // 3 + k * (len(data) - 1 - len(data) // 3) // max(count - 1, 1)] ^= 0xFF
    _write(path, bytes(data))


def verify_step(step_dir: str) -> str | None:
    """Independent of the package: None when every file of the step matches its manifest.json."""
    try:
        files = json.load(open(os.path.join(step_dir, "manifest.json")))["files"]
    except (OSError, ValueError, KeyError) as e:
        return f"no usable manifest ({e})"
    for rel, entry in files.items():
        path = os.path.join(step_dir, rel)
        if not os.path.exists(path):
            return f"{rel} missing"
        if os.path.getsize(path) != entry["size"] or sha256_of(path) != entry["sha256"]:
            return f"{rel} differs"
    return None


def _metrics_steps(workdir: str) -> list[int]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line)["step"] for line in open(path) if line.strip()]


def _metrics(workdir: str) -> list[dict]:
    return [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl")) if line.strip()]


def _summary(workdir: str) -> dict | None:
    path = os.path.join(workdir, "summary.json")
    return json.load(open(path)) if os.path.exists(path) else None


def _expect_steps(workdir: str, steps: list[int]) -> list[str]:
    got = _metrics_steps(workdir)
    return [] if got == steps else [f"metrics steps {got}, expected {steps}"]


def _rewrite_safetensors_header(file: str, edit: Callable[[dict], None]) -> None:
    raw = open(file, "rb").read()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + length])
    edit(header)
    blob = json.dumps(header).encode()
    _write(file, len(blob).to_bytes(8, "little") + blob + raw[8 + length:])


def _overlap(header: dict) -> None:
    names = sorted(n for n in header if n != "__metadata__" and ".layers.0." in n and n.endswith("q_proj.weight"))
    header[names[0]]["data_offsets"] = header[names[0].replace(".layers.0.", ".layers.1.")]["data_offsets"]


def _parquet(path: str, records: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


# ---- checks for the cases that must finish


def _ok_resume_to_3(c: Ctx, r: Result) -> list[str]:
    return _expect_steps(c.run, [0, 1, 2, 3]) + ([] if "resumed from step 2" in r.stdout + r.stderr
                                                 else ["no 'resumed from step 2'"])


def _check_stale_lock(c: Ctx, r: Result) -> list[str]:
    problems = _ok_resume_to_3(c, r)
    if "taking over the lock" not in r.stdout + r.stderr:
        problems.append("no warning about the stale lock")
    launches = open(os.path.join(c.run, "configs", "launches.jsonl")).read().splitlines()
    last = json.loads(launches[-1])
    if last["step"] != 2 or "train.num_steps" not in last["changed"]:
        problems.append(f"launch record {last}")
    return problems


def _check_allowed_lr(c: Ctx, r: Result) -> list[str]:
    problems = _ok_resume_to_3(c, r)
    last = json.loads(open(os.path.join(c.run, "configs", "launches.jsonl")).read().splitlines()[-1])
    if last.get("changed", {}).get("train.learning_rate") != [3e-4, 1e-4]:
        problems.append(f"learning-rate change not recorded: {last.get('changed')}")
    if json.load(open(os.path.join(c.run, "configs", "2.json")))["train"]["learning_rate"] != 1e-4:
        problems.append("configs/2.json lacks the new learning rate")
    return problems


def _check_fallback_train(c: Ctx, r: Result) -> list[str]:
    out = r.stdout + r.stderr
    problems = _expect_steps(c.run, [0, 1, 2, 3])
    damaged = [line for line in out.splitlines() if "is damaged" in line]
    if len(damaged) != 1 or "checkpoint step 2 is damaged" not in damaged[0] or c.extra["damaged"] not in damaged[0]:
        problems.append(f"damage not reported once naming {c.extra['damaged']}: {damaged}")
    if "resumed from step 1" not in out:
        problems.append("did not resume from step 1")
    aside = os.path.join(c.run, "damaged_checkpoints")
    if not os.path.isdir(aside) or not os.listdir(aside):
        problems.append("damaged step not kept in damaged_checkpoints/")
    return problems


def _check_fell_back_to_step_1(done: str):
    """A check that the damage to step 2 was reported and the CLI then `done` step 1 (a regex verb)."""
    def check(c: Ctx, r: Result) -> list[str]:
        out = r.stdout + r.stderr
        problems = [] if "checkpoint step 2 is damaged" in out else ["damage not reported"]
        if not re.search(rf"{done} \S+ step 1\b", out):
            problems.append(f"did not fall back to step 1 (no '{done} ... step 1')")
        return problems

    return check


def _check_jsonl_run(c: Ctx, r: Result) -> list[str]:
    run = os.path.join(c.dir, "run")
    summary = _summary(run)
    if summary is None:
        return ["no summary.json"]
    problems = _expect_steps(run, [0, 1, 2])
    if summary.get("steps") != 2:
        problems.append(f"summary steps {summary.get('steps')}")
    if not os.path.isdir(os.path.join(run, "plots")):
        problems.append("no plots/")
    if any(isinstance(v, float) and v != v for v in summary.values()):
        problems.append("NaN in summary")
    return problems


def _check_dropped(c: Ctx, r: Result) -> list[str]:
    problems = _check_jsonl_run(c, r)
    count = r.stdout.count("dropping prompts longer than data.max_prompt_length")
    if count != 1:
        problems.append(f"the drop was logged {count} times")
    last = _metrics(os.path.join(c.dir, "run"))[-1]
    if not last.get("data/dropped_too_long", 0) >= 1:
        problems.append(f"data/dropped_too_long = {last.get('data/dropped_too_long')}")
    return problems


def _check_skip_bad_rows(c: Ctx, r: Result) -> list[str]:
    problems = _check_jsonl_run(c, r)
    out = r.stdout + r.stderr
    metrics = _metrics(os.path.join(c.dir, "run"))
    counted = any("bad_rows" in k and v for m in metrics for k, v in m.items())
    if not counted and not re.search(r"\b1 bad row", out):
        problems.append("the skipped row is neither logged nor in metrics.jsonl")
    return problems


def _check_full_disk(c: Ctx, r: Result) -> list[str]:
    line = _last_line(r.stderr)
    m = re.search(r"checkpoint step (\d+)", line)
    if not m:
        return ["the error names no checkpoint step"]
    failed = int(m.group(1))
    problems = [] if f"step {failed - 1} is intact" in line else [f"does not say step {failed - 1} is intact"]
    damage = verify_step(_ckpt(c, failed - 1))
    if damage:
        problems.append(f"step {failed - 1} is not intact: {damage}")
    if os.path.isdir(_ckpt(c, failed)):
        problems.append(f"a half-written step {failed} is left as a finished step")
    return problems


def _check_two_writers(c: Ctx, r: Result) -> list[str]:
    first = c.extra["first_rc"]
    problems = [] if first == 0 else [f"the first run exited {first}"]
    problems += _expect_steps(c.run, [0, 1, 2, 3])
    lr = json.load(open(os.path.join(c.run, "config.json")))["train"]["learning_rate"]
    if lr != 3e-4:
        problems.append(f"config.json has the second run's learning rate {lr}")
    return problems


def _check_untouched_summary(c: Ctx, r: Result) -> list[str]:
    return [] if _summary(c.run)["steps"] == 2 else ["summary.json rewritten"]


def _check_export_ok(c: Ctx, r: Result) -> list[str]:
    out = os.path.join(c.dir, "out")
    need = ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json"]
    return [f"{n} missing" for n in need if not os.path.exists(os.path.join(out, n))]


# ---- the run copies and setups


def _stale_lock(c: Ctx) -> None:
    dead = subprocess.Popen(["sleep", "600"])
    ticks = int(open(f"/proc/{dead.pid}/stat").read().rsplit(")", 1)[1].split()[19])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    _write(os.path.join(c.run, "run.lock"), json.dumps({"host": socket.gethostname(), "pid": dead.pid,
                                                        "start_ticks": ticks, "started": "2026-11-30T00:00:00"}))


def _damage_latest(how: str) -> Callable[[Ctx], None]:
    def setup(c: Ctx) -> None:
        target = _largest_file(_ckpt(c, 2))
        c.extra["damaged"] = os.path.relpath(target, os.path.join(c.run, "checkpoints"))
        if how == "flip":
            _flip_bytes(target)
        elif how == "truncate":
            os.truncate(target, os.path.getsize(target) // 2)
        else:
            os.remove(target)
    return setup


def _damage_all(c: Ctx) -> None:
    for step in (1, 2):
        _flip_bytes(_largest_file(_ckpt(c, step)))


def _two_writers(c: Ctx) -> Result:
    env = ENV
    first = subprocess.Popen([PY, "-m", "greso_jax.train", f"--config={CONFIG}", f"--workdir={c.run}",
                              "--config.train.num_steps=3"], env=env, cwd=c.dir, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, preexec_fn=_nice)
    lock = os.path.join(c.run, "run.lock")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(lock) and open(lock).read()):
        time.sleep(0.1)
    c.extra["first_pid"] = first.pid
    result = _subprocess(c, "greso_jax.train", [f"--config={CONFIG}", f"--workdir={c.run}",
                                                "--config.train.num_steps=3", "--config.train.learning_rate=1e-3"])
    try:
        first.wait(timeout=600)
    except subprocess.TimeoutExpired:
        first.kill()
        first.wait()
    c.extra["first_rc"] = first.returncode
    return result


# ---- the grader: one subprocess per input, grade() after warm_up(), a canary that must never appear

GRADER_CODE = textwrap.dedent("""
    import json, sys, time
    from greso_jax.rewards.math import grade, warm_up
    text, timeout_s = json.loads(sys.stdin.read())
    warm_up()
    control = grade("\\\\boxed{1}", "1", timeout_s=timeout_s)
    start = time.monotonic()
    g = grade(text, "1", timeout_s=timeout_s)
    print(json.dumps({"reward": g.reward, "correct": g.correct, "status": g.status,
                      "seconds": time.monotonic() - start, "control": control.correct}))
""")
GRADER_TIMEOUT_S = 2.0
GRADER_SLACK_S = 0.5


def _hostile_inputs(canary: str) -> list[tuple[str, str]]:
    code = f"__import__('os').system('touch {canary}')"
    return [
        ("power tower 9^9^9^9", "\\boxed{9^{9^{9^{9}}}}"),
        ("2^(2^40)", "\\boxed{2^{2^{40}}}"),
        ("(10^10)!", "\\boxed{(10^{10})!}"),
        ("100000!", "\\boxed{100000!}"),
        ("((10^6)!)!", "\\boxed{((10^{6})!)!}"),
        ("(1/1000)^-100000", "\\boxed{(\\frac{1}{1000})^{-100000}}"),
        ("1 MB of 'x'", "x" * 1_000_000),
        ("sum of 50,000 ones", "\\boxed{" + "1+" * 50_000 + "1}"),
        ("10,000 nested braces", "{" * 10_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}"),
        ("10,000 unclosed \\boxed{", "\\boxed{" * 10_000),
        ("150 nested \\sqrt", "\\boxed{" + "\\sqrt{" * 150 + "2" + "}" * 151),
        ("latex macro bomb \\def\\x{\\x\\x}", "\\boxed{\\def\\x{\\x\\x}\\x}"),
        ("boxed __import__('os').system", f"\\boxed{{{code}}}"),
        ("boxed open(...).write", f"\\boxed{{open('{canary}', 'w').write('x')}}"),
        ("'The answer is' __import__", f"The answer is {code}"),
        ("boxed exec(...)", f"\\boxed{{exec(\"import os; os.system('touch {canary}')\")}}"),
        ("\\text{__import__...}", f"\\boxed{{\\text{{{code}}}}}"),
    ]


def _grade_case(text_of: Callable[[str], str]) -> Callable[[Ctx], Result]:
    def run(c: Ctx) -> Result:
        canary = os.path.join(c.dir, "canary")
        c.extra["canary"] = canary
        start = time.monotonic()
        try:
            p = subprocess.run([PY, "-c", GRADER_CODE], input=json.dumps([text_of(canary), GRADER_TIMEOUT_S]),
                               capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT, preexec_fn=_nice)
        except subprocess.TimeoutExpired as e:
            return Result(None, e.stdout or "", e.stderr or "", time.monotonic() - start)
        return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - start)
    return run


def _check_grade(c: Ctx, r: Result) -> list[str]:
    try:
        g = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return ["no grade printed"]
    r.note = f"reward {g['reward']} ({g['status']}) in {g['seconds']:.2f} s"
    problems = []
    if g["seconds"] > GRADER_TIMEOUT_S + GRADER_SLACK_S:
        problems.append(f"took {g['seconds']:.2f} s (deadline {GRADER_TIMEOUT_S} s)")
    if g["correct"] or g["reward"] not in (0.0, 0.1):
        problems.append("graded a wrong answer as correct")
    if not g["control"]:
        problems.append("the control \\boxed{1} was not graded correct")
    if os.path.exists(c.extra["canary"]):
        problems.append("CODE RAN: the canary file exists")
    return problems


# ---- the list


def cases() -> list[Case]:
    T, E, X, F = "greso_jax.train", "greso_jax.evaluate", "greso_jax.export", "greso_jax.data.fetch"
    cfg, data, rund, ckpt, model, disk = ("bad config", "bad data", "run directory", "damaged checkpoint",
                                          "damaged model folder", "full disk")
    jsonl = ["--config.data.source=jsonl"]

    def jpath(name):
        return f"--config.data.path={{c.dir}}/{name}"

    def eval_hf(c):
        return [f"--checkpoint={c.model}", f"--config={CONFIG}", *EVAL_FAST]

    out = [
        # ------------------------------------------------------------------ bad configs
        Case(cfg, "config file missing", T, lambda c: ["--config=missing.py", f"--workdir={c.dir}/run"],
             needles=["--config: cannot load missing.py"]),
        Case(cfg, "config file with a syntax error", T,
             _experiment("def get_config(:\n    pass\n"), needles=["exp.py:1"]),
        Case(cfg, "config file whose get_config raises", T,
             _experiment("def get_config():\n    return undefined_name\n"), needles=["--config: ", "exp.py:2", "undefined_name"]),
        Case(cfg, "unknown field (typo) with did-you-mean", T, _train("--config.rl.gruop_size=2"),
             needles=["--config.rl.gruop_size: no such config field", "did you mean rl.group_size?"]),
        Case(cfg, "unknown section (typo)", T, _train("--config.trian.num_steps=3"),
             needles=["no such config field trian.num_steps", "did you mean train.num_steps?"]),
        Case(cfg, "wrong type: text for an int", T, _train("--config.rl.group_size=four"),
             needles=["rl.group_size"]),
        Case(cfg, "wrong type: 2.5 for an int", T, _train("--config.train.num_steps=2.5"),
             needles=["train.num_steps"]),
        Case(cfg, "wrong type: 'maybe' for a bool", T, _train("--config.checkpoint.async_save=maybe"),
             needles=["checkpoint.async_save"]),
        Case(cfg, "out of range: group_size 0", T, _train("--config.rl.group_size=0"), needles=["rl.group_size"]),
        Case(cfg, "out of range: negative learning rate", T, _train("--config.train.learning_rate=-0.001"),
             needles=["train.learning_rate"]),
        Case(cfg, "out of range: top_p 1.5", T, _train("--config.sampling.top_p=1.5"), needles=["sampling.top_p"]),
        Case(cfg, "cross-field: mini-batch 3 does not divide batch 4", T, _train("--config.rl.mini_batch_size=3"),
             needles=["rl.mini_batch_size", "must divide"]),
        Case(cfg, "cross-field: warm-start band high without low", T,
             _train("--config.train.warmstart_accuracy_high=0.5"), needles=["train.warmstart_accuracy_high"]),
        Case(cfg, "strategy 'oracle' for training", T, _train("--config.selection.strategy=oracle"),
             needles=["selection.strategy", "simulation-only"]),
        Case(cfg, "unknown strategy 'gerso'", T, _train("--config.selection.strategy=gerso"),
             needles=["selection.strategy", "gerso"]),
        Case(cfg, "unknown model preset", T, _train("--config.model.preset=tiny-tset"), needles=["model.preset"]),
        Case(cfg, "mesh that does not fit the devices (data=3 on 1 CPU)", T, _train("--config.mesh.data=3"),
             needles=["mesh.data*mesh.fsdp*mesh.tensor = 3"]),
        Case(cfg, "model.path folder that does not exist", T, _train("--config.model.path={c.dir}/nope"),
             needles=["model.path", "nope"]),
        Case(cfg, "checkpoint.allow_changes names no field", T,
             _train("--config.checkpoint.allow_changes=rl.gruop_size"),
             needles=["checkpoint.allow_changes", "did you mean 'rl.group_size'"]),
        Case(cfg, "--workdir missing", T, lambda c: [f"--config={CONFIG}"], needles=["workdir"]),
        Case(cfg, "--workdir is a file", T,
             lambda c: [f"--config={CONFIG}", f"--workdir={_write(c.dir + '/afile', 'x')}"],
             needles=["--workdir", "afile", "not a folder"]),
        Case(cfg, "data.source=jsonl without data.path", T, _train(*jsonl), needles=["data.path", "required"]),
        Case(cfg, "data.level_field on the arith source", T, _train("--config.data.level_field=level"),
             needles=["data.level_field", "arith"]),
        # ------------------------------------------------------------------ bad data
        Case(data, "training file missing", T, _train(*jsonl, jpath("absent.jsonl")),
             needles=["data.path", "absent.jsonl"]),
        Case(data, "data.path is a folder", T, _train(*jsonl, "--config.data.path={c.dir}"),
             needles=["{dir}"]),
        Case(data, "malformed jsonl row (line 2)", T, _train(*jsonl, jpath("bad.jsonl")),
             setup=lambda c: _jsonl(c, "bad.jsonl", [_good_lines(c)[0], '{"question": "2+2=", "answer"',
                                                     *_good_lines(c)[1:]]),
             needles=["bad.jsonl:2:"]),
        Case(data, "non-UTF-8 line (line 3)", T, _train(*jsonl, jpath("latin1.jsonl")),
             setup=lambda c: _jsonl(c, "latin1.jsonl", [*_good_lines(c)[:2], b'{"question": "caf\xe9 1+1=", '
                                                        b'"answer": "2"}', *_good_lines(c)[2:]]),
             needles=["latin1.jsonl:3:", "utf-8"]),
        Case(data, "non-UTF-8 line with data.skip_bad_rows=true", T,
             _train(*jsonl, jpath("latin1.jsonl"), "--config.data.skip_bad_rows=true", "--config.train.num_steps=2"),
             setup=lambda c: _jsonl(c, "latin1.jsonl", [*_good_lines(c)[:2], b'{"question": "caf\xe9 1+1=", '
                                                        b'"answer": "2"}', *_good_lines(c)[2:]]),
             expect="ok", check=_check_skip_bad_rows),
        Case(data, "row without a gold answer (line 4)", T, _train(*jsonl, jpath("nogold.jsonl")),
             setup=lambda c: _jsonl(c, "nogold.jsonl", [*_good_lines(c)[:3], '{"question": "5+5="}',
                                                        *_good_lines(c)[3:]]),
             needles=["nogold.jsonl:4:"]),
        Case(data, "row that is a JSON list (line 1)", T, _train(*jsonl, jpath("list.jsonl")),
             setup=lambda c: _jsonl(c, "list.jsonl", ['["1+1=", "2"]', *_good_lines(c)]),
             needles=["list.jsonl:1:", "JSON object"]),
        Case(data, "data.level_field that no row has (typo)", T,
             _train(*jsonl, jpath("good.jsonl"), "--config.data.level_field=levle"),
             setup=lambda c: _jsonl(c, "good.jsonl", _good_lines(c)),
             needles=["good.jsonl", "no row has the field data.level_field='levle'"]),
        Case(data, "empty training file", T, _train(*jsonl, jpath("empty.jsonl")),
             setup=lambda c: _write(c.dir + "/empty.jsonl", ""), needles=["empty.jsonl", "no usable prompts"]),
        Case(data, "parquet with the wrong columns", T,
             _train("--config.data.source=parquet", jpath("wrong.parquet")),
             setup=lambda c: _parquet(c.dir + "/wrong.parquet", [{"question": "1+1=", "answer": "2"}] * 4),
             needles=["wrong.parquet", "row 1", "prompt"]),
        Case(data, "parquet file that is not parquet", T,
             _train("--config.data.source=parquet", jpath("junk.parquet")),
             setup=lambda c: _write(c.dir + "/junk.parquet", b"PAR1 this is not parquet" * 10),
             needles=["junk.parquet", "not a readable parquet file"]),
        Case(data, "a 1 MB prompt is dropped, logged once, counted", T,
             _train(*jsonl, jpath("long.jsonl"), "--config.train.num_steps=2"),
             setup=lambda c: _jsonl(c, "long.jsonl", [*_good_lines(c)[:3],
                                                      json.dumps({"question": "1+1=" * 250_000, "answer": "2"}),
                                                      *_good_lines(c)[3:]]),
             expect="ok", check=_check_dropped),
        # ------------------------------------------------------------------ run directory
        Case(rund, "two writers on one workdir", T, None, custom=_two_writers, copy_run=False,
             setup=lambda c: (os.makedirs(c.dir + "/run"), setattr(c, "run", c.dir + "/run")) and None,
             needles=lambda c: ["in use by another run", f"pid {c.extra['first_pid']}"], check=_check_two_writers,
             timeout=900),
        Case(rund, "resume with group_size 4 -> 2", T, _train("--config.train.num_steps=3", "--config.rl.group_size=2"),
             copy_run=True, protect=_everything,
             needles=["rl.group_size (4 -> 2)", "--config.checkpoint.allow_changes=rl.group_size"]),
        Case(rund, "resume with strategy greso -> aero", T,
             _train("--config.train.num_steps=3", "--config.selection.strategy=aero"),
             copy_run=True, protect=_everything, needles=["selection.strategy ('greso' -> 'aero')"]),
        Case(rund, "resume with another model preset", T,
             _train("--config.train.num_steps=3", "--config.model.preset=tiny"),
             copy_run=True, protect=_everything, needles=["model.preset ('tiny-test' -> 'tiny')"]),
        Case(rund, "resume with a changed data file", T,
             _train("--config.train.num_steps=3", *jsonl, "--config.data.path={c.extra[jsonl]}"),
             setup=lambda c: c.extra.update(jsonl=c.good_jsonl),
             copy_run=True, protect=_everything, needles=["data.source ('arith' -> 'jsonl')", "data.path"]),
        Case(rund, "resume with allowed changes (num_steps, eval cadence) over a stale lock", T,
             _train("--config.train.num_steps=3", "--config.eval.every_steps=1", "--config.checkpoint.keep=5"),
             copy_run=True, setup=_stale_lock, protect=_history, expect="ok", check=_check_stale_lock),
        Case(rund, "resume with learning rate changed via allow_changes", T,
             _train("--config.train.num_steps=3", "--config.train.learning_rate=1e-4",
                    "--config.checkpoint.allow_changes=train.learning_rate"),
             copy_run=True, protect=_history, expect="ok", check=_check_allowed_lr),
        Case(rund, "num_steps 1 below the checkpoint's step 2", T, _train("--config.train.num_steps=1"),
             copy_run=True, protect=_everything, needles=["train.num_steps: 1 is below step 2"],
             check=_check_untouched_summary),
        Case(rund, "jsonl run with the default evaluation finishes with a summary", T,
             _train(*jsonl, "--config.data.path={c.good_jsonl}", "--config.train.num_steps=2"),
             expect="ok", check=_check_jsonl_run),
        # ------------------------------------------------------------------ damaged checkpoints
        Case(ckpt, "train: truncated file in step 2 -> falls back to step 1", T, _train("--config.train.num_steps=3"),
             copy_run=True, setup=_damage_latest("truncate"), protect=_history, expect="ok",
             check=_check_fallback_train),
        Case(ckpt, "evaluate: flipped bytes in step 2 -> evaluates step 1", E,
             lambda c: [f"--checkpoint={c.run}", *EVAL_FAST], copy_run=True, setup=_damage_latest("flip"),
             protect=_everything, expect="ok", check=_check_fell_back_to_step_1("evaluating workdir")),
        Case(ckpt, "export: a file of step 2 deleted -> exports step 1", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"], copy_run=True, setup=_damage_latest("delete"),
             protect=_everything, expect="ok", check=_check_fell_back_to_step_1("exported")),
        Case(ckpt, "train: no intact step -> one line naming step and file", T, _train("--config.train.num_steps=3"),
             copy_run=True, setup=_damage_all, protect=_everything,
             needles=["no intact checkpoint", "step 2: 2/train_state/", "step 1: 1/train_state/"]),
        Case(ckpt, "evaluate checkpoints/2 with flipped bytes", E,
             lambda c: [f"--checkpoint={c.run}/checkpoints/2", *EVAL_FAST], copy_run=True,
             setup=_damage_latest("flip"), protect=_everything, needles=["step 2 is damaged", "train_state"]),
        Case(ckpt, "export --step 2 with flipped bytes", X,
             lambda c: [f"--workdir={c.run}", "--step=2", f"--out={c.dir}/out"], copy_run=True,
             setup=_damage_latest("flip"), protect=_everything, prefix="export: ",
             needles=["step 2", "damaged", "train_state"]),
        Case(ckpt, "export --step 7 (no such step)", X,
             lambda c: [f"--workdir={c.run}", "--step=7", f"--out={c.dir}/out"], copy_run=True,
             protect=_everything, prefix="export: ", needles=["--step", "no step 7"]),
        Case(ckpt, "export into a non-empty --out", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/full"], copy_run=True,
             setup=lambda c: (os.makedirs(c.dir + "/full"), _write(c.dir + "/full/keep.txt", "mine")) and None,
             protect=lambda c: [*_everything(c), c.dir + "/full/keep.txt"], prefix="export: ",
             needles=["--out", "not an empty folder"]),
        Case(ckpt, "export of an intact run", X, lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"],
             copy_run=True, protect=_everything, expect="ok", check=_check_export_ok),
        # ------------------------------------------------------------------ damaged model folders
        Case(model, "evaluate: model.safetensors missing", E, eval_hf, copy_model=True,
             setup=lambda c: os.remove(c.model + "/model.safetensors"), needles=["{model}"]),
        Case(model, "evaluate: model.safetensors truncated", E, eval_hf, copy_model=True,
             setup=lambda c: os.truncate(c.model + "/model.safetensors",
                                         os.path.getsize(c.model + "/model.safetensors") - 1000),
             needles=["model.safetensors: tensor ", "outside"]),
        Case(model, "evaluate: overlapping data_offsets", E, eval_hf, copy_model=True,
             setup=lambda c: _rewrite_safetensors_header(c.model + "/model.safetensors", _overlap),
             needles=["model.safetensors: tensors model.layers.", "overlap"]),
        Case(model, "evaluate: safetensors header is not JSON", E, eval_hf, copy_model=True,
             setup=lambda c: _flip_header(c.model + "/model.safetensors"),
             needles=["model.safetensors: the header is not valid JSON"]),
        Case(model, "evaluate: config.json missing", E, eval_hf, copy_model=True,
             setup=lambda c: os.remove(c.model + "/config.json"), needles=["{model}"]),
        Case(model, "train: model.path with overlapping data_offsets", T, _train("--config.model.path={c.model}"),
             copy_model=True, setup=lambda c: _rewrite_safetensors_header(c.model + "/model.safetensors", _overlap),
             needles=["model.safetensors: tensors model.layers.", "overlap"]),
        Case(model, "train: model.path whose config.json is not JSON", T, _train("--config.model.path={c.model}"),
             copy_model=True, setup=lambda c: _write(c.model + "/config.json", "{\"hidden_size\": 64,"),
             needles=["config.json"]),
        Case(model, "train: model.path without model.safetensors", T, _train("--config.model.path={c.model}"),
             copy_model=True, setup=lambda c: os.remove(c.model + "/model.safetensors"), needles=["{model}"]),
        # ------------------------------------------------------------------ full disk
        Case(disk, "train: RLIMIT_FSIZE while checkpointing", T, _train("--config.train.num_steps=5"),
             copy_run=True, fsize_limit=lambda c: os.path.getsize(_largest_file(_ckpt(c, 2))) // 2,
             protect=lambda c: [os.path.join(c.run, "configs", "0.json")],
             needles=lambda c: [os.path.join(c.run, "checkpoints"), "File too large"], check=_check_full_disk),
        Case(disk, "export: RLIMIT_FSIZE while writing the weights", X,
             lambda c: [f"--workdir={c.run}", f"--out={c.dir}/out"], copy_run=True,
             fsize_limit=lambda c: os.path.getsize(os.path.join(c.hf, "model.safetensors")) // 2,
             protect=_everything, prefix="export: ", needles=lambda c: [f"{c.dir}/out", "File too large"],
             check=lambda c, r: [f"a partial {c.dir}/out is left"] if os.path.exists(f"{c.dir}/out") else []),
        # ------------------------------------------------------------------ fetch
        Case(data, "fetch: unknown data set name", F, lambda c: ["math5000", f"--dest={c.dir}/data"],
             prefix="fetch: ", needles=["math5000", "unknown data set"]),
    ]
    for label, text in _hostile_inputs("{canary}"):
        out.append(Case("hostile grader input", label, "greso_jax.rewards.math", None, expect="ok",
                        custom=_grade_case(lambda canary, t=text: t.replace("{canary}", canary)), check=_check_grade,
                        timeout=60))
    for i, case in enumerate(out, start=1):
        case.number = i
    return out


def _flip_header(file: str) -> None:
    raw = bytearray(open(file, "rb").read())
    raw[8] = ord("[")  # the header's opening brace
    _write(file, bytes(raw))


# ------------------------------------------------------------------------------------------ runner


def _nice() -> None:
    os.nice(19 - os.nice(0)) if os.nice(0) < 19 else None


def _subprocess(c: Ctx, module: str, args: list[str], fsize: int | None = None, timeout: float = 300) -> Result:
    def preexec():
        _nice()
        if fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    start = time.monotonic()
    try:
        p = subprocess.run([PY, "-m", module, *args], capture_output=True, text=True, timeout=timeout, env=ENV,
                           cwd=c.dir, preexec_fn=preexec)
    except subprocess.TimeoutExpired as e:
        return Result(None, _text(e.stdout), _text(e.stderr), time.monotonic() - start)
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - start)


def _text(x) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _hashes(paths: list[str]) -> dict[str, str | None]:
    return {p: (sha256_of(p) if os.path.exists(p) else None) for p in paths}


@dataclasses.dataclass
class Row:
    case: Case
    exit: str
    outcome: str
    line: str
    verdict: str
    seconds: float
    detail: str = ""


def run_case(case: Case, fixtures: dict, work: str) -> Row:
    c = Ctx(dir=os.path.join(work, f"case{case.number:02d}"), **fixtures)
    os.makedirs(c.dir)
    if case.copy_run:
        c.run = os.path.join(c.dir, "run")
        shutil.copytree(c.base_run, c.run)
    if case.copy_model:
        c.model = os.path.join(c.dir, "model")
        shutil.copytree(c.hf, c.model)
    if case.setup:
        case.setup(c)
    protected = case.protect(c) if case.protect else []
    before = _hashes(protected)
    if case.custom:
        result = case.custom(c)
    else:
        fsize = case.fsize_limit(c) if case.fsize_limit else None
        result = _subprocess(c, case.module, case.args(c), fsize=fsize, timeout=case.timeout)
    after = _hashes(protected)
    lost = [os.path.relpath(p, c.dir) for p in protected if before[p] != after[p]]
    fmt = dict(dir=c.dir, model=c.model, run=c.run)
    needles = case.needles(c) if callable(case.needles) else [n.format(**fmt) for n in case.needles]
    line = _last_line(result.stderr)
    problems = []
    if result.returncode is None:
        outcome = "hang"
    elif "Traceback (most recent call last)" in result.stderr:
        outcome = "traceback"
        line = _traceback_summary(result.stderr)
    elif result.returncode == 0:
        outcome = "ran fine"
        if case.expect == "error":
            outcome, problems = "silent wrong", ["exit 0 where an error was due"]
        if case.check:
            problems += case.check(c, result)
        if problems and outcome == "ran fine":
            outcome = "silent wrong"
        line = result.note or (case.expect == "ok" and _ok_note(result)) or line
    elif result.returncode == 2 and line.startswith(case.prefix):
        outcome = "one-line error"
        missing = [n for n in needles if n not in line]
        if missing:
            problems.append("the line lacks " + ", ".join(repr(n) for n in missing))
        if case.check and case.expect == "error":
            problems += case.check(c, result)
    else:
        outcome = "other"
        problems.append(f"exit {result.returncode}")
    if lost:
        outcome = "data lost"
        problems.append("changed: " + ", ".join(lost[:3]) + (f" (+{len(lost) - 3})" if len(lost) > 3 else ""))
    expected = "one-line error" if case.expect == "error" else "ran fine"
    verdict = "PASS" if outcome == expected and not problems else "FAIL"
    return Row(case, "timeout" if result.returncode is None else str(result.returncode), outcome, line, verdict,
               result.seconds, "; ".join(problems))


def _traceback_summary(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    return "traceback: " + (errors[-1] if errors else lines[-1])


def _ok_note(result: Result) -> str:
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    return "exit 0" + (f"; last: {lines[-1].strip()}" if lines else "")


def _cell(text: str, width: int = 150) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 1] + "…"


def table(rows: list[Row]) -> str:
    out = ["| # | category | case | exit | outcome | error line / what was checked | expected | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        expected = "one-line error" if r.case.expect == "error" else "ran fine"
        verdict = r.verdict + (f" ({_cell(r.detail, 120)})" if r.detail else "")
        out.append(f"| {r.case.number} | {r.case.category} | {_cell(r.case.name, 80)} | {r.exit} | {r.outcome} | "
                   f"`{_cell(r.line)}` | {expected} | {verdict} |")
    return "\n".join(out)


def tally(rows: list[Row]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    grader = [r for r in rows if r.case.category == "hostile grader input"]
    fails = [r for r in rows if r.verdict == "FAIL"]
    slowest = max((r.line for r in grader), default="", key=lambda s: float(re.search(r"in ([\d.]+) s", s).group(1))
                  if re.search(r"in ([\d.]+) s", s) else 0.0)
    return (f"{len(rows)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            + f"; {len(rows) - len(fails)} PASS, {len(fails)} FAIL"
            + (f"; grader {sum(r.verdict == 'PASS' for r in grader)}/{len(grader)} (slowest: {slowest})"
               if grader else ""))


# ------------------------------------------------------------------------------------------ fixtures


def make_fixtures(work: str) -> dict:
    from greso_jax.data.arith import make_arith_pools

    base = os.path.join(work, "base")
    run, hf, good = os.path.join(base, "run"), os.path.join(base, "hf"), os.path.join(base, "good.jsonl")
    if os.path.exists(good):  # --work DIR of an earlier invocation
        return dict(base_run=run, hf=hf, good_jsonl=good)
    os.makedirs(base)
    ctx = Ctx(dir=base, base_run=run, hf=hf, good_jsonl="")
    trained = _subprocess(ctx, "greso_jax.train", [f"--config={CONFIG}", f"--workdir={run}",
                                                   "--config.train.num_steps=2"], timeout=900)
    if trained.returncode != 0:
        sys.exit(f"fixture: the two-step training run failed:\n{trained.stderr[-3000:]}")
    exported = _subprocess(ctx, "greso_jax.export", [f"--workdir={run}", f"--out={hf}"])
    if exported.returncode != 0:
        sys.exit(f"fixture: export failed:\n{exported.stderr[-3000:]}")
    train_rows, _ = make_arith_pools(12, 0, 1)
    _jsonl(ctx, "good.jsonl", [json.dumps({"question": r.question, "answer": r.ground_truth}) for r in train_rows])
    os.remove(os.path.join(run, "run.lock")) if os.path.exists(os.path.join(run, "run.lock")) else None
    print(f"fixtures: trained in {trained.seconds:.0f} s, exported in {exported.seconds:.0f} s", file=sys.stderr)
    return dict(base_run=run, hf=hf, good_jsonl=good)


def _head(root: str) -> str:
    try:
        return subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                              timeout=30).stdout.strip()[:100] or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="regex on '<category>: <case>'; runs the matching cases")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once")
    parser.add_argument("--out", default="", help="also write the markdown here")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (its path is printed)")
    parser.add_argument("--work", default="", help="work here (kept); fixtures found here are reused")
    parser.add_argument("--root", default="", help="run the CLIs of another checkout (e.g. before a fix)")
    args = parser.parse_args()
    if args.root:
        global ROOT, CONFIG
        ROOT = os.path.abspath(args.root)
        CONFIG = os.path.join(ROOT, "tests", "trainer_config.py")
        ENV["PYTHONPATH"] = ROOT
    selected = [c for c in cases() if re.search(args.only, f"{c.category}: {c.name}")]
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="fault_cases_")
    for case in selected:
        shutil.rmtree(os.path.join(work, f"case{case.number:02d}"), ignore_errors=True)
    start = time.monotonic()
    try:
        fixtures = make_fixtures(work)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [pool.submit(run_case, case, fixtures, work) for case in selected]
            rows = []
            for case, future in zip(selected, futures):
                row = future.result()
                rows.append(row)
                print(f"{case.number:>3} {row.verdict} {row.outcome:<15} {row.seconds:5.1f} s  {case.name}",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep or args.work:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.monotonic() - start
    command = "python experiments/bench/fault_cases.py " + " ".join(sys.argv[1:])
    report = "\n".join([
        f"# Fault cases (issue 14), {datetime.date.today().isoformat()}", "",
        f"Command: `{command.strip()}` (from the repository root; JAX on CPU)", "",
        f"Package under test: {ROOT} at {_head(ROOT)}", "",
        f"Wall time: {wall / 60:.1f} min on {os.cpu_count()} CPUs ({socket.gethostname()}).", "",
        tally(rows), "", table(rows), ""])
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
