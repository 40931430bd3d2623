"""A run directory with one writer: the workdir lock, the resume-compatibility check, each launch's config.

`open_run_dir` is called before a run writes anything: it takes the lock, picks the newest
intact checkpoint, and refuses a resume whose config changes what the run means. Only fields
in MAY_CHANGE may differ from the checkpoint's config; anything else (new fields included)
refuses unless named in checkpoint.allow_changes, so a field added later is safe by default.

`saved_step` is the one answer to "which verified step, and which config describes it" for
resume, evaluate and export: a resume may change fields (checkpoint.allow_changes), so a step
is described by the config saved in its own metadata, not by the latest launch's config.json.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import difflib
import fcntl
import json
import os
import socket
import time
import weakref
from typing import Any

from greso_jax import selection
from greso_jax.run.checkpoint import (CheckpointError, checkpoint_dir, choose_restore_step, finished_steps,
                                      manifest_problem, move_aside, read_step_meta)
from greso_jax.config import get_config
from greso_jax.run.records import read_metrics
from greso_jax.core.specs import ConfigError

LOCK_FILE = "run.lock"
CONFIGS_FOLDER = "configs"
LAUNCHES = "launches.jsonl"
PREVIOUS_RECORDS = "previous_records"  # the records of a run started again without its checkpoints
# What a run leaves besides its checkpoints: a workdir holding any of them holds a run.
RECORDS = ("metrics.jsonl", "summary.json", "groups.jsonl", "plots", "tensorboard", "config.json", CONFIGS_FOLDER)

# Fields a resume may change: they change cadence, layout or evaluation, not what is trained.
# An entry ending in "." allows its whole section.
MAY_CHANGE = ("train.num_steps", "train.quiet", "train.host_check_every_steps", "train.max_bad_steps",
              "eval.", "checkpoint.", "mesh.", "logging.", "model.remat", "data.grading_workers",
              "data.data_dir",  # where a named data set is found; which set it is stays data.dataset
              "train.warmstart_cache_dir",  # where the warm start is cached; its key says what it is
              "sampling.max_rows_per_call", "sampling.prompt_length_buckets", "sampling.row_buckets",
              "sampling.min_compact_rows", "sampling.compact_shrink", "sampling.live_prompts",
              "sampling.response_chunks",
              "rl.update_layout", "rl.update_bucket_ratio")  # the same update, to float rounding


class RunDirError(ConfigError):
    """The workdir cannot be used as asked (held by another run, incompatible resume, ...); one line."""


def _process_start_ticks(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), which tells a reused PID apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _holder_alive(holder: dict) -> bool:
    """Whether the process named in a lock file still runs (only knowable on its own host)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    ticks = _process_start_ticks(holder["pid"])
    return ticks is not None and ticks == holder.get("start_ticks")


def _describe(holder: dict) -> str:
    if not holder:
        return "a process that is starting and has not written its name yet"
    return f"host {holder.get('host')}, pid {holder.get('pid')}, started {holder.get('started')}"


class WorkdirLock:
    """An exclusive flock on `workdir/run.lock`, which names its holder. The kernel drops the flock
    when the holder dies, so a lock left by a killed run is taken over (with a warning)."""

    def __init__(self, workdir: str, *, log=print):
        self.path = os.path.join(workdir, LOCK_FILE)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read()
            for _ in range(20):  # a holder that is starting takes the flock first, then writes its name
                if holder:
                    break
                time.sleep(0.05)
                holder = self._read()
            self._file.close()
            raise RunDirError(f"{workdir} is in use by another run ({_describe(holder)}); "
                              f"wait for it to finish or use another --workdir") from None
        previous = self._read()
        # Filesystems that ignore flock (some network mounts) still show a live holder here.
        if previous and _holder_alive(previous) and previous.get("pid") != os.getpid():
            self._file.close()
            raise RunDirError(f"{workdir} is in use by another run ({_describe(previous)}); "
                              f"wait for it to finish or use another --workdir")
        if previous:
            log(f"warning: taking over the lock of a run that did not finish ({_describe(previous)})")
        me = {"host": socket.gethostname(), "pid": os.getpid(), "start_ticks": _process_start_ticks(os.getpid()),
              "started": datetime.datetime.now().isoformat(timespec="seconds")}
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps(me))
        self._file.flush()
        self.workdir = workdir
        # An error exit releases it too; only a killed run leaves its name. A weak reference: a lock
        # its owner dropped is closed by the garbage collector, as before, not held until exit.
        me_ref = weakref.ref(self)
        self._at_exit = lambda: me_ref() is not None and me_ref().release()
        atexit.register(self._at_exit)

    def _read(self) -> dict:
        self._file.seek(0)
        try:
            return json.loads(self._file.read() or "{}")
        except ValueError:
            return {"host": "?", "pid": "?", "started": "? (unreadable lock file)"}

    def release(self) -> None:
        """Empties the lock file (a clean exit leaves no holder behind) and drops the flock; in a
        workdir that holds nothing else (a launch that failed before writing), removes the file."""
        if self._file.closed:
            return
        self._file.seek(0)
        self._file.truncate()
        try:
            if os.listdir(self.workdir) == [LOCK_FILE]:
                os.remove(self.path)
        except OSError:  # the workdir went away meanwhile: nothing to tidy
            pass
        self._file.close()
        atexit.unregister(self._at_exit)


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _resolved(strategy):
    try:
        return selection.resolve_strategy(strategy)
    except (KeyError, ValueError):  # a strategy no longer registered: compare its name as written
        return strategy


def _meaningful(flat: dict[str, Any], active: str) -> dict[str, Any]:
    """Names the strategy by its registered name (not an alias) and drops the sections of strategies
    other than `active`, the one the resumed run uses: their settings change nothing it does."""
    flat = dict(flat, **{"selection.strategy": _resolved(flat.get("selection.strategy"))})
    sections = {f"selection.{name}." for name in selection.STRATEGIES if name != active}
    return {k: v for k, v in flat.items() if not any(k.startswith(s) for s in sections)}


def _may_change(field: str) -> bool:
    return any(field == m or (m.endswith(".") and field.startswith(m)) for m in MAY_CHANGE)


def with_todays_defaults(saved: dict) -> dict:
    """A run's saved config (a plain dict) with the fields added to the code since it was written at
    today's defaults: a field that did not exist cannot have been used, so its default is what the
    run did."""
    merged = json.loads(get_config().to_json_best_effort())

    def fill(into: dict, values: dict) -> None:
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                fill(into[key], value)
            else:
                into[key] = value

    fill(merged, saved)
    return merged


def config_changes(saved: dict, config) -> dict[str, tuple[Any, Any]]:
    """{field: (saved value, new value)} for every field that differs. A field the saved config
    lacks (added to the code later) counts as changed only when it differs from its default."""
    active = _resolved(config.selection.strategy)
    current = _meaningful(_flatten(json.loads(config.to_json_best_effort())), active)
    old = _meaningful(_flatten(with_todays_defaults(saved)), active)
    changes = {}
    for field, value in current.items():
        before = old.get(field)
        if before != value:
            changes[field] = (before, value)
    return changes


def _allowed(config, known: set[str]) -> set[str]:
    names = {n.strip() for n in config.checkpoint.allow_changes.split(",") if n.strip()}
    for name in sorted(names - known):
        close = difflib.get_close_matches(name, sorted(known), n=1)
        raise RunDirError(f"checkpoint.allow_changes: {name!r} is not a config field"
                          + (f"; did you mean {close[0]!r}?" if close else ""))
    return names


def check_resume(saved: dict, config, step: int, *, what: str = "") -> dict[str, tuple[Any, Any]]:
    """Raises RunDirError listing the fields that differ from the checkpoint's config (or the
    records' config, described by `what`) and may not change; returns every change (allowed ones
    included) for the launch record."""
    changes = config_changes(saved, config)
    allowed = _allowed(config, set(_flatten(json.loads(config.to_json_best_effort()))))
    refused = sorted(f for f in changes if not _may_change(f) and f not in allowed)
    if refused:
        listed = ", ".join(f"{f} ({changes[f][0]!r} -> {changes[f][1]!r})" for f in refused)
        raise RunDirError(f"{what or f'resuming step {step}'} with a different {listed}: these change what the run means; "
                          f"use a new --workdir, or --config.checkpoint.allow_changes={','.join(refused)}")
    return changes


@dataclasses.dataclass(frozen=True)
class SavedStep:
    """A verified checkpoint step of a run and the config it was saved with."""

    step: int
    config: dict | None  # at today's defaults (`with_todays_defaults`); None: its metadata records none


def saved_step(workdir: str, step: int | None = None, *, log=print, move_damaged: bool = False,
               below: int | None = None) -> SavedStep | None:
    """`step` of the run in `workdir` checked against its manifest, or (None) the newest intact step
    (`choose_restore_step`: damaged newer steps are reported through `log`, and moved aside with
    `move_damaged`; only steps below `below`, if given), with the config saved in its metadata. None
    when the run has no finished step. Raises CheckpointError with one line naming the folder and
    step: no such step, a damaged one (one without a manifest too, unless it is the only step)."""
    folder = checkpoint_dir(workdir)
    if step is None:
        step = choose_restore_step(folder, log=log, move_damaged=move_damaged, below=below)
        if step is None:
            return None
    else:
        steps = finished_steps(folder) if os.path.isdir(folder) else []
        if not steps:
            return None
        if step not in steps:
            raise CheckpointError(f"{folder} has no step {step} (steps: {', '.join(map(str, steps))})")
        damage = manifest_problem(folder, step, log=log)
        if damage:
            raise CheckpointError(f"step {step} is damaged: {os.path.join(folder, damage)}")
    saved = (read_step_meta(folder, step) or {}).get("config")
    return SavedStep(step=step, config=with_todays_defaults(saved) if saved is not None else None)


@dataclasses.dataclass
class RunDir:
    """An opened workdir: the step to resume from (0: a fresh run) and the lock this process holds."""

    workdir: str
    start_step: int
    changes: dict[str, tuple[Any, Any]]
    lock: WorkdirLock | None
    config: Any = None
    log: Any = print
    # What record_launch wrote: (per-launch config file, whether it made it, launches.jsonl's size before)
    _launch: tuple[str, bool, int] | None = None
    _fell_back_from: list[int] = dataclasses.field(default_factory=list)

    def record_launch(self, config) -> str:
        """Writes config.json (the latest launch's config), configs/<start step>.json (never
        overwritten: a second launch from the same step gets <step>-<n>.json) and one line in
        configs/launches.jsonl with the changed fields. Returns the per-launch file."""
        text = config.to_json_best_effort(indent=2)
        folder = os.path.join(self.workdir, CONFIGS_FOLDER)
        os.makedirs(folder, exist_ok=True)
        path, n = os.path.join(folder, f"{self.start_step}.json"), 1
        while os.path.exists(path) and open(path).read() != text:
            path, n = os.path.join(folder, f"{self.start_step}-{n}.json"), n + 1
        launches = os.path.join(folder, LAUNCHES)
        self._launch = (path, not os.path.exists(path), os.path.getsize(launches) if os.path.exists(launches) else 0)
        with open(path, "w") as f:
            f.write(text)
        with open(os.path.join(self.workdir, "config.json"), "w") as f:
            f.write(text)
        record = {"step": self.start_step, "time": datetime.datetime.now().isoformat(timespec="seconds"),
                  "host": socket.gethostname(), "pid": os.getpid(), "config": os.path.relpath(path, self.workdir),
                  "changed": {k: list(v) for k, v in self.changes.items()}}
        if self._fell_back_from:  # the damaged steps this launch set aside, newest first
            record["fell_back_from"] = list(self._fell_back_from)
        with open(launches, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        return path

    def fall_back(self, step: int, problem: str) -> int:
        """The step to resume from instead of `step`, which restored as `problem` (non-finite state):
        `step` is reported and (by the lock holder) moved aside, and the newest intact older step is
        checked against the config as a resume would be. Raises CheckpointError when there is none."""
        self.log(f"checkpoint step {step} is damaged ({problem}); falling back to an older step")
        if self.lock is not None:
            move_aside(checkpoint_dir(self.workdir), step)
        self.start_step, self.changes = _resume_point(self.workdir, self.config, self.log, move_damaged=False,
                                                      below=step)
        if not self.start_step:  # a fresh start would overwrite the records of the run it belongs to
            raise CheckpointError(f"{checkpoint_dir(self.workdir)}: no intact checkpoint: step {problem}; "
                                  "no older step")
        self._fell_back_from.append(step)
        if self._launch is not None:  # recorded as resuming `step`: record the step it resumes instead
            self._unrecord_launch()
            self.record_launch(self.config)
        return self.start_step

    def _unrecord_launch(self) -> None:
        """Takes back what record_launch wrote: its launches.jsonl line and the per-launch config
        file it made (config.json is written again by the next record_launch)."""
        path, made, size = self._launch
        if made:
            os.remove(path)
        with open(os.path.join(self.workdir, CONFIGS_FOLDER, LAUNCHES), "r+") as f:
            f.truncate(size)
        self._launch = None

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()


def _recorded_steps(workdir: str) -> int | None:
    """The last step in metrics.jsonl; None: no metrics recorded."""
    rows = read_metrics(workdir)
    return rows[-1].get("step") if rows else None


def check_records(workdir: str, config, log) -> dict[str, tuple[Any, Any]]:
    """A workdir without a checkpoint but with a run's records (metrics.jsonl, summary.json,
    configs/): the run's identity is its last launch's config.json, and a config that changes what
    that run means is refused exactly as a resume would be, before anything is written. The same
    run starts again from step 0 after saying so, its old records moved to previous_records/<time>/
    (nothing is overwritten). Returns the changes for the launch record ({} without records)."""
    present = [n for n in RECORDS if os.path.exists(os.path.join(workdir, n))]
    last = _recorded_steps(workdir)
    if last is None and "summary.json" not in present:  # launched before, but nothing was trained or recorded
        return {}
    described = f"{workdir} holds the records of a run ({', '.join(present)}" + (
        f", steps to {last}" if last is not None else "") + ") but no checkpoint"
    try:
        with open(os.path.join(workdir, "config.json")) as f:
            recorded = json.load(f)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{described}, and no readable config.json to tell which run ({' '.join(str(e).split())}); "
                          "use a new --workdir") from None
    changes = check_resume(recorded, config, 0, what=described + ": starting it again")
    target = os.path.join(workdir, PREVIOUS_RECORDS, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(target, exist_ok=True)
    for name in present:
        if name != CONFIGS_FOLDER and name != "config.json":  # the launch history goes on
            os.replace(os.path.join(workdir, name), os.path.join(target, name))
    log(f"{described}: starting the same run again from step 0; its old records are in {target}")
    return changes


def _resume_point(workdir: str, config, log, *, move_damaged: bool, below: int | None = None):
    """(step, changes): the newest intact step (below `below`) that `config` may resume, 0 for none
    (then the workdir's records, if any, are checked by the lock holder: `check_records`)."""
    saved = saved_step(workdir, log=log, move_damaged=move_damaged, below=below)
    if not saved:
        return 0, (check_records(workdir, config, log) if move_damaged and below is None else {})
    step = saved.step
    if saved.config is None:
        raise RunDirError(f"{checkpoint_dir(workdir)}/{step}: records no config to check a resume against")
    changes = check_resume(saved.config, config, step)
    for field, (old, new) in changes.items():
        log(f"resume: {field} changes from {old!r} to {new!r}")
    if step > config.train.num_steps:
        raise RunDirError(f"train.num_steps: {config.train.num_steps} is below step {step}, where the run in "
                          f"{workdir} stands; nothing to do (raise it to continue, or evaluate a step with "
                          f"python -m greso_jax.evaluate --checkpoint {workdir}/checkpoints/<step>)")
    return step, changes


def open_run_dir(workdir: str, config, *, is_main: bool = True, log=print) -> RunDir:
    """Locks `workdir` (process 0 only), picks the newest intact checkpoint and checks that `config`
    may resume it. Writes nothing but the lock file (and moves damaged steps aside); raises
    RunDirError (a ConfigError) or checkpoint.CheckpointError with a one-line message."""
    os.makedirs(workdir, exist_ok=True)
    lock = WorkdirLock(workdir, log=log) if is_main else None
    try:
        _allowed(config, set(_flatten(json.loads(config.to_json_best_effort()))))  # a typo fails fresh runs too
        read_metrics(workdir)  # an unreadable record fails before this launch writes anything
        step, changes = _resume_point(workdir, config, log, move_damaged=is_main)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return RunDir(workdir=workdir, start_step=step, changes=changes, lock=lock, config=config, log=log)
