"""Qwen2-family decoder in Flax NNX: GQA, RoPE, RMSNorm, SwiGLU, optional q/k/v biases.

Every parameter carries `logical_axes` metadata (see greso_jax.parallel.sharding). Layers
are a plain list (unrolled), which lets the sampler carry one KV cache per layer through
its decode loop; the building blocks (`Attention.project_qkv`, `attend`, `Attention.project_out`,
`MLP`) are public so the sampler can reuse them without a second implementation.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from greso_jax.models.presets import ModelConfig

MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)  # finite: a fully masked row stays NaN-free


def dense(x, kernel, preferred_element_type=None):
    """x [..., D] @ kernel [D, F] -> [..., F], as one matmul over the flattened leading axes.

    XLA:CPU lowers the kernel gradient of a [B, T, D] einsum (a dot contracting both B and T) far
    more slowly than the same product on [B*T, D] rows. On GPU and TPU the reshape is free."""
    rows = x.reshape(-1, x.shape[-1])
    y = jnp.matmul(rows, kernel, preferred_element_type=preferred_element_type)
    return y.reshape(*x.shape[:-1], kernel.shape[-1])


def _param(rngs: nnx.Rngs, shape, axes, dtype, init=None):
    init = init or nnx.initializers.normal(stddev=0.02)
    return nnx.Param(init(rngs.params(), shape, dtype), logical_axes=axes)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, cfg: ModelConfig):
        self.eps = eps
        self.compute_dtype = jnp.dtype(cfg.dtype)
        self.weight = nnx.Param(jnp.ones((dim,), jnp.dtype(cfg.param_dtype)), logical_axes=("norm",))

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (x32 * self.weight.value.astype(jnp.float32)).astype(self.compute_dtype)


def rope_tables(positions, head_dim: int, theta: float, max_position: int | None = None):
    """cos, sin [B, T, head_dim] for integer positions [B, T] (HF's rotate-half layout).

    With max_position (every position must be below it: a position past the table reads NaN), the
    rows are looked up in [max_position, head_dim / 2] tables of constants that XLA folds at compile
    time. Computed from the positions instead, the cos and sin get fused into each layer's RoPE
    products and evaluated once per head and element, for q and k in every layer (an optimization
    barrier does not stop it on XLA:CPU), a visible share of a CPU decode step."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    if max_position is None:
        angles = positions.astype(jnp.float32)[..., None] * inv_freq
        cos, sin = jnp.cos(angles), jnp.sin(angles)
    else:
        angles = jnp.arange(max_position, dtype=jnp.float32)[:, None] * inv_freq
        cos, sin = (jnp.take(table, positions, axis=0) for table in (jnp.cos(angles), jnp.sin(angles)))
    return jnp.concatenate([cos, cos], axis=-1), jnp.concatenate([sin, sin], axis=-1)


def apply_rope(x, cos, sin):
    """x [B, T, H, D]; cos/sin [B, T, D]."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    return (x.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin).astype(x.dtype)


def attend(q, k, v, mask):
    """Grouped-query attention. q [B, Tq, H, D]; k, v [B, Tk, Hkv, D]; mask bool [B, Tq, Tk]
    (True = may attend). Returns [B, Tq, H, D] in q's dtype; softmax in float32."""
    b, tq, h, d = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, tq, hkv, h // hkv, d)
    scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(d)
    scores = jnp.where(mask[:, None, None, :, :], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v, preferred_element_type=jnp.float32)
    return out.reshape(b, tq, h, d).astype(q.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        pdt = jnp.dtype(cfg.param_dtype)
        d, h, hkv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_kernel = _param(rngs, (d, h * hd), ("embed", "heads"), pdt)
        self.k_kernel = _param(rngs, (d, hkv * hd), ("embed", "kv_heads"), pdt)
        self.v_kernel = _param(rngs, (d, hkv * hd), ("embed", "kv_heads"), pdt)
        self.o_kernel = _param(rngs, (h * hd, d), ("heads", "embed"), pdt)
        if cfg.qkv_bias:
            zeros = nnx.initializers.zeros
            self.q_bias = _param(rngs, (h * hd,), ("heads",), pdt, zeros)
            self.k_bias = _param(rngs, (hkv * hd,), ("kv_heads",), pdt, zeros)
            self.v_bias = _param(rngs, (hkv * hd,), ("kv_heads",), pdt, zeros)

    def _linear(self, x, kernel, bias):
        dt = jnp.dtype(self.cfg.dtype)
        y = dense(x, kernel.value.astype(dt))
        return y + bias.value.astype(dt) if bias is not None else y

    def project_qkv(self, x, rope):
        """x [B, T, D], rope: cos, sin [B, T, hd] of the tokens' positions (`Qwen2.rope`) ->
        q [B, T, H, hd], k, v [B, T, Hkv, hd], RoPE applied."""
        cfg = self.cfg
        b, t, _ = x.shape
        bias = (lambda name: getattr(self, name)) if cfg.qkv_bias else (lambda name: None)
        q = self._linear(x, self.q_kernel, bias("q_bias")).reshape(b, t, cfg.num_heads, cfg.head_dim)
        k = self._linear(x, self.k_kernel, bias("k_bias")).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        v = self._linear(x, self.v_kernel, bias("v_bias")).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        cos, sin = rope
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def project_out(self, attn_out):
        """attn_out [B, T, H, hd] -> [B, T, D]."""
        b, t = attn_out.shape[:2]
        return self._linear(attn_out.reshape(b, t, -1), self.o_kernel, None)

    def __call__(self, x, rope, mask):
        q, k, v = self.project_qkv(x, rope)
        return self.project_out(attend(q, k, v, mask))


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pdt = jnp.dtype(cfg.param_dtype)
        self.dtype = jnp.dtype(cfg.dtype)
        self.gate_kernel = _param(rngs, (cfg.hidden_size, cfg.intermediate_size), ("embed", "mlp"), pdt)
        self.up_kernel = _param(rngs, (cfg.hidden_size, cfg.intermediate_size), ("embed", "mlp"), pdt)
        self.down_kernel = _param(rngs, (cfg.intermediate_size, cfg.hidden_size), ("mlp", "embed"), pdt)

    def __call__(self, x):
        dt = self.dtype
        gate = dense(x, self.gate_kernel.value.astype(dt))
        up = dense(x, self.up_kernel.value.astype(dt))
        return dense(jax.nn.silu(gate) * up, self.down_kernel.value.astype(dt))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        self.attn = Attention(cfg, rngs)
        self.post_attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, rope, mask):
        x = x + self.attn(self.input_norm(x), rope, mask)
        return x + self.mlp(self.post_attention_norm(x))


def causal_padding_mask(attention_mask):
    """[B, T] validity -> [B, T, T] bool: causal, keys restricted to valid tokens."""
    t = attention_mask.shape[1]
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    return causal[None] & attention_mask.astype(bool)[:, None, :]


class Qwen2(nnx.Module):
    """Decoder-only language model. `model(input_ids [B, T], attention_mask [B, T])` -> logits
    float32 [B, T, V] for right-padded batches."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        pdt = jnp.dtype(cfg.param_dtype)
        self.embed = _param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), pdt)
        self.layers = nnx.List([DecoderLayer(cfg, rngs) for _ in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg)
        if not cfg.tie_embeddings:
            self.lm_head = _param(rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), pdt)

    def embed_tokens(self, input_ids):
        return jnp.take(self.embed.value, input_ids, axis=0).astype(jnp.dtype(self.cfg.dtype))

    def unembedding(self):
        """[D, V] output projection (the transposed embedding when tied)."""
        return self.embed.value.T if self.cfg.tie_embeddings else self.lm_head.value

    def rope(self, positions, max_position: int | None = None):
        """cos, sin [B, T, hd] for positions [B, T], computed once for all layers (see `rope_tables`)."""
        return rope_tables(positions, self.cfg.head_dim, self.cfg.rope_theta, max_position)

    def logits(self, hidden):
        """hidden [..., D] (after the final norm) -> float32 logits [..., V]."""
        w = self.unembedding().astype(jnp.dtype(self.cfg.dtype))
        return dense(hidden, w, preferred_element_type=jnp.float32)

    def hidden_states(self, input_ids, attention_mask=None, positions=None):
        """Final-normed hidden states [B, T, D]; positions default to 0..T-1 (right padding)."""
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones((b, t), jnp.int32)
        if positions is None:
            rope = self.rope(jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t)), max_position=t)
        else:
            rope = self.rope(positions)
        mask = causal_padding_mask(attention_mask)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            if self.cfg.remat:
                x = nnx.remat(lambda lyr, h: lyr(h, rope, mask))(layer, x)
            else:
                x = layer(x, rope, mask)
        return self.final_norm(x)

    def __call__(self, input_ids, attention_mask=None, positions=None):
        return self.logits(self.hidden_states(input_ids, attention_mask, positions))


def init_model(cfg: ModelConfig, seed: int = 0) -> Qwen2:
    return Qwen2(cfg, nnx.Rngs(params=seed))


def abstract_model(cfg: ModelConfig) -> Qwen2:
    """The model with ShapeDtypeStructs instead of arrays: no memory is allocated."""
    return nnx.eval_shape(lambda: Qwen2(cfg, nnx.Rngs(params=0)))


def count_parameters(model: nnx.Module) -> int:
    """Parameter count; works on abstract models too (shapes only)."""
    return sum(math.prod(v.shape) for v in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
