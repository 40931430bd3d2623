"""compile_seconds counts the time JAX spends compiling, and nothing else."""

import time

import jax
import jax.numpy as jnp

from greso_jax.run.timers import compile_seconds


def test_a_new_program_adds_compile_time_and_a_cached_call_does_not():
    before = compile_seconds()
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() * 3.0 + 1.0)
    x = jnp.ones((64, 32))
    f(x).block_until_ready()
    after_compile = compile_seconds()
    assert after_compile > before
    start = time.perf_counter()
    for _ in range(5):
        f(x).block_until_ready()
    assert compile_seconds() == after_compile and time.perf_counter() - start > 0
