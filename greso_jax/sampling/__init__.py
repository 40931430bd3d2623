"""JIT group sampler: G responses per prompt with a prefix-shared KV cache (`generate`)."""

from greso_jax.sampling.kv_cache import decode_step, prefill
from greso_jax.sampling.sampler import SampleOutput, compile_count, generate, kv_cache_bytes, lower_generate

__all__ = ["SampleOutput", "compile_count", "decode_step", "generate", "kv_cache_bytes", "lower_generate",
           "prefill"]
