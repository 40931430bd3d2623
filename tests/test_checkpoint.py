"""Orbax checkpoints: exact round trip of train state, selector state and metadata; NaN refusal;
the latest finished step; a run's state saved and restored whole; its parameters restored alone."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import trainer_config

from greso_jax.run.checkpoint import (Checkpointer, CheckpointError, NonFiniteCheckpointError, checkpoint_dir,
                                  latest_step, restore_params, restore_run_state, save_run_state)
from greso_jax.data.pipeline import PromptPipeline
from greso_jax.data.sources import load_source
from greso_jax.models import abstract_model, init_model, param_shardings, place_on_mesh
from greso_jax.parallel import make_mesh
from greso_jax.run.build import build_tokenizer, model_config
from greso_jax.run.build import learner_from_config, selector_from_config


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


def test_latest_step_counts_only_finished_step_folders(tmp_path):
    assert latest_step(str(tmp_path)) is None
    for name in ("3", "12", "40.orbax-checkpoint-tmp-1712", "notes"):
        (tmp_path / name).mkdir()
    (tmp_path / "99").write_text("a file, not a checkpoint")
    assert latest_step(str(tmp_path)) == 12


def _run_pieces(config, model_seed: int, mesh):
    """The learner, selector and data pipeline of a tiny run, as the trainer builds them."""
    rows = load_source(source="arith", arith_num_train=config.data.arith_num_train,
                       arith_num_heldout=config.data.arith_num_heldout, arith_seed=config.data.arith_seed)
    model = place_on_mesh(init_model(model_config(config), seed=model_seed), mesh)
    learner = learner_from_config(model, config, mesh)
    selector = selector_from_config(config, num_prompts=len(rows))
    pipeline = PromptPipeline(rows, build_tokenizer(config), template=config.data.prompt_template,
                              max_prompt_length=config.data.max_prompt_length, seed=config.seed,
                              shuffle=config.data.shuffle, keep_filter=selector)
    return learner, selector, pipeline


def test_run_state_round_trip_and_params_only_restore(tmp_path):
    """What save_run_state writes, restore_run_state puts back into fresh pieces exactly, and
    restore_params reads the same parameters without the rest of the run."""
    config = trainer_config.get_config("greso")
    mesh = make_mesh(1, 1, 1, devices=jax.devices()[:1])
    learner, selector, pipeline = _run_pieces(config, model_seed=7, mesh=mesh)
    selector.begin_step(1)
    elements, _ = pipeline.next_prompts(6)
    ids = np.asarray([e["prompt_id"] for e in elements])
    selector.observe(ids, np.arange(6 * 4).reshape(6, 4) % 3 == 0)
    selector.end_step()
    counters = {"rollout/num_responses": 24, "selection/skipped_total": 2}
    saved_params = jax.tree.map(np.asarray, learner.train_state()["params"])
    ckpt = Checkpointer(checkpoint_dir(str(tmp_path)), async_save=False)
    save_run_state(ckpt, 1, learner=learner, selector=selector, pipeline=pipeline, counters=counters, config=config)
    ckpt.close()
    assert latest_step(checkpoint_dir(str(tmp_path))) == 1

    fresh_learner, fresh_selector, fresh_pipeline = _run_pieces(config, model_seed=8, mesh=mesh)
    fresh_counters = {"rollout/num_responses": 0, "train/bad_steps": 0}
    step = restore_run_state(Checkpointer(checkpoint_dir(str(tmp_path))), learner=fresh_learner,
                             selector=fresh_selector, pipeline=fresh_pipeline, counters=fresh_counters)
    assert step == 1
    assert fresh_counters == {"rollout/num_responses": 24, "selection/skipped_total": 2, "train/bad_steps": 0}
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, fresh_learner.train_state()["params"]),
                 saved_params)
    for key, value in selector.state_dict().items():
        np.testing.assert_array_equal(np.asarray(fresh_selector.state_dict()[key]), np.asarray(value), err_msg=key)
    assert fresh_pipeline.get_state() == pipeline.get_state()
    assert [e["prompt_id"] for e in fresh_pipeline.next_prompts(5)[0]] == \
        [e["prompt_id"] for e in pipeline.next_prompts(5)[0]]

    abstract = abstract_model(model_config(config))
    params = restore_params(str(tmp_path), 1, abstract, param_shardings(abstract, mesh))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, params), saved_params)
    with pytest.raises(CheckpointError, match=r"checkpoints has no step 2 \(steps: \[1\]\)"):
        restore_params(str(tmp_path), 2, abstract, param_shardings(abstract, mesh))


def test_restore_run_state_without_a_checkpoint_touches_nothing(tmp_path):
    config = trainer_config.get_config("greso")
    learner, selector, pipeline = _run_pieces(config, model_seed=0, mesh=make_mesh(1, 1, 1,
                                                                                    devices=jax.devices()[:1]))
    before = pipeline.get_state()
    counters = {"train/bad_steps": 0}
    ckpt = Checkpointer(checkpoint_dir(str(tmp_path)))
    assert restore_run_state(ckpt, learner=learner, selector=selector, pipeline=pipeline, counters=counters) == 0
    ckpt.close()
    assert counters == {"train/bad_steps": 0} and pipeline.get_state() == before
