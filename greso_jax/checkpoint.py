"""Orbax checkpoints of everything a run needs to resume exactly.

A run keeps its checkpoints in `<workdir>/checkpoints/<step>/`. One checkpoint holds three
items: `train_state` (parameters, optimiser state, update count: sharded jax arrays),
`selector` (the selector's per-prompt history, NumPy) and `meta` (JSON: step, data-iterator
state, cumulative counters, the config). Random keys are not stored: every key is derived
from (seed, step), so the step is enough.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

TRAIN_STATE, SELECTOR, META = "train_state", "selector", "meta"
ITEM_NAMES = (TRAIN_STATE, SELECTOR, META)
CHECKPOINTS_FOLDER = "checkpoints"


class NonFiniteCheckpointError(RuntimeError):
    """Raised instead of writing a checkpoint whose parameters or optimiser state hold NaN/inf."""


class CheckpointError(ValueError):
    """A missing step, or a checkpoint that does not fit the model it is restored into; the message
    names the folder and the step."""


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
    """Keeps the last `keep` checkpoints under `directory`; saves every `every_steps` steps."""

    def __init__(self, directory: str, *, keep: int = 3, every_steps: int = 50, async_save: bool = True):
        self.directory = os.path.abspath(directory)
        self.every_steps = every_steps
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=async_save)
        self._manager = ocp.CheckpointManager(self.directory, options=options,
                                              item_names=ITEM_NAMES)

    def should_save(self, step: int, final: bool = False) -> bool:
        return final or (self.every_steps > 0 and step % self.every_steps == 0)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, *, train_state: Any, selector_state: dict, meta: dict) -> None:
        if not _all_finite(train_state):
            raise NonFiniteCheckpointError(f"step {step}: parameters or optimiser state are not finite; "
                                           "refusing to checkpoint")
        selector_state = {k: np.asarray(v) for k, v in selector_state.items()}
        self._manager.save(step, args=ocp.args.Composite(**{
            TRAIN_STATE: ocp.args.StandardSave(train_state),
            SELECTOR: ocp.args.StandardSave(selector_state),
            META: ocp.args.JsonSave(meta)}), force=True)

    def restore(self, step: int, *, train_state_like: Any, selector_state_like: dict) -> dict:
        """Restores `step`; `*_like` give the structure (and target shardings) to restore into."""
        selector_like = {k: np.asarray(v) for k, v in selector_state_like.items()}
        restored = self._manager.restore(step, args=ocp.args.Composite(**{
            TRAIN_STATE: ocp.args.StandardRestore(_as_restore_target(train_state_like)),
            SELECTOR: ocp.args.StandardRestore(selector_like),
            META: ocp.args.JsonRestore()}))
        return {"train_state": restored[TRAIN_STATE], "selector": dict(restored[SELECTOR]), "meta": restored[META]}

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def save_run_state(checkpointer: Checkpointer, step: int, *, learner, selector, pipeline, counters: dict,
                   config) -> None:
    """Checkpoints a run at `step`: the learner's train state, the selector's history, and in the
    metadata the data-iterator position, the cumulative `counters` and the config."""
    meta = {"step": step, "data_state": pipeline.get_state(), "counters": counters,
            "config": json.loads(config.to_json_best_effort())}
    checkpointer.save(step, train_state=learner.train_state(), selector_state=selector.state_dict(), meta=meta)


def restore_run_state(checkpointer: Checkpointer, *, learner, selector, pipeline, counters: dict) -> int:
    """Restores the latest checkpoint into the learner, selector and pipeline and updates `counters`
    in place; returns its step (0, touching nothing, when there is none)."""
    step = checkpointer.latest_step()
    if step is None:
        return 0
    restored = checkpointer.restore(step, train_state_like=learner.train_state(),
                                    selector_state_like=selector.state_dict())
    learner.load_train_state(restored["train_state"])
    selector.load_state_dict(restored["selector"])
    pipeline.set_state(restored["meta"]["data_state"])
    counters.update(restored["meta"]["counters"])
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
    return restored[TRAIN_STATE]["params"]
