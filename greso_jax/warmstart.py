"""Supervised warm start of a from-scratch policy on (prompt, solution) pairs, cached in the workdir.

RL needs a policy that sometimes succeeds: the embedded default trains its tiny model from
random weights, so a short supervised phase brings it to partial competence first. The
result is saved as a Hugging Face folder named by a digest of everything it depends on, and
reused when the same settings ask for it again (a run with other settings adds a folder
instead of replacing the one an earlier run used).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from greso_jax.models import Qwen2, from_pretrained, save_pretrained


def pack_examples(pairs: Sequence[tuple[list[int], list[int]]], eos_id: int, pad_id: int, width: int):
    """(prompt ids, target ids) pairs -> input_ids int32 [N, width] and loss_mask f32 [N, width];
    the mask is 1 where the token is a target token or the closing EOS."""
    ids = np.full((len(pairs), width), pad_id, np.int32)
    mask = np.zeros((len(pairs), width), np.float32)
    for i, (prompt, target) in enumerate(pairs):
        row = list(prompt) + list(target) + [eos_id]
        if len(row) > width:
            raise ValueError(f"warm-start example {i} has {len(row)} tokens, more than the width {width}")
        ids[i, :len(row)] = row
        mask[i, len(prompt):len(row)] = 1.0
    return ids, mask


def _loss(model: Qwen2, ids, mask):
    # Right padding after each example never reaches earlier positions under the causal mask.
    logits = model(ids[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    target_mask = mask[:, 1:]
    return jnp.sum(nll * target_mask) / jnp.maximum(jnp.sum(target_mask), 1.0)


def supervised_train(model: Qwen2, ids: np.ndarray, mask: np.ndarray, *, steps: int, batch_size: int,
                     learning_rate: float, seed: int) -> list[float]:
    """Teacher-forced cross entropy on the masked tokens with AdamW; updates `model` in place.
    Returns the loss of every step."""
    optimizer = nnx.Optimizer(model, optax.adamw(optax.warmup_cosine_decay_schedule(
        0.0, learning_rate, max(1, steps // 20), max(steps, 2), learning_rate * 0.1), weight_decay=0.01),
        wrt=nnx.Param)

    @nnx.jit
    def step_fn(model, optimizer, batch_ids, batch_mask):
        loss, grads = nnx.value_and_grad(_loss)(model, batch_ids, batch_mask)
        optimizer.update(model, grads)
        return loss

    order = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        rows = order.integers(0, len(ids), batch_size)
        losses.append(float(step_fn(model, optimizer, jnp.asarray(ids[rows]), jnp.asarray(mask[rows]))))
    return losses


def warmstart_folder(cache_dir: str, key: dict) -> str:
    """The cache's folder for `key`: `cache_dir/<first 16 hex digits of the key's SHA-256>`."""
    return os.path.join(cache_dir, hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16])


def cached_warmstart(model: Qwen2, pairs, *, cache_dir: str, eos_id: int, pad_id: int, width: int, steps: int,
                     batch_size: int, learning_rate: float, seed: int, log=print, write_cache: bool = True) -> Qwen2:
    """Returns the warm-started model, from `warmstart_folder(cache_dir, key)` when a run with the same
    settings wrote it. Training is deterministic, so on several hosts each trains its own identical
    copy and only one (`write_cache`) writes the cache."""
    key = {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed,
           "width": width, "model": repr(model.cfg),
           "data": hashlib.sha256(json.dumps([list(map(list, p)) for p in pairs]).encode()).hexdigest()}
    cache_dir = warmstart_folder(cache_dir, key)
    key_path = os.path.join(cache_dir, "warmstart.json")
    if os.path.exists(key_path):
        with open(key_path) as f:
            if json.load(f).get("key") == key:
                log(f"warm start: reusing {cache_dir}")
                return from_pretrained(cache_dir, dtype=model.cfg.dtype, param_dtype=model.cfg.param_dtype,
                                       remat=model.cfg.remat)
    ids, mask = pack_examples(pairs, eos_id, pad_id, width)
    log(f"warm start: {steps} supervised steps on {len(pairs)} examples")
    losses = supervised_train(model, ids, mask, steps=steps, batch_size=batch_size,
                              learning_rate=learning_rate, seed=seed)
    if not np.isfinite(losses[-1]):
        raise FloatingPointError(f"warm start diverged: final loss {losses[-1]}")
    if write_cache:
        save_pretrained(model, cache_dir)
        with open(key_path, "w") as f:  # written last: its presence means the weights are complete
            json.dump({"key": key, "final_loss": losses[-1]}, f)
    log(f"warm start: final loss {losses[-1]:.4f}")
    return model
