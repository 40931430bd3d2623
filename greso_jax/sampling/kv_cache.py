"""Forward passes with a KV cache: prompt prefill (one row per distinct prompt) and one decode step
for all rows, attending to the shared prompt cache and the per-row response cache without copying
the prompt cache to the G rows of its group.

Cache layout, per layer: batch and head dimensions lead so both attention products are plain
batched matmuls; keys are stored transposed (sequence minor), which XLA:CPU multiplies much
faster than [T, hd] keys:
  prompt cache    k [N, Hkv, hd, Tp], v [N, Hkv, Tp, hd]          written once by `prefill`
  response cache  k [N, G, Hkv, hd, L], v [N, G, Hkv, L, hd]      slot s: response token s
In a plain call every row is at the same response step, so a decode step writes one slot for all
rows; under refill (`greso_jax.sampling.refill`) each prompt's group has its own slot.
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
    k: jax.Array  # transposed keys: [..., hd, T]
    v: jax.Array  # values: [..., T, hd]


def prefill(model, prompt_ids, prompt_lengths, constrain: Constraint = _identity):
    """prompt_ids int32 [N, Tp] (left-aligned, right-padded), prompt_lengths int32 [N] (>= 1) ->
    (prompt cache: one LayerCache per layer (k [N, Hkv, hd, Tp], v [N, Hkv, Tp, hd]),
     next-token logits float32 [N, V])."""
    n, tp = prompt_ids.shape
    positions = jnp.broadcast_to(jnp.arange(tp, dtype=jnp.int32), (n, tp))
    valid = positions < prompt_lengths[:, None]
    mask = causal_padding_mask(valid)
    x = constrain(model.embed_tokens(prompt_ids))
    rope = model.rope(positions, max_position=tp)
    caches = []
    for layer in model.layers:
        q, k, v = layer.attn.project_qkv(layer.input_norm(x), rope)
        caches.append(LayerCache(constrain(k.transpose(0, 2, 3, 1)), constrain(v.transpose(0, 2, 1, 3))))
        x = x + layer.attn.project_out(attend(q, k, v, mask))
        x = constrain(x + layer.mlp(layer.post_attention_norm(x)))
    last = jnp.take_along_axis(x, (prompt_lengths - 1)[:, None, None], axis=1)  # [N, 1, D]
    return caches, model.logits(model.final_norm(last))[:, 0]


def empty_response_cache(model, num_prompts: int, group: int, slots: int, constrain: Constraint = _identity):
    """Zeroed per-row response caches, one LayerCache (k [N, G, Hkv, hd, slots], v [N, G, Hkv, slots, hd])
    per layer, in the compute dtype."""
    cfg = model.cfg
    v_shape = (num_prompts, group, cfg.num_kv_heads, slots, cfg.head_dim)
    k_shape = v_shape[:3] + (cfg.head_dim, slots)
    zeros = lambda shape: constrain(jnp.zeros(shape, jnp.dtype(cfg.dtype)))  # noqa: E731
    return [LayerCache(zeros(k_shape), zeros(v_shape)) for _ in model.layers]


def _attend_prompt_and_response(q, prompt: LayerCache, response: LayerCache, prompt_lengths, slot, earlier=()):
    """q [N, G, Hkv, rep, hd] of the current token -> attention output [N, G, Hkv, rep, hd] over
    the prompt keys t < prompt_length, the keys of the `earlier` response chunks (full; each a
    LayerCache laid out as `response`) and the response keys t <= slot (a scalar, or int32 [N]:
    one per prompt), one joint softmax (float32)."""
    n, group, hkv, rep, hd = q.shape
    tp = prompt.v.shape[2]
    scale = 1.0 / jnp.sqrt(jnp.float32(hd))
    # The G rows of a prompt share its keys: one [G*rep, hd] x [hd, Tp] product per (prompt, kv head).
    q_by_head = q.transpose(0, 2, 1, 3, 4).reshape(n, hkv, group * rep, hd)
    prompt_scores = jnp.einsum("nkmd,nkdt->nkmt", q_by_head, prompt.k, preferred_element_type=jnp.float32)
    prompt_valid = jnp.arange(tp)[None, :] < prompt_lengths[:, None]  # [N, Tp]
    prompt_scores = jnp.where(prompt_valid[:, None, None, :], prompt_scores * scale, MASK_VALUE)
    prompt_scores = prompt_scores.reshape(n, hkv, group, rep, tp).transpose(0, 2, 1, 3, 4)
    chunks = (*earlier, response)
    chunk_scores = [jnp.einsum("ngkrd,ngkdt->ngkrt", q, chunk.k, preferred_element_type=jnp.float32) * scale
                    for chunk in chunks]
    slot_by_prompt = jnp.reshape(slot, jnp.shape(slot) + (1,) * 4)  # [1, 1, 1, 1] or [N, 1, 1, 1, 1]
    response_valid = jnp.arange(response.v.shape[3]) <= slot_by_prompt
    chunk_scores[-1] = jnp.where(response_valid, chunk_scores[-1], MASK_VALUE)
    top = prompt_scores.max(-1, keepdims=True)
    for scores in chunk_scores:
        top = jnp.maximum(top, scores.max(-1, keepdims=True))
    prompt_w = jnp.exp(prompt_scores - top)
    chunk_w = [jnp.exp(scores - top) for scores in chunk_scores]
    total = prompt_w.sum(-1, keepdims=True)
    for w in chunk_w:
        total = total + w.sum(-1, keepdims=True)
    dt = prompt.v.dtype
    prompt_w = prompt_w.transpose(0, 2, 1, 3, 4).reshape(n, hkv, group * rep, tp).astype(dt)
    out = jnp.einsum("nkmt,nktd->nkmd", prompt_w, prompt.v, preferred_element_type=jnp.float32)
    out = out.reshape(n, hkv, group, rep, hd).transpose(0, 2, 1, 3, 4)
    for w, chunk in zip(chunk_w, chunks):
        out = out + jnp.einsum("ngkrt,ngktd->ngkrd", w.astype(dt), chunk.v, preferred_element_type=jnp.float32)
    return (out / total).astype(q.dtype)


def _write_slot(cache, new, slot, axis: int):
    """cache [N, ...] with `new` (size 1 along `axis`) written at index `slot` of `axis`: one slot
    for every prompt (scalar), or each prompt's own (int32 [N])."""
    if jnp.ndim(slot) == 0:
        return jax.lax.dynamic_update_slice_in_dim(cache, new, slot, axis)
    return jax.vmap(lambda c, x, s: jax.lax.dynamic_update_slice_in_dim(c, x, s, axis - 1))(cache, new, slot)


def decode_step(model, tokens, prompt_cache, response_cache, prompt_lengths, slot,
                constrain: Constraint = _identity, earlier=None, offset=0):
    """One token for every row. tokens int32 [N*G] (row i*G+g belongs to prompt i), the response
    token index `slot` (a scalar, or int32 [N]: each prompt's own) -> (logits float32 [N*G, V],
    updated response cache). The token is at RoPE position prompt_length + offset + slot and its
    key/value go to slot `slot` of `response_cache`. earlier: per layer, a tuple of full response
    chunks before it (offset slots in all, read-only), or None. slot must be below the chunk's
    length: the RoPE table covers the prompt cache and the slots up to the chunk's end."""
    n, group = response_cache[0].k.shape[:2]
    cfg = model.cfg
    rows = n * group
    row_slots = slot if jnp.ndim(slot) == 0 else jnp.repeat(slot, group)
    positions = (jnp.repeat(prompt_lengths, group) + offset + row_slots)[:, None]  # [R, 1]
    x = constrain(model.embed_tokens(tokens[:, None]))  # [R, 1, D]
    # Positions stay below the prompt cache's length plus every response slot before and in this chunk.
    rope = model.rope(positions, max_position=prompt_cache[0].v.shape[2] + offset + response_cache[0].v.shape[3])
    updated = []
    earlier = [()] * len(model.layers) if earlier is None else earlier
    # The named scopes label the HLO for `greso_jax.core.op_profile` (experiments/bench/decode_profile.py).
    for layer, prompt, response, before in zip(model.layers, prompt_cache, response_cache, earlier):
        with jax.named_scope("qkv_projection"):
            q, k, v = layer.attn.project_qkv(layer.input_norm(x), rope)
        with jax.named_scope("kv_cache_write"):
            k = k.reshape(n, group, cfg.num_kv_heads, cfg.head_dim, 1)
            v = v.reshape(n, group, cfg.num_kv_heads, 1, cfg.head_dim)
            response = LayerCache(constrain(_write_slot(response.k, k, slot, 4)),
                                  constrain(_write_slot(response.v, v, slot, 3)))
        updated.append(response)
        with jax.named_scope("attention"):
            q = q.reshape(n, group, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
            out = _attend_prompt_and_response(q, prompt, response, prompt_lengths, slot, before)
        with jax.named_scope("out_projection"):
            x = x + layer.attn.project_out(out.reshape(rows, 1, cfg.num_heads, cfg.head_dim))
        with jax.named_scope("mlp"):
            x = constrain(x + layer.mlp(layer.post_attention_norm(x)))
    with jax.named_scope("logits"):
        return model.logits(model.final_norm(x))[:, 0], updated
