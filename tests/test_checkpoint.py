"""Orbax checkpoints: exact round trip of train state, selector state and metadata; NaN refusal."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from greso_jax.checkpoint import Checkpointer, NonFiniteCheckpointError


def _train_state():
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones((3,), jnp.float32)}
    return {"params": params, "opt_state": optax.adamw(1e-3).init(params), "step": jnp.asarray(7, jnp.int32)}


def test_round_trip_restores_every_item(tmp_path):
    ckpt = Checkpointer(str(tmp_path), keep=2, every_steps=1, async_save=True)
    state = _train_state()
    selector = {"easy_streak": np.array([0, 3, 1], np.uint8), "p_easy": np.float64(0.43), "step": 5}
    meta = {"step": 5, "data_state": {"epoch": 1, "position": 17}, "config": {"seed": 0}}
    for step in (3, 4, 5):
        ckpt.save(step, train_state=state, selector_state=selector, meta=meta | {"step": step})
    ckpt.wait()
    assert ckpt.latest_step() == 5
    zeros = jax.tree.map(jnp.zeros_like, state)
    restored = Checkpointer(str(tmp_path)).restore(5, train_state_like=zeros, selector_state_like=selector)
    for a, b in zip(jax.tree_util.tree_leaves(restored["train_state"]), jax.tree_util.tree_leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(restored["selector"]["easy_streak"], selector["easy_streak"])
    assert float(restored["selector"]["p_easy"]) == 0.43
    assert restored["meta"] == meta
    ckpt.close()
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [4, 5]  # keep=2


def test_non_finite_state_is_never_written(tmp_path):
    ckpt = Checkpointer(str(tmp_path), keep=2)
    state = _train_state()
    state["params"]["w"] = state["params"]["w"].at[0, 0].set(jnp.nan)
    with pytest.raises(NonFiniteCheckpointError, match="step 9"):
        ckpt.save(9, train_state=state, selector_state={}, meta={})
    ckpt.close()
    assert ckpt.latest_step() is None
