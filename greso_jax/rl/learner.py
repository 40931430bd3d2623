"""`Learner`: sharded, jit-compiled GRPO updates over PPO mini-batches and micro-batches, with metrics and train state.

In the padded layout one compiled call is one optimiser update on one mini-batch: its
micro-batches are scanned inside (exact gradient accumulation); the bucketed layout
(greso_jax.rl.micro_batches) runs one compiled gradient per length bucket into a device
accumulator, then the optimiser step. Parameters and optimiser state are donated and come back
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
from greso_jax.rl.batch import TrainBatch, batch_statistics, host_arrays
from greso_jax.rl.logprobs import DEFAULT_CHUNK_SIZE, token_logprobs
from greso_jax.rl.losses import LossConfig
from greso_jax.rl.micro_batches import (UPDATE_LAYOUTS, MicroBatch, bucket_lengths, bucketed_micro_batches,
                                        computed_tokens, row_lengths)
from greso_jax.rl.optim import OptimizerSettings, learning_rate_at, make_optimizer
from greso_jax.rl.train_step import (MicroBatches, Mismatch, accumulate_gradients, guarded_update,
                                     inverse_denominator, micro_batch_gradient, step_stats, zero_sums)
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
    forward/backward, laid out by `update_layout` (greso_jax.rl.micro_batches: "padded" computes
    every row at the batch's width; "bucketed" sorts a mini-batch's rows by length into micro-batches
    trimmed to buckets at most `bucket_ratio` apart, one compiled gradient per bucket, the same loss
    and gradient). `temperature` is the sampler's, so the importance ratio compares the same
    tempered policy. With `remat` the model's layers are rematerialised in the backward pass.
    The reference policy for the KL term is `reference_model`, or a frozen copy of the initial
    policy when none is given (only when loss.kl_coef > 0; otherwise nothing is kept).
    """

    def __init__(self, model, *, loss: LossConfig, optimizer: OptimizerSettings, micro_batch_size: int,
                 ppo_epochs: int = 1, temperature: float = 1.0, remat: bool = False, mesh: Mesh | None = None,
                 reference_model=None, chunk_size: int = DEFAULT_CHUNK_SIZE, update_layout: str = "padded",
                 bucket_ratio: float = 1.25):
        if micro_batch_size < 1 or ppo_epochs < 1:
            raise ValueError(f"Learner: micro_batch_size ({micro_batch_size}) and ppo_epochs ({ppo_epochs}) "
                             "must be >= 1")
        if update_layout not in UPDATE_LAYOUTS or bucket_ratio <= 1:
            raise ValueError(f"Learner: update_layout {update_layout!r} must be one of {UPDATE_LAYOUTS} and "
                             f"bucket_ratio ({bucket_ratio}) > 1")
        self.update_layout, self.bucket_ratio = update_layout, float(bucket_ratio)
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
            return _apply(tx, params, opt_state, grads, learning_rate, stats)

        return jax.jit(step, donate_argnums=(0, 1),
                       in_shardings=(self._param_shardings, self._opt_shardings, self._replicated, None),
                       out_shardings=(self._param_shardings, self._opt_shardings, self._replicated))

    @functools.cached_property
    def _zero_accumulator_fn(self):
        """params -> (zero grads, zero LossSums, zero Mismatch): a bucketed mini-batch's starting sums."""
        return jax.jit(lambda params: (jax.tree.map(jnp.zeros_like, params), zero_sums(), Mismatch.zero()),
                       out_shardings=(self._param_shardings, self._replicated, self._replicated))

    @functools.cached_property
    def _micro_gradient_fn(self):
        """Adds one [m, L] micro-batch's gradient and sums to the accumulator (compiled once per L)."""
        graphdef, loss_cfg, temperature, chunk_size = self._graphdef, self.loss, self.temperature, self.chunk_size

        def accumulate(params, accumulator, micro: MicroBatches, inv_denominator):
            grads, sums, mismatch = micro_batch_gradient(graphdef, params, micro, loss_cfg, inv_denominator,
                                                         temperature=temperature, chunk_size=chunk_size)
            grads_acc, sums_acc, mismatch_acc = accumulator
            return (jax.tree.map(jnp.add, grads_acc, grads), jax.tree.map(jnp.add, sums_acc, sums),
                    mismatch_acc.combine(mismatch))

        accumulator = (self._param_shardings, self._replicated, self._replicated)
        return jax.jit(accumulate, donate_argnums=(1,),
                       in_shardings=(self._param_shardings, accumulator, None, self._replicated),
                       out_shardings=accumulator)

    @functools.cached_property
    def _apply_fn(self):
        """The optimiser step on a bucketed mini-batch's accumulated gradient."""
        tx = self.tx

        def apply(params, opt_state, learning_rate, accumulator, inv_denominator):
            grads, sums, mismatch = accumulator
            return _apply(tx, params, opt_state, grads, learning_rate, step_stats(sums, mismatch, inv_denominator))

        return jax.jit(apply, donate_argnums=(0, 1),
                       in_shardings=(self._param_shardings, self._opt_shardings, self._replicated,
                                     (self._param_shardings, self._replicated, self._replicated), self._replicated),
                       out_shardings=(self._param_shardings, self._opt_shardings, self._replicated))

    # --------------------------------------------------------------------------------- update

    def update(self, batch: TrainBatch, *, num_minibatches: int, truncated=None, group_ids=None
               ) -> dict[str, float]:
        """ppo_epochs passes over `num_minibatches` equal mini-batches of consecutive rows, one
        optimiser update each, micro_batch_size rows per forward/backward. Advances the
        learning-rate schedule by one training step.

        truncated bool [B] (optional) feeds response/truncated_frac (NaN without it). group_ids
        int [B] (optional): actor/frac_zero_std_groups is the fraction of groups whose advantages
        are all 0; without it, the fraction of rows with advantage 0. actor/logprob_mismatch(_max)
        are the first update's: the sampler's log-probs against the learner's before any step.
        """
        start = time.perf_counter()
        arrays = host_arrays(batch)
        b, t = arrays["input_ids"].shape
        micro = self.micro_batch_size
        if num_minibatches < 1 or b % num_minibatches:
            raise ValueError(f"Learner.update: {b} rows cannot be split into num_minibatches={num_minibatches}")
        mini_rows = b // num_minibatches
        if mini_rows % micro:
            raise ValueError(f"Learner.update: a mini-batch of {mini_rows} rows ({b} / {num_minibatches}) is not a "
                             f"multiple of rl.micro_batch_size {micro}")
        learning_rate = multihost.put(learning_rate_at(self._step, self.optimizer), self._replicated)
        if self.update_layout == "bucketed":
            plan = bucketed_micro_batches(row_lengths(arrays["attention_mask"]), num_minibatches=num_minibatches,
                                          micro_rows=micro, buckets=bucket_lengths(t, self.bucket_ratio))
            per_update, computed = self._bucketed_updates(arrays, plan, learning_rate), computed_tokens(plan)
        else:
            per_update, computed = self._padded_updates(arrays, num_minibatches, learning_rate), b * t
        per_update = jax.device_get(per_update)
        self._step += 1
        self._nnx_update_model()
        elapsed = time.perf_counter() - start

        metrics = {name: float(np.mean([m[name] for m in per_update])) for name in per_update[0]}
        for name in ("actor/logprob_mismatch", "actor/logprob_mismatch_max"):
            metrics[name] = float(per_update[0][name])
        metrics["actor/nonfinite_skipped"] = float(sum(m["actor/nonfinite_skipped"] for m in per_update))
        metrics["actor/num_updates"] = float(len(per_update))
        metrics["actor/lr"] = float(jax.device_get(learning_rate))
        metrics.update(batch_statistics(arrays, truncated, group_ids))
        real_tokens = float(arrays["attention_mask"][arrays["response_lengths"] > 0].sum())
        metrics["actor/update_tokens"] = float(computed)  # one pass over the batch, padding included
        metrics["actor/update_padding_share"] = 1.0 - real_tokens / computed
        metrics["perf/train_tokens_per_s"] = self.ppo_epochs * float(arrays["attention_mask"].sum()) / elapsed
        return metrics

    def _padded_updates(self, arrays: dict, num_minibatches: int, learning_rate) -> list[dict]:
        """Every row at the batch's width T, each mini-batch's [M, m, T] micro-batches scanned in one call."""
        b, t = arrays["input_ids"].shape
        micro, mini_rows = self.micro_batch_size, b // num_minibatches
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

        per_update = []
        for _ in range(self.ppo_epochs):
            for index in range(num_minibatches):
                self._params, self._opt_state, metrics = self._step_fn(self._params, self._opt_state, learning_rate,
                                                                       minibatch(index))
                per_update.append(metrics)
        return per_update

    def _bucketed_updates(self, arrays: dict, plan: list[list[MicroBatch]], learning_rate) -> list[dict]:
        """Each mini-batch of `plan` as its [m, L] micro-batches, one compiled gradient per bucket L,
        accumulated on the device, then one optimiser step. A mini-batch whose micro-batches share
        one L (one micro-batch, or rows of similar length) runs as the padded layout does: its
        [M, m, L] micro-batches scanned in one call."""
        micro = self.micro_batch_size

        def on_mesh(rows: np.ndarray, length: int) -> MicroBatches:
            """rows int [m] (one micro-batch) or [M, m] (a mini-batch of one length) -> the batch's
            fields at those rows, trimmed to L columns, on the mesh."""
            lead = rows.ndim - 1
            tokens = {k: multihost.put(arrays[k][rows, :length], self._rows_sharding(micro, rows.ndim + 1, lead))
                      for k in ("input_ids", "attention_mask", "response_mask", "old_logprobs")}
            ref = None
            if self._reference is not None:  # the reference forward at the same shape
                ids, mask = (tokens[k] if lead else tokens[k][None] for k in ("input_ids", "attention_mask"))
                ref = self._logprobs_fn(*self._reference, ids, mask)
                ref = ref if lead else ref[0]
            return MicroBatches(**tokens, ref_logprobs=ref,
                                advantages=multihost.put(arrays["advantages"][rows],
                                                         self._rows_sharding(micro, rows.ndim, lead)))

        steps = []  # per mini-batch: (its micro-batches on the mesh, its inverse denominator)
        for mini in plan:
            inv_denominator = np.float32(inverse_denominator(
                arrays["response_mask"][np.concatenate([mb.rows for mb in mini])], self.loss))
            if len({mb.length for mb in mini}) == 1:
                batches = on_mesh(np.stack([mb.rows for mb in mini]), mini[0].length)
            else:
                batches = [on_mesh(mb.rows, mb.length) for mb in mini]
            steps.append((batches, multihost.put(inv_denominator, self._replicated)))

        per_update = []
        for _ in range(self.ppo_epochs):
            for batches, inv_denominator in steps:
                if isinstance(batches, MicroBatches):
                    self._params, self._opt_state, metrics = self._step_fn(self._params, self._opt_state,
                                                                           learning_rate, batches)
                else:
                    accumulator = self._zero_accumulator_fn(self._params)
                    for batch in batches:
                        accumulator = self._micro_gradient_fn(self._params, accumulator, batch, inv_denominator)
                    self._params, self._opt_state, metrics = self._apply_fn(self._params, self._opt_state,
                                                                            learning_rate, accumulator, inv_denominator)
                per_update.append(metrics)
        return per_update


def _apply(tx, params, opt_state, grads, learning_rate, stats) -> tuple:
    """The guarded optimiser step and the update's metrics (traced inside both layouts' compiled calls)."""
    params, opt_state, grad_norm, skipped = guarded_update(tx, params, opt_state, grads, learning_rate, stats.loss)
    metrics = {"actor/loss": stats.loss, "actor/pg_loss": stats.pg_loss, "actor/kl": stats.kl,
               "actor/entropy": stats.entropy, "actor/clipfrac_low": stats.clipfrac_low,
               "actor/clipfrac_high": stats.clipfrac_high, "actor/grad_norm": grad_norm,
               "actor/nonfinite_skipped": skipped, "actor/logprob_mismatch": stats.logprob_mismatch,
               "actor/logprob_mismatch_max": stats.logprob_mismatch_max}
    return params, opt_state, metrics
