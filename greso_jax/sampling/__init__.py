"""JIT group sampler: G responses per prompt with a prefix-shared KV cache (`generate`, `generate_in_chunks`)."""

from greso_jax.sampling.kv_cache import decode_step, prefill
from greso_jax.sampling.sampler import SampleOutput, compile_count, generate, generate_in_chunks, lower_generate
from greso_jax.sampling.shapes import kv_cache_bytes

__all__ = ["SampleOutput", "compile_count", "decode_step", "generate", "generate_in_chunks", "kv_cache_bytes",
           "lower_generate", "prefill"]
