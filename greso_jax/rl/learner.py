"""`Learner`: sharded, jit-compiled GRPO updates over PPO mini-batches and micro-batches, with metrics and train state.

One compiled call is one optimiser update on one mini-batch: its micro-batches are scanned
inside (exact gradient accumulation), parameters and optimiser state are donated and come back
with the shardings their logical axes ask for, and a non-finite loss or gradient leaves them
unchanged. The reference policy (KL term) is evaluated once per `update` call, and only when
the loss's kl_coef > 0. Every setting is an explicit argument (greso_jax.run.build maps the
experiment config onto them).
"""

from __future__ import annotations

import functools
import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from greso_jax.models import param_shardings
from greso_jax.parallel import make_mesh, replicated
from greso_jax.rl.batch import TrainBatch
from greso_jax.rl.logprobs import DEFAULT_CHUNK_SIZE, token_logprobs
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.optim import OptimizerSettings, learning_rate_at, make_optimizer
from greso_jax.rl.train_step import MicroBatches, accumulate_gradients, guarded_update
from greso_jax.parallel import multihost

log = logging.getLogger(__name__)

DATA_AXES = ("data", "fsdp")  # mesh axes a batch's rows are split over


def _split_params(model: nnx.Module):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if jax.tree.leaves(rest):
        raise ValueError("Learner: the model holds non-parameter state, which the learner does not train or carry")
    return graphdef, params.to_pure_dict()


class Learner:
    """Owns the policy's parameters and optimiser state (sharded over `mesh`; default: one device).

    The model passed in is trained in place: `learner.model` is that same object, current after
    every `update`. `loss` fixes the objective (one compiled update), `optimizer` AdamW and the
    learning-rate schedule; each `update` makes `ppo_epochs` passes, `micro_batch_size` rows per
    forward/backward. `temperature` is the sampler's, so the importance ratio compares the same
    tempered policy. With `remat` the model's layers are rematerialised in the backward pass.
    The reference policy for the KL term is `reference_model`, or a frozen copy of the initial
    policy when none is given (only when loss.kl_coef > 0; otherwise nothing is kept).
    """

    def __init__(self, model, *, loss: LossConfig, optimizer: OptimizerSettings, micro_batch_size: int,
                 ppo_epochs: int = 1, temperature: float = 1.0, remat: bool = False, mesh: Mesh | None = None,
                 reference_model=None, chunk_size: int = DEFAULT_CHUNK_SIZE):
        if micro_batch_size < 1 or ppo_epochs < 1:
            raise ValueError(f"Learner: micro_batch_size ({micro_batch_size}) and ppo_epochs ({ppo_epochs}) "
                             "must be >= 1")
        self.loss = loss
        self.optimizer = optimizer
        self.micro_batch_size = int(micro_batch_size)
        self.ppo_epochs = int(ppo_epochs)
        self.temperature = float(temperature)
        self.chunk_size = int(chunk_size)
        self.mesh = mesh if mesh is not None else make_mesh(1, 1, 1, devices=jax.devices()[:1])
        if remat and not model.cfg.remat:
            model.cfg = model.cfg.replace(remat=True)
        self._model = model
        self._graphdef, params = _split_params(model)
        self._param_shardings = param_shardings(model, self.mesh).to_pure_dict()
        self._replicated = replicated(self.mesh)
        self.tx = make_optimizer(optimizer)
        self._params = multihost.put_tree(params, self._param_shardings)
        abstract_opt_state = jax.eval_shape(self.tx.init, self._params)
        self._opt_shardings = optax.tree_map_params(self.tx, lambda _, sharding: sharding, abstract_opt_state,
                                                    self._param_shardings,
                                                    transform_non_params=lambda _: self._replicated)
        self._opt_state = jax.jit(self.tx.init, out_shardings=self._opt_shardings)(self._params)
        self._step = 0  # training steps done (`update` calls): indexes the learning-rate schedule

        self._reference = None
        if loss.kl_coef > 0:
            if reference_model is not None:
                ref_graphdef, ref_params = _split_params(reference_model)
                ref_shardings = param_shardings(reference_model, self.mesh).to_pure_dict()
            else:
                ref_graphdef, ref_params, ref_shardings = self._graphdef, self._params, self._param_shardings
            # A copy, not an alias: the policy's buffers are donated at every update.
            copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree), out_shardings=ref_shardings)
            self._reference = (ref_graphdef, copy(multihost.put_tree(ref_params, ref_shardings)))
        self._nnx_update_model()

    # ----------------------------------------------------------------------------------- state

    @property
    def model(self):
        """The current policy (the model passed in, updated in place)."""
        return self._model

    @property
    def step(self) -> int:
        return self._step

    def train_state(self) -> dict:
        """{params (pure dict of sharded arrays), opt_state, step}: orbax-checkpointable. The arrays
        are the live ones; save (or copy) them before the next `update` donates them."""
        return {"params": self._params, "opt_state": self._opt_state,
                "step": multihost.put(jnp.asarray(self._step, jnp.int32), self._replicated)}

    def load_train_state(self, tree: dict) -> None:
        """Restores a tree shaped like `train_state()` (e.g. from orbax), resharded onto this mesh."""
        for key in ("params", "opt_state", "step"):
            if key not in tree:
                raise ValueError(f"load_train_state: missing {key!r}")
        expected = {"params": self._params, "opt_state": self._opt_state}
        for key, current in expected.items():
            want, got = jax.tree.structure(current), jax.tree.structure(tree[key])
            if want != got:
                raise ValueError(f"load_train_state: {key} has structure {got}, expected {want}")
            for path, a, b in zip(jax.tree_util.tree_flatten_with_path(current)[0], jax.tree.leaves(current),
                                  jax.tree.leaves(tree[key])):
                if tuple(np.shape(a)) != tuple(np.shape(b)):
                    raise ValueError(f"load_train_state: {key}{jax.tree_util.keystr(path[0])} has shape "
                                     f"{tuple(np.shape(b))}, expected {tuple(np.shape(a))}")
        self._params = multihost.put_tree(tree["params"], self._param_shardings)
        self._opt_state = multihost.put_tree(tree["opt_state"], self._opt_shardings)
        self._step = int(np.asarray(jax.device_get(tree["step"])))
        self._nnx_update_model()

    def _nnx_update_model(self):
        nnx.update(self._model, self._params)

    # ------------------------------------------------------------------------------- compiled

    def _rows_sharding(self, rows: int, ndim: int, leading: int) -> NamedSharding:
        """Rows (after `leading` unsplit axes) over the data axes when they divide them, else replicated."""
        data_parallel = self.mesh.shape["data"] * self.mesh.shape["fsdp"]
        if rows % data_parallel:
            log.warning("Learner: %d rows per micro-batch do not divide the %d data-parallel devices; "
                        "replicating them (correct, slower)", rows, data_parallel)
            return self._replicated
        return NamedSharding(self.mesh, PartitionSpec(*([None] * leading), DATA_AXES, *([None] * (ndim - leading - 1))))

    @functools.cached_property
    def _logprobs_fn(self):
        temperature, chunk_size = self.temperature, self.chunk_size

        def forward(graphdef, params, input_ids, attention_mask):  # [M, m, T] -> [M, m, T]
            model = nnx.merge(graphdef, params)
            return jax.lax.map(lambda xs: token_logprobs(model, xs[0], xs[1], temperature, chunk_size=chunk_size),
                               (input_ids, attention_mask))

        return jax.jit(forward, static_argnums=0)

    def _micro_logprobs(self, graphdef, params, input_ids, attention_mask) -> jax.Array:
        """[B, T] host arrays -> [B, T] device log-probs, evaluated micro_batch_size rows at a time."""
        b, t = input_ids.shape
        micro = min(self.micro_batch_size, b)
        if b % micro:
            raise ValueError(f"Learner: batch rows {b} are not a multiple of rl.micro_batch_size {micro}")
        sharding = self._rows_sharding(micro, 3, 1)
        ids = multihost.put(input_ids.reshape(b // micro, micro, t), sharding)
        mask = multihost.put(attention_mask.reshape(b // micro, micro, t), sharding)
        return self._logprobs_fn(graphdef, params, ids, mask).reshape(b, t)

    @functools.cached_property
    def _step_fn(self):
        """The compiled update: one optimiser step on one mini-batch of micro-batches."""
        graphdef, tx, temperature, chunk_size = self._graphdef, self.tx, self.temperature, self.chunk_size
        loss_cfg = self.loss

        def step(params, opt_state, learning_rate, micro: MicroBatches):
            grads, stats = accumulate_gradients(graphdef, params, micro, loss_cfg, temperature=temperature,
                                                chunk_size=chunk_size)
            params, opt_state, grad_norm, skipped = guarded_update(tx, params, opt_state, grads, learning_rate,
                                                                   stats.loss)
            metrics = {"actor/loss": stats.loss, "actor/pg_loss": stats.pg_loss, "actor/kl": stats.kl,
                       "actor/entropy": stats.entropy, "actor/clipfrac_low": stats.clipfrac_low,
                       "actor/clipfrac_high": stats.clipfrac_high, "actor/grad_norm": grad_norm,
                       "actor/nonfinite_skipped": skipped}
            return params, opt_state, metrics

        return jax.jit(step, donate_argnums=(0, 1),
                       in_shardings=(self._param_shardings, self._opt_shardings, self._replicated, None),
                       out_shardings=(self._param_shardings, self._opt_shardings, self._replicated))

    # --------------------------------------------------------------------------------- update

    def update(self, batch: TrainBatch, *, num_minibatches: int, truncated=None, group_ids=None
               ) -> dict[str, float]:
        """ppo_epochs passes over `num_minibatches` equal mini-batches of consecutive rows, one
        optimiser update each, micro_batch_size rows per forward/backward. Advances the
        learning-rate schedule by one training step.

        truncated bool [B] (optional) feeds response/truncated_frac (NaN without it). group_ids
        int [B] (optional): actor/frac_zero_std_groups is the fraction of groups whose advantages
        are all 0; without it, the fraction of rows with advantage 0.
        """
        start = time.perf_counter()
        arrays = _host_batch(batch)
        b, t = arrays["input_ids"].shape
        micro = self.micro_batch_size
        if num_minibatches < 1 or b % num_minibatches:
            raise ValueError(f"Learner.update: {b} rows cannot be split into num_minibatches={num_minibatches}")
        mini_rows = b // num_minibatches
        if mini_rows % micro:
            raise ValueError(f"Learner.update: a mini-batch of {mini_rows} rows ({b} / {num_minibatches}) is not a "
                             f"multiple of rl.micro_batch_size {micro}")

        ref_logprobs = None
        if self._reference is not None:
            ref_logprobs = self._micro_logprobs(*self._reference, arrays["input_ids"], arrays["attention_mask"])

        num_micro = mini_rows // micro
        row_sharding = self._rows_sharding(micro, 3, 1)
        adv_sharding = self._rows_sharding(micro, 2, 1)

        def minibatch(index: int) -> MicroBatches:
            rows = slice(index * mini_rows, (index + 1) * mini_rows)

            def tokens(x):  # [B, T] -> this mini-batch's [M, m, T] on the mesh
                return multihost.put(x[rows].reshape(num_micro, micro, t), row_sharding)

            return MicroBatches(
                input_ids=tokens(arrays["input_ids"]), attention_mask=tokens(arrays["attention_mask"]),
                response_mask=tokens(arrays["response_mask"]), old_logprobs=tokens(arrays["old_logprobs"]),
                advantages=multihost.put(arrays["advantages"][rows].reshape(num_micro, micro), adv_sharding),
                ref_logprobs=None if ref_logprobs is None else tokens(ref_logprobs))

        step_fn = self._step_fn
        learning_rate = multihost.put(learning_rate_at(self._step, self.optimizer), self._replicated)
        per_update = []
        for _ in range(self.ppo_epochs):
            for index in range(num_minibatches):
                self._params, self._opt_state, metrics = step_fn(self._params, self._opt_state, learning_rate,
                                                                 minibatch(index))
                per_update.append(metrics)
        per_update = jax.device_get(per_update)
        self._step += 1
        self._nnx_update_model()
        elapsed = time.perf_counter() - start

        metrics = {name: float(np.mean([m[name] for m in per_update])) for name in per_update[0]}
        metrics["actor/nonfinite_skipped"] = float(sum(m["actor/nonfinite_skipped"] for m in per_update))
        metrics["actor/num_updates"] = float(len(per_update))
        metrics["actor/lr"] = float(jax.device_get(learning_rate))
        metrics.update(_batch_metrics(arrays, truncated, group_ids))
        metrics["perf/train_tokens_per_s"] = self.ppo_epochs * float(arrays["attention_mask"].sum()) / elapsed
        return metrics


def _host_batch(batch: TrainBatch) -> dict[str, np.ndarray]:
    """NumPy views of the batch's fields with their shapes checked against input_ids [B, T]."""
    arrays = {
        "input_ids": np.asarray(batch.input_ids, np.int32),
        "attention_mask": np.asarray(batch.attention_mask, np.int32),
        "response_mask": np.asarray(batch.response_mask, np.float32),
        "old_logprobs": np.asarray(batch.old_logprobs, np.float32),
        "advantages": np.asarray(batch.advantages, np.float32),
    }
    if arrays["input_ids"].ndim != 2:
        raise ValueError(f"TrainBatch.input_ids must be [B, T], got shape {arrays['input_ids'].shape}")
    b, t = arrays["input_ids"].shape
    for name in ("attention_mask", "response_mask", "old_logprobs"):
        if arrays[name].shape != (b, t):
            raise ValueError(f"TrainBatch.{name} has shape {arrays[name].shape}, expected {(b, t)}")
    if arrays["advantages"].shape != (b,):
        raise ValueError(f"TrainBatch.advantages has shape {arrays['advantages'].shape}, expected {(b,)}")
    lengths = batch.response_lengths
    arrays["response_lengths"] = (arrays["response_mask"].sum(axis=1) if lengths is None
                                  else np.asarray(lengths, np.float32))
    return arrays


def _batch_metrics(arrays: dict, truncated, group_ids) -> dict[str, float]:
    """Advantage and response statistics of the train batch (host side). Rows with response
    length 0 are padding rows (no response was generated) and are left out of every statistic;
    advantage statistics cover the rows that enter the loss."""
    advantages, lengths = arrays["advantages"], arrays["response_lengths"]
    real = lengths > 0
    if not real.any():
        real = np.ones_like(real)
    in_loss = arrays["response_mask"].sum(axis=1) > 0
    trained = advantages[in_loss] if in_loss.any() else np.zeros(1, np.float32)
    if group_ids is None:
        zero_std = float(np.mean(advantages[real] == 0))
    else:
        group_ids = np.asarray(group_ids)
        if group_ids.shape != advantages.shape:
            raise ValueError(f"Learner.update: group_ids shape {group_ids.shape} != advantages shape "
                             f"{advantages.shape}")
        groups = np.unique(group_ids[real])
        zero_std = float(np.mean([np.all(advantages[real & (group_ids == g)] == 0) for g in groups]))
    if truncated is None:
        truncated_frac = float("nan")
    else:
        truncated = np.asarray(truncated, bool)
        if truncated.shape != advantages.shape:
            raise ValueError(f"Learner.update: truncated shape {truncated.shape} != advantages shape "
                             f"{advantages.shape}")
        truncated_frac = float(truncated[real].mean())
    return {"actor/advantage_mean": float(trained.mean()), "actor/advantage_std": float(trained.std()),
            "actor/frac_zero_std_groups": zero_std, "response/length_mean": float(lengths[real].mean()),
            "response/length_max": float(lengths[real].max()), "response/truncated_frac": truncated_frac}
