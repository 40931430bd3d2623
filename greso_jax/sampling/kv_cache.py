"""Forward passes with a KV cache: prompt prefill (one row per distinct prompt) and one decode step
for all rows, attending to the shared prompt cache and the per-row response cache without copying
the prompt cache to the G rows of its group.

Cache layout, per layer:
  prompt cache    k, v [N, Tp, Hkv, hd]     written once by `prefill` (prompts left-aligned)
  response cache  k, v [N, G, L, Hkv, hd]   slot s holds the key/value of response token s
Every row of a call is at the same response step, so a decode step writes one slot for all rows.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from greso_jax.models.qwen2 import MASK_VALUE, attend, causal_padding_mask

Constraint = Callable[[jax.Array], jax.Array]


def _identity(x):
    return x


class LayerCache(NamedTuple):
    k: jax.Array
    v: jax.Array


def prefill(model, prompt_ids, prompt_lengths, constrain: Constraint = _identity):
    """prompt_ids int32 [N, Tp] (left-aligned, right-padded), prompt_lengths int32 [N] (>= 1) ->
    (prompt cache: list of LayerCache [N, Tp, Hkv, hd] per layer, next-token logits float32 [N, V])."""
    n, tp = prompt_ids.shape
    positions = jnp.broadcast_to(jnp.arange(tp, dtype=jnp.int32), (n, tp))
    valid = positions < prompt_lengths[:, None]
    mask = causal_padding_mask(valid)
    x = constrain(model.embed_tokens(prompt_ids))
    caches = []
    for layer in model.layers:
        q, k, v = layer.attn.project_qkv(layer.input_norm(x), positions)
        caches.append(LayerCache(constrain(k), constrain(v)))
        x = x + layer.attn.project_out(attend(q, k, v, mask))
        x = constrain(x + layer.mlp(layer.post_attention_norm(x)))
    last = jnp.take_along_axis(x, (prompt_lengths - 1)[:, None, None], axis=1)  # [N, 1, D]
    return caches, model.logits(model.final_norm(last))[:, 0]


def empty_response_cache(model, num_prompts: int, group: int, slots: int, constrain: Constraint = _identity):
    """Zeroed per-row response caches, one LayerCache [N, G, slots, Hkv, hd] per layer, compute dtype."""
    cfg = model.cfg
    shape = (num_prompts, group, slots, cfg.num_kv_heads, cfg.head_dim)
    zeros = lambda: constrain(jnp.zeros(shape, jnp.dtype(cfg.dtype)))  # noqa: E731
    return [LayerCache(zeros(), zeros()) for _ in model.layers]


def _attend_prompt_and_response(q, prompt: LayerCache, response: LayerCache, prompt_lengths, slot):
    """q [N, G, Hkv, rep, hd] of the current token -> attention output [N, G, Hkv, rep, hd] over
    the prompt keys t < prompt_length and the response keys t <= slot, one joint softmax (float32)."""
    hd = q.shape[-1]
    scale = 1.0 / jnp.sqrt(jnp.float32(hd))
    prompt_scores = jnp.einsum("ngkrd,ntkd->ngkrt", q, prompt.k, preferred_element_type=jnp.float32) * scale
    response_scores = jnp.einsum("ngkrd,ngtkd->ngkrt", q, response.k, preferred_element_type=jnp.float32) * scale
    prompt_valid = jnp.arange(prompt.k.shape[1])[None, :] < prompt_lengths[:, None]  # [N, Tp]
    response_valid = jnp.arange(response.k.shape[2]) <= slot  # [L]
    prompt_scores = jnp.where(prompt_valid[:, None, None, None, :], prompt_scores, MASK_VALUE)
    response_scores = jnp.where(response_valid, response_scores, MASK_VALUE)
    top = jnp.maximum(prompt_scores.max(-1, keepdims=True), response_scores.max(-1, keepdims=True))
    prompt_w = jnp.exp(prompt_scores - top)
    response_w = jnp.exp(response_scores - top)
    total = prompt_w.sum(-1, keepdims=True) + response_w.sum(-1, keepdims=True)
    dt = prompt.v.dtype
    out = (jnp.einsum("ngkrt,ntkd->ngkrd", prompt_w.astype(dt), prompt.v, preferred_element_type=jnp.float32)
           + jnp.einsum("ngkrt,ngtkd->ngkrd", response_w.astype(dt), response.v,
                        preferred_element_type=jnp.float32))
    return (out / total).astype(q.dtype)


def decode_step(model, tokens, prompt_cache, response_cache, prompt_lengths, slot,
                constrain: Constraint = _identity):
    """One token for every row. tokens int32 [N*G] (row i*G+g belongs to prompt i), the response
    token index `slot` (scalar) -> (logits float32 [N*G, V], updated response cache).
    The token is at RoPE position prompt_length + slot and its key/value go to response slot `slot`."""
    n, group = response_cache[0].k.shape[:2]
    cfg = model.cfg
    rows = n * group
    positions = (jnp.repeat(prompt_lengths, group) + slot)[:, None]  # [R, 1]
    x = constrain(model.embed_tokens(tokens[:, None]))  # [R, 1, D]
    updated = []
    for layer, prompt, response in zip(model.layers, prompt_cache, response_cache):
        q, k, v = layer.attn.project_qkv(layer.input_norm(x), positions)
        k = k.reshape(n, group, 1, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(n, group, 1, cfg.num_kv_heads, cfg.head_dim)
        start = (0, 0, slot, 0, 0)
        response = LayerCache(constrain(jax.lax.dynamic_update_slice(response.k, k, start)),
                              constrain(jax.lax.dynamic_update_slice(response.v, v, start)))
        updated.append(response)
        q = q.reshape(n, group, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
        out = _attend_prompt_and_response(q, prompt, response, prompt_lengths, slot)
        x = x + layer.attn.project_out(out.reshape(rows, 1, cfg.num_heads, cfg.head_dim))
        x = constrain(x + layer.mlp(layer.post_attention_norm(x)))
    return model.logits(model.final_norm(x))[:, 0], updated
