"""How a fault case runs and what its outcome is (tests/fault_cases.py holds the cases).

A case runs one CLI (train, evaluate, export, data.fetch) as a real subprocess on real files in its
own folder, or its own `custom` function (two writers at once, the grader in a child), and is
classified: one-line error (exit status 2, stderr's last line starts with the CLI's prefix), traceback,
ran fine, silent wrong (exit 0 where an error was due, or outputs that fail the case's check), data
lost (a protected file changed or vanished), hang (past the case's timeout) or other (another exit
status without a traceback). A case passes when its outcome is the expected one and nothing is wrong
with it: the error line names every needle, the check finds no problem, the protected files are
byte-identical. `report` turns the rows of a run into the markdown table (conftest's --fault-table).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Callable

from greso_jax.core.files import sha256_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests", "trainer_config.py")  # the tiny two-step run's config
ENV = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
EVAL_FAST = ["--benchmarks=synthetic", "--num_samples=1", "--max_problems=2", "--grading_workers=0"]

# Sets RLIMIT_FSIZE (a full disk: writing past it fails with EFBIG), then execs Python with the rest of
# argv. A launcher rather than preexec_fn, so that no Python runs in a forked child of the multithreaded
# test process.
_FILE_LIMIT_LAUNCHER = ("import os, resource, sys; limit = int(sys.argv[1]); "
                        "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
                        "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")


@dataclasses.dataclass
class Ctx:
    """One case's folder and the shared fixtures (read-only: cases copy what they damage)."""

    dir: str
    base_run: str  # a finished two-step run (checkpoints 1 and 2)
    hf: str  # that run exported as a Hugging Face folder (char tokenizer.json)
    good_jsonl: str  # 12 arithmetic rows as a jsonl training file
    run: str = ""  # the case's copy of base_run (when the case asks for one)
    model: str = ""  # the case's copy of hf
    extra: dict = dataclasses.field(default_factory=dict)  # what a setup tells the case's check


@dataclasses.dataclass
class Result:
    returncode: int | None  # None: it ran past its timeout
    stdout: str
    stderr: str
    seconds: float
    note: str = ""  # what the check measured, shown in the table instead of the last line


@dataclasses.dataclass
class Case:
    """One fault and what the CLI must do about it: `expect` "error" (a one-line error naming every
    needle, exit status 2, no traceback) or "ok" (exit 0 and `check` finds no problem)."""

    category: str
    name: str
    module: str  # the CLI: greso_jax.train, ...
    args: Callable[[Ctx], list[str]] | None
    expect: str = "error"
    needles: Callable[[Ctx], list[str]] | list[str] = ()  # what the error line must contain ({dir}, {run}, {model})
    setup: Callable[[Ctx], None] | None = None  # prepares or damages the case's files before the run
    check: Callable[[Ctx, Result], list[str]] | None = None  # problems with the outputs ([] = fine)
    protect: Callable[[Ctx], list[str]] | None = None  # files that must stay byte-identical
    copy_run: bool = False
    copy_model: bool = False
    prefix: str = "error: "  # how the CLI's error line starts
    fsize_limit: Callable[[Ctx], int] | None = None  # RLIMIT_FSIZE for the child (a full disk)
    timeout: float = 300
    custom: Callable[[Ctx], Result] | None = None  # runs the case itself instead of `module`
    number: int = 0  # its row in the table, set by the case list


@dataclasses.dataclass
class Row:
    case: Case
    exit: str
    outcome: str
    line: str  # the error line, or what was checked
    verdict: str  # PASS or FAIL
    seconds: float
    detail: str = ""  # what was wrong


def run_python(cwd: str, argv: list[str], *, fsize: int | None = None, timeout: float = 300,
               stdin: str | None = None) -> Result:
    """`python *argv` (["-m", module, ...] or ["-c", code]) in `cwd`, with file size limit `fsize` if given."""
    command = [sys.executable, *(["-c", _FILE_LIMIT_LAUNCHER, str(fsize)] if fsize else []), *argv]
    start = time.monotonic()
    try:
        p = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        return Result(None, _text(e.stdout), _text(e.stderr), time.monotonic() - start)
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - start)


def run_cli(c: Ctx, module: str, args: list[str], **kwargs) -> Result:
    return run_python(c.dir, ["-m", module, *args], **kwargs)


def _text(x) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _hashes(paths: list[str]) -> dict[str, str | None]:
    return {p: (sha256_of(p) if os.path.exists(p) else None) for p in paths}


def _prepare(case: Case, fixtures: dict, folder: str) -> Ctx:
    c = Ctx(dir=folder, **fixtures)
    os.makedirs(c.dir, exist_ok=True)
    if case.copy_run:
        c.run = os.path.join(c.dir, "run")
        shutil.copytree(c.base_run, c.run)
    if case.copy_model:
        c.model = os.path.join(c.dir, "model")
        shutil.copytree(c.hf, c.model)
    if case.setup:
        case.setup(c)
    return c


def run_case(case: Case, fixtures: dict, folder: str) -> Row:
    """Runs `case` in `folder` on copies of `fixtures` (Ctx's base_run, hf, good_jsonl) -> its row."""
    c = _prepare(case, fixtures, folder)
    protected = case.protect(c) if case.protect else []
    before = _hashes(protected)
    if case.custom:
        result = case.custom(c)
    else:
        fsize = case.fsize_limit(c) if case.fsize_limit else None
        result = run_cli(c, case.module, case.args(c), fsize=fsize, timeout=case.timeout)
    lost = [os.path.relpath(p, c.dir) for p in protected if before[p] != _hashes([p])[p]]
    fmt = dict(dir=c.dir, model=c.model, run=c.run)
    needles = case.needles(c) if callable(case.needles) else [n.format(**fmt) for n in case.needles]
    line = last_line(result.stderr)
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
    verdict = "PASS" if outcome == expected_outcome(case) and not problems else "FAIL"
    return Row(case, "timeout" if result.returncode is None else str(result.returncode), outcome, line, verdict,
               result.seconds, "; ".join(problems))


def expected_outcome(case: Case) -> str:
    return "one-line error" if case.expect == "error" else "ran fine"


def _traceback_summary(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    return "traceback: " + (errors[-1] if errors else lines[-1])


def _ok_note(result: Result) -> str:
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    return "exit 0" + (f"; last: {lines[-1].strip()}" if lines else "")


# ------------------------------------------------------------------------------------------ the report


def _cell(text: str, width: int = 150) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 1] + "…"


def table(rows: list[Row]) -> str:
    out = ["| # | category | case | exit | outcome | error line / what was checked | expected | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = r.verdict + (f" ({_cell(r.detail, 120)})" if r.detail else "")
        out.append(f"| {r.case.number} | {r.case.category} | {_cell(r.case.name, 80)} | {r.exit} | {r.outcome} | "
                   f"`{_cell(r.line)}` | {expected_outcome(r.case)} | {verdict} |")
    return "\n".join(out)


def tally(rows: list[Row]) -> str:
    """"N cases: n one-line error, m ran fine; p PASS, f FAIL; grader g/G (slowest: ...)"."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    grader = [r for r in rows if r.case.category == "hostile grader input"]
    fails = [r for r in rows if r.verdict == "FAIL"]

    def grade_seconds(line: str) -> float:
        m = re.search(r"in ([\d.]+) s", line)
        return float(m.group(1)) if m else 0.0

    slowest = max((r.line for r in grader), default="", key=grade_seconds)
    return (f"{len(rows)} cases: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            + f"; {len(rows) - len(fails)} PASS, {len(fails)} FAIL"
            + (f"; grader {sum(r.verdict == 'PASS' for r in grader)}/{len(grader)} (slowest: {slowest})"
               if grader else ""))


def _head(root: str) -> str:
    try:
        return subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                              timeout=30).stdout.strip()[:100] or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


@dataclasses.dataclass
class CaseLog:
    """The rows of the fault cases run so far, in their order, and when the first started and the last ended."""

    rows: list[Row] = dataclasses.field(default_factory=list)
    start: float = dataclasses.field(default_factory=time.monotonic)
    end: float = 0.0

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.end = time.monotonic()


def report(rows: list[Row], wall_s: float, command: str) -> str:
    """The markdown report of a run of the fault cases: date, command, commit, wall time, tally, table."""
    return "\n".join([
        f"# Fault cases, {datetime.date.today().isoformat()}", "",
        f"Command: `{command}` (from the repository root; JAX on CPU)", "",
        f"Package under test: {ROOT} at {_head(ROOT)}", "",
        f"Wall time: {wall_s / 60:.1f} min, the shared fixtures and the cases, on {os.cpu_count()} CPUs "
        f"({socket.gethostname()}).", "",
        tally(rows), "", table(rows), ""])
