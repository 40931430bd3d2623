"""Supervised warm start of a from-scratch policy on (prompt, solution) pairs, cached in a folder.

RL needs a policy that sometimes succeeds: the embedded default trains its tiny model from
random weights, so a short supervised phase brings it to partial competence first. It runs a
fixed number of steps, or stops on an `AccuracyBand` (docs/design.md, "Warm start"). The
result is saved as a Hugging Face folder named by a digest of everything it depends on, and
reused when the same settings ask for it again (a run with other settings adds a folder
instead of replacing the one an earlier run used; runs may share the cache folder). The folder's
warmstart.json records the SHA-256 of each weight file; a cached folder that does not match is
trained again (and replaced), never loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from greso_jax.models import Qwen2, from_pretrained, save_pretrained
from greso_jax.core.files import sha256_of
from greso_jax.core.specs import ConfigError


class WarmStartError(ConfigError):
    """The warm start ended outside its accuracy band; the message names the field to change."""


@dataclasses.dataclass(frozen=True)
class AccuracyBand:
    """Stop at the first check (every `check_every` steps) whose `measure(model)` is >= `low`; that
    accuracy must be <= `high`. `settings` (what `measure` depends on) joins the cache key."""

    low: float
    high: float
    check_every: int
    measure: Callable[[Qwen2], float]  # deterministic: the same weights give the same accuracy
    settings: dict


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


def draw_batch_rows(rng: np.random.Generator, num_rows: int, batch_size: int,
                    row_weights: np.ndarray | None) -> np.ndarray:
    """[batch_size] row indices: uniform (the stream unweighted warm starts always drew), or by `row_weights`."""
    if row_weights is None:
        return rng.integers(0, num_rows, batch_size)
    return rng.choice(num_rows, batch_size, p=row_weights)


def supervised_train(model: Qwen2, ids: np.ndarray, mask: np.ndarray, *, steps: int, batch_size: int,
                     learning_rate: float, seed: int, stop: Callable[[Qwen2, int], bool] | None = None,
                     row_weights: np.ndarray | None = None) -> list[float]:
    """Teacher-forced cross entropy on the masked tokens with AdamW for at most `steps` steps; updates
    `model` in place. Batches draw rows uniformly, or with the probabilities `row_weights` [N].
    `stop(model, step)` runs after each step (counted from 1) and ends training when it returns
    True; the schedule always spans `steps`, so stopping at step s leaves the weights a longer run
    had at s. Returns the loss of every step taken."""
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
    for step in range(1, steps + 1):
        rows = draw_batch_rows(order, len(ids), batch_size, row_weights)
        losses.append(float(step_fn(model, optimizer, jnp.asarray(ids[rows]), jnp.asarray(mask[rows]))))
        if stop is not None and stop(model, step):
            break
    return losses


def warmstart_folder(cache_dir: str, key: dict) -> str:
    """The cache's folder for `key`: `cache_dir/<first 16 hex digits of the key's SHA-256>`."""
    return os.path.join(cache_dir, hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16])


def cached_warmstart(model: Qwen2, pairs, *, cache_dir: str, eos_id: int, pad_id: int, width: int, steps: int,
                     batch_size: int, learning_rate: float, seed: int, band: AccuracyBand | None = None, log=print,
                     write_cache: bool = True, row_weights: np.ndarray | None = None) -> tuple[Qwen2, dict]:
    """Returns the warm-started model and its record (final_loss, steps; with a band also the accuracy
    it stopped at and the (step, accuracy) trace of its checks), from `warmstart_folder(cache_dir, key)`
    when a run with the same settings wrote it. Training is deterministic, so on several hosts each
    trains its own identical copy and only one (`write_cache`) writes the cache. Raises WarmStartError
    when a band's run ends outside it. `row_weights` [len(pairs)]: as in `supervised_train`."""
    key = {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed,
           "width": width, "model": repr(model.cfg),
           "data": hashlib.sha256(json.dumps([list(map(list, p)) for p in pairs]).encode()).hexdigest()}
    if row_weights is not None:  # absent when uniform, so earlier warm starts keep their folders
        key["row_weights"] = hashlib.sha256(np.asarray(row_weights, np.float64).tobytes()).hexdigest()
    if band is not None:  # absent without a band, so fixed-step warm starts keep their folders
        key["band"] = {"low": band.low, "high": band.high, "check_every": band.check_every, **band.settings}
    folder = warmstart_folder(cache_dir, key)
    key_path = os.path.join(folder, "warmstart.json")
    if os.path.exists(key_path):
        try:
            with open(key_path) as f:
                saved = json.load(f)
        except ValueError:
            saved = {"key": key}  # a damaged record: _cache_damage names it
        problem = _cache_damage(folder, saved) if saved.get("key") == key else None
        if problem:
            log(f"warm start: {folder} is damaged ({problem}); training it again")
        elif saved.get("key") == key:
            log(f"warm start: reusing {folder}" + (f" (validation accuracy {saved['accuracy']:.3f} at step "
                                                   f"{saved['steps']})" if band is not None else ""))
            record = {k: v for k, v in saved.items() if k not in ("key", "files")}
            return from_pretrained(folder, dtype=model.cfg.dtype, param_dtype=model.cfg.param_dtype,
                                   remat=model.cfg.remat), record
    ids, mask = pack_examples(pairs, eos_id, pad_id, width)
    log(f"warm start: {'at most ' if band is not None else ''}{steps} supervised steps on {len(pairs)} examples")
    trace: list[tuple[int, float]] = []

    def reached_band(model, step: int) -> bool:
        if step % band.check_every:
            return False
        trace.append((step, band.measure(model)))
        log(f"warm start: step {step}, validation accuracy {trace[-1][1]:.3f}")
        return trace[-1][1] >= band.low

    losses = supervised_train(model, ids, mask, steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                              seed=seed, stop=reached_band if band is not None else None, row_weights=row_weights)
    if not np.isfinite(losses[-1]):
        raise FloatingPointError(f"warm start diverged: final loss {losses[-1]}")
    record = {"final_loss": losses[-1], "steps": len(losses)}
    if band is not None:
        _check_band(band, trace, steps)
        record.update(accuracy=trace[-1][1], trace=trace)
    if write_cache:
        _publish(model, {"key": key, **record}, folder, replace=os.path.exists(key_path))
    log(f"warm start: final loss {losses[-1]:.4f}" + (f", stopped at step {len(losses)} with validation accuracy "
                                                      f"{trace[-1][1]:.3f}" if band is not None else ""))
    return model, record


def _check_band(band: AccuracyBand, trace: list[tuple[int, float]], steps: int) -> None:
    """Raises WarmStartError unless the last check reached the band without passing it."""
    history = ", ".join(f"{step}: {accuracy:.3f}" for step, accuracy in trace)
    if not trace or trace[-1][1] < band.low:
        raise WarmStartError(
            f"train.warmstart_steps: {steps} supervised steps ended below train.warmstart_accuracy_low={band.low} "
            f"(validation accuracy by step: {history}); allow more steps or lower the band")
    if trace[-1][1] > band.high:
        raise WarmStartError(
            f"train.warmstart_accuracy_high: validation accuracy rose past the band [{band.low}, {band.high}] "
            f"between checks (by step: {history}); check more often (train.warmstart_check_every) or widen the band")


def _cache_damage(folder: str, saved: dict) -> str | None:
    """None when every weight file of a cached warm start matches the SHA-256 its warmstart.json
    records, else what is wrong (a cache written before hashes were recorded is unverifiable)."""
    files = saved.get("files")
    if not isinstance(files, dict) or not files:
        return "warmstart.json records no content hashes (unreadable, or written before they were)"
    for name, digest in sorted(files.items()):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            return f"{name}: missing"
        if sha256_of(path) != digest:
            return f"{name}: content differs from the SHA-256 in warmstart.json"
    return None


def _publish(model: Qwen2, record: dict, folder: str, *, replace: bool = False) -> None:
    """Writes the folder under a temporary name, with the SHA-256 of every file in its warmstart.json,
    and renames it into place, so that runs sharing the cache never read a half-written one; when
    another run published the same key first (identical weights, training is deterministic), this
    copy is discarded. `replace`: the folder in place is damaged and is moved aside first."""
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=os.path.basename(folder) + ".partial-", dir=parent)
    save_pretrained(model, partial)
    record = {**record, "files": {name: sha256_of(os.path.join(partial, name)) for name in sorted(os.listdir(partial))}}
    with open(os.path.join(partial, "warmstart.json"), "w") as f:
        json.dump(record, f)
    if replace:
        try:  # kept for inspection; another run may have moved it already
            os.rename(folder, f"{folder}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        except OSError:
            pass
    if os.path.isdir(folder) and not os.path.exists(os.path.join(folder, "warmstart.json")):
        shutil.rmtree(folder)  # left by a writer killed before this code renamed folders into place
    try:
        os.rename(partial, folder)
    except OSError:  # the folder exists: another run published it first
        shutil.rmtree(partial)
