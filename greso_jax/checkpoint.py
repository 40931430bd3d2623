"""Orbax checkpoints of everything a run needs to resume exactly.

One checkpoint per saved step holds three items: `train_state` (parameters, optimiser
state, update count: sharded jax arrays), `selector` (the selector's per-prompt history,
NumPy) and `meta` (JSON: step, data-iterator state, cumulative counters, the config).
Random keys are not stored: every key is derived from (seed, step), so the step is enough.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


class NonFiniteCheckpointError(RuntimeError):
    """Raised instead of writing a checkpoint whose parameters or optimiser state hold NaN/inf."""


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
                                              item_names=("train_state", "selector", "meta"))

    def should_save(self, step: int, final: bool = False) -> bool:
        return final or (self.every_steps > 0 and step % self.every_steps == 0)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, *, train_state: Any, selector_state: dict, meta: dict) -> None:
        if not _all_finite(train_state):
            raise NonFiniteCheckpointError(f"step {step}: parameters or optimiser state are not finite; "
                                           "refusing to checkpoint")
        selector_state = {k: np.asarray(v) for k, v in selector_state.items()}
        self._manager.save(step, args=ocp.args.Composite(
            train_state=ocp.args.StandardSave(train_state),
            selector=ocp.args.StandardSave(selector_state),
            meta=ocp.args.JsonSave(meta)), force=True)

    def restore(self, step: int, *, train_state_like: Any, selector_state_like: dict) -> dict:
        """Restores `step`; `*_like` give the structure (and target shardings) to restore into."""
        selector_like = {k: np.asarray(v) for k, v in selector_state_like.items()}
        restored = self._manager.restore(step, args=ocp.args.Composite(
            train_state=ocp.args.StandardRestore(_as_restore_target(train_state_like)),
            selector=ocp.args.StandardRestore(selector_like),
            meta=ocp.args.JsonRestore()))
        return {"train_state": restored["train_state"], "selector": dict(restored["selector"]),
                "meta": restored["meta"]}

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()
