"""compile_seconds counts the time JAX spends compiling, and nothing else."""

import time

import jax
import jax.numpy as jnp

from greso_jax.run.timers import SectionTimers, compile_seconds, cpu_name


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


def test_section_timers_add_up_wall_and_cpu_seconds_per_section():
    """A section's CPU seconds count work, not waiting: a sleep adds wall time only, a busy loop both;
    a section timed twice in a step adds up."""
    timers = SectionTimers()
    with timers.timed("time/rollout"):
        time.sleep(0.2)
    assert timers.seconds["time/rollout"] >= 0.2
    assert timers.seconds[cpu_name("time/rollout")] < 0.1
    with timers.timed("time/rollout"):
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
    assert timers.seconds["time/rollout"] >= 0.4
    assert timers.seconds["cpu/rollout"] >= 0.2
    timers.reset()
    assert timers.seconds == {}
