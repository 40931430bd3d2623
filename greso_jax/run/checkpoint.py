"""Orbax checkpoints of everything a run needs to resume exactly.

A run keeps its checkpoints in `<workdir>/checkpoints/<step>/`. One checkpoint holds three
items: `train_state` (parameters, optimiser state, update count: sharded jax arrays),
`selector` (the selector's per-prompt history, NumPy) and `meta` (JSON: step, data-iterator
state, every host's under multi-host, cumulative counters, the config). Random keys are not stored: every key is derived
from (seed, step), so the step is enough.

After a step is written, `manifest.json` in its folder records every file's size and SHA-256;
`choose_restore_step` checks it before anything is restored, so a damaged or partial step is
reported and skipped instead of being restored (or crashing orbax) on every restart. A step
without a manifest is damaged too (unless it is the only one), and restored state is checked
finite before it is used: nothing unverified trains on.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from greso_jax.core.files import sha256_of
from greso_jax.parallel import multihost
from flax import nnx

TRAIN_STATE, SELECTOR, META = "train_state", "selector", "meta"
ITEM_NAMES = (TRAIN_STATE, SELECTOR, META)
CHECKPOINTS_FOLDER = "checkpoints"
MANIFEST = "manifest.json"
DAMAGED_FOLDER = "damaged_checkpoints"  # damaged steps are moved here (not deleted: they may be inspected)


class NonFiniteCheckpointError(RuntimeError):
    """Raised instead of writing a checkpoint whose parameters or optimiser state hold NaN/inf."""


class CheckpointError(ValueError):
    """A missing step, or a checkpoint that does not fit the model it is restored into; the message
    names the folder and the step."""


class CheckpointWriteError(CheckpointError):
    """A step could not be written (e.g. a full disk); the previous steps are untouched."""


def checkpoint_dir(workdir: str) -> str:
    """The folder under a run's workdir that holds its checkpoints."""
    return os.path.join(workdir, CHECKPOINTS_FOLDER)


def finished_steps(checkpoint_dir: str) -> list[int]:
    """The finished steps in `checkpoint_dir`, ascending. Orbax writes a step under a temporary
    name and renames it when complete, so only all-digit folder names are finished."""
    return sorted(int(name) for name in os.listdir(checkpoint_dir)
                  if name.isdigit() and os.path.isdir(os.path.join(checkpoint_dir, name)))


def latest_step(checkpoint_dir: str) -> int | None:
    """The highest finished step in `checkpoint_dir` (None: none)."""
    steps = finished_steps(checkpoint_dir)
    return steps[-1] if steps else None


def _step_files(step_dir: str) -> list[str]:
    """Every file of a step folder (relative paths, sorted) except the manifest itself."""
    files = []
    for root, _, names in os.walk(step_dir):
        files += [os.path.relpath(os.path.join(root, n), step_dir) for n in names]
    return sorted(f for f in files if f != MANIFEST)


def write_manifest(step_dir: str) -> None:
    """Records the size and SHA-256 of every file of a finished step in `step_dir/manifest.json`
    (written to a temporary name and renamed: a manifest is complete or absent)."""
    files = {f: {"size": os.path.getsize(os.path.join(step_dir, f)), "sha256": sha256_of(os.path.join(step_dir, f))}
             for f in _step_files(step_dir)}
    tmp = os.path.join(step_dir, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"files": files}, f, indent=1)
    os.replace(tmp, os.path.join(step_dir, MANIFEST))


def step_damage(step_dir: str) -> str | None:
    """None when every file of the step matches its manifest, else "<file>: <what is wrong>"
    (the file relative to the checkpoints folder). Raises FileNotFoundError without a manifest."""
    with open(os.path.join(step_dir, MANIFEST)) as f:
        try:
            files = json.load(f)["files"]
        except (ValueError, KeyError):
            return f"{MANIFEST}: not a valid manifest"
    name = os.path.basename(step_dir)
    for rel, expected in sorted(files.items()):
        path = os.path.join(step_dir, rel)
        if not os.path.exists(path):
            return f"{name}/{rel}: missing"
        size = os.path.getsize(path)
        if size != expected["size"]:
            return f"{name}/{rel}: {size} bytes, the manifest says {expected['size']} (truncated or partial)"
        if sha256_of(path) != expected["sha256"]:
            return f"{name}/{rel}: content differs from the manifest (SHA-256 mismatch)"
    return None


def read_step_meta(checkpoint_dir: str, step: int) -> dict | None:
    """A step's JSON metadata item (step, data state, counters, config), or None when unreadable."""
    try:
        with open(os.path.join(checkpoint_dir, str(step), META, "metadata")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def move_aside(checkpoint_dir: str, step: int) -> str:
    """Moves a damaged step to the workdir's damaged_checkpoints/ (kept for inspection, out of orbax's
    sight: it neither restores nor overwrites it) and returns where it went."""
    target = os.path.join(os.path.dirname(checkpoint_dir), DAMAGED_FOLDER, f"{step}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.move(os.path.join(checkpoint_dir, str(step)), target)
    return target


def manifest_problem(checkpoint_dir: str, step: int, *, log=print) -> str | None:
    """What is wrong with `step` against its manifest (None: intact). A step without a manifest (a
    save cut short between writing the step and its manifest: SIGKILL, a crash) counts as damaged,
    unless it is the only step: then it is used, named as unverified in one line."""
    try:
        return step_damage(os.path.join(checkpoint_dir, str(step)))
    except FileNotFoundError:
        if finished_steps(checkpoint_dir) == [step]:
            log(f"checkpoint step {step} has no {MANIFEST} (its save was cut short) and is the only step; "
                "using it unverified")
            return None
        return f"{step}/{MANIFEST}: missing (its save was cut short)"


def choose_restore_step(checkpoint_dir: str, *, log=print, move_damaged: bool = True,
                        below: int | None = None) -> int | None:
    """The newest step (below `below`, if given) whose files match its manifest (None: no steps).
    Damaged steps newer than it are reported in one line each and, with `move_damaged` (the one
    process that may write), moved aside (`move_aside`). Raises CheckpointError naming each step
    and file when no step is intact."""
    if not os.path.isdir(checkpoint_dir):
        return None
    steps = [s for s in reversed(finished_steps(checkpoint_dir)) if below is None or s < below]
    damaged: list[tuple[int, str]] = []
    for step in steps:
        problem = manifest_problem(checkpoint_dir, step, log=log)
        if problem is None and read_step_meta(checkpoint_dir, step) is None:
            problem = f"{step}/{META}/metadata: missing or not JSON"
        if problem is None:
            for bad_step, _ in damaged if move_damaged else ():
                move_aside(checkpoint_dir, bad_step)
            return step
        damaged.append((step, problem))
        log(f"checkpoint step {step} is damaged ({problem}); falling back to an older step")
    if damaged:
        raise CheckpointError(f"{checkpoint_dir}: no intact checkpoint: "
                              + "; ".join(f"step {s}: {p}" for s, p in damaged))
    return None


def _all_finite(tree) -> bool:
    leaves = [x for x in jax.tree_util.tree_leaves(tree)
              if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)]
    if not leaves:
        return True
    return bool(jax.device_get(jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))))


def _as_restore_target(tree):
    """Arrays -> ShapeDtypeStructs with their shardings, so orbax restores onto the current mesh
    (which may differ from the one that saved)."""
    def target(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        return x
    return jax.tree.map(target, tree)


class Checkpointer:
    """Keeps the last `keep` checkpoints under `directory`; saves every `every_steps` steps and
    writes each finished step's manifest (process 0)."""

    def __init__(self, directory: str, *, keep: int = 3, every_steps: int = 50, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        self.every_steps = every_steps
        # cleanup_tmp_directories: a save interrupted by a crash or a full disk leaves a temporary
        # folder behind; it holds nothing restorable.
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, cleanup_tmp_directories=True,
                                               enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options,
                                              item_names=ITEM_NAMES)
        self._without_manifest: list[int] = []  # saved steps whose manifest is not written yet
        self._writes_manifests = jax.process_index() == 0
        self._failed = False

    def should_save(self, step: int, final: bool = False) -> bool:
        """Whether to save at `step`; also writes the manifests of saves that finished in the
        background since the last call (it is called every step)."""
        self._write_manifests(block=False)
        return final or (self.every_steps > 0 and step % self.every_steps == 0)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, *, train_state: Any, selector_state: dict, meta: dict) -> None:
        if not _all_finite(train_state):
            raise NonFiniteCheckpointError(f"step {step}: parameters or optimiser state are not finite; "
                                           "refusing to checkpoint")
        selector_state = {k: np.asarray(v) for k, v in selector_state.items()}
        # A save still in flight is finished first, so that its failure (a full disk) names its own
        # step, not this one (orbax would raise it from this save).
        self._write_manifests(block=bool(self._without_manifest))
        try:
            self._manager.save(step, args=ocp.args.Composite(**{
                TRAIN_STATE: ocp.args.StandardSave(train_state),
                SELECTOR: ocp.args.StandardSave(selector_state),
                META: ocp.args.JsonSave(meta)}), force=True)
        except Exception as e:  # orbax and tensorstore raise many types for an I/O failure
            raise self._write_error(step, e) from e
        self._without_manifest.append(step)
        if not self._manager.is_saving_in_progress():
            self._write_manifests(block=False)

    def _write_error(self, step: int, error: Exception) -> CheckpointWriteError:
        self._failed = True
        previous = max((s for s in self._manager.all_steps() if s < step and s not in self._without_manifest),
                       default=None)  # a step whose save has not finished is not intact
        what = " ".join(str(error).split())
        if len(what) > 400:  # tensorstore's message starts with the item and ends with the file and the cause
            what = what[:150] + " ... " + what[-250:]
        kept = f"step {previous} is intact" if previous is not None else "no earlier step exists"
        return CheckpointWriteError(f"checkpoint step {step}: writing under {self.directory} failed ({what}); {kept}")

    def _write_manifests(self, *, block: bool) -> None:
        if not self._without_manifest:
            return
        if block:
            try:
                self._manager.wait_until_finished()
            except Exception as e:  # an async save failed in the background
                raise self._write_error(self._without_manifest[-1], e) from e
        elif self._manager.is_saving_in_progress():
            return
        for step in self._without_manifest:
            step_dir = os.path.join(self.directory, str(step))
            if self._writes_manifests and os.path.isdir(step_dir):  # absent: already deleted by max_to_keep
                write_manifest(step_dir)
        self._without_manifest = []

    def restore(self, step: int, *, train_state_like: Any, selector_state_like: dict) -> dict:
        """Restores `step`; `*_like` give the structure (and target shardings) to restore into."""
        selector_like = {k: np.asarray(v) for k, v in selector_state_like.items()}
        restored = self._manager.restore(step, args=ocp.args.Composite(**{
            TRAIN_STATE: ocp.args.StandardRestore(_as_restore_target(train_state_like)),
            SELECTOR: ocp.args.StandardRestore(selector_like),
            META: ocp.args.JsonRestore()}))
        return {"train_state": restored[TRAIN_STATE], "selector": dict(restored[SELECTOR]), "meta": restored[META]}

    def wait(self) -> None:
        self._write_manifests(block=True)

    def reload(self) -> None:
        """Re-reads the steps on disk (after one was moved aside)."""
        self._manager.reload()

    def close(self) -> None:
        """Finishes pending writes and their manifests; after a failed save only releases orbax
        (the failure was already raised)."""
        try:
            if not self._failed:
                self._write_manifests(block=True)
        finally:
            try:
                self._manager.close()
            except Exception:  # noqa: BLE001 -- closing after a failed write re-raises that failure
                if not self._failed:
                    raise


def save_run_state(checkpointer: Checkpointer, step: int, *, learner, selector, pipeline, counters: dict,
                   config, extras: dict | None = None) -> None:
    """Checkpoints a run at `step`: the learner's train state, the selector's history, and in the
    metadata the data-iterator position, the cumulative `counters`, the config and `extras` (JSON run
    state of other pieces: the stream's carried groups). Multi-host, every host's data-iterator state
    too (`data_states`, in host order; process 0 writes the metadata): stream rollouts read each
    shard at its own pace, so process 0's position does not give the others'."""
    meta = {"step": step, "data_state": pipeline.get_state(), "counters": counters,
            "config": json.loads(config.to_json_best_effort()), "extras": extras or {}}
    if multihost.is_multihost():
        text = np.frombuffer(json.dumps(meta["data_state"]).encode(), np.uint8)
        meta["data_states"] = [json.loads(row.tobytes().decode()) for row in multihost.allgather_ragged(text)]
    checkpointer.save(step, train_state=learner.train_state(), selector_state=selector.state_dict(), meta=meta)


def restore_run_state(checkpointer: Checkpointer, *, learner, selector, pipeline, counters: dict,
                      step: int | None = None, fall_back: Callable[[int, str], int] | None = None,
                      extras: dict | None = None) -> int:
    """Restores `step` (None: the latest; the trainer passes the step `choose_restore_step` verified)
    into the learner, selector and pipeline and updates `counters` (and `extras`, with what
    save_run_state's extras held) in place; returns the step (0, touching nothing, when there is
    none). A step whose parameters or optimiser state are not finite is restored into nothing:
    `fall_back(step, problem)` sets it aside and names the step to try instead (without it,
    CheckpointError)."""
    step = checkpointer.latest_step() if step is None else step
    while step:
        restored = checkpointer.restore(step, train_state_like=learner.train_state(),
                                        selector_state_like=selector.state_dict())
        if _all_finite(restored["train_state"]):
            break
        problem = f"{step}/{TRAIN_STATE}: parameters or optimiser state are not finite (NaN or inf)"
        if fall_back is None:
            raise CheckpointError(f"{checkpointer.directory}: step {problem}")
        step = fall_back(step, problem)
        checkpointer.reload()  # the step set aside is no longer orbax's
    if not step:
        return 0
    learner.load_train_state(restored["train_state"])
    selector.load_state_dict(restored["selector"])
    own = restored["meta"].get("data_states", [])  # each host's, when saved by as many hosts as resume
    pipeline.set_state(own[jax.process_index()] if len(own) == jax.process_count() else restored["meta"]["data_state"])
    counters.update(restored["meta"]["counters"])
    if extras is not None:
        extras.update(restored["meta"].get("extras", {}))
    return step


def restore_params(workdir: str, step: int, abstract_model, shardings) -> dict:
    """The parameters of `step` of the run in `workdir`, as a pure dict placed with `shardings`
    (an nnx.State of shardings, one per parameter of `abstract_model`). A partial restore of
    the train state: the optimiser state is neither read nor allocated."""
    directory = checkpoint_dir(workdir)
    abstract_params = nnx.state(abstract_model, nnx.Param).to_pure_dict()
    target = {"params": jax.tree.map(lambda v, s: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=s),
                                     abstract_params, shardings.to_pure_dict())}
    manager = ocp.CheckpointManager(directory, item_names=(TRAIN_STATE,))
    try:
        if step not in manager.all_steps():
            raise CheckpointError(f"{directory} has no step {step} (steps: {sorted(manager.all_steps())})")
        try:
            restored = manager.restore(step, args=ocp.args.Composite(**{TRAIN_STATE: ocp.args.PyTreeRestore(
                item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True)}))
        except (ValueError, KeyError) as e:
            raise CheckpointError(f"step {step} of {workdir} does not match the model its config describes: "
                                  f"{e}") from None
    finally:
        manager.close()
    if not _all_finite(restored[TRAIN_STATE]["params"]):
        raise CheckpointError(f"step {step} of {workdir}: the parameters are not finite (NaN or inf)")
    return restored[TRAIN_STATE]["params"]
