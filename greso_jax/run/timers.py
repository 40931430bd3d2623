"""Seconds this process has spent compiling JAX programs (tracing, lowering, XLA), from JAX's monitoring events.

Compilation is a fixed cost per program shape, paid once per run: a benchmark that compares
strategies by rollout or update time reports it apart, or a strategy that happens to touch one
more row bucket would look slower for a reason unrelated to the responses it generates.
"""

from __future__ import annotations

import contextlib
import threading
import time

import jax

_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "/jax/core/compile/backend_compile_duration")
_lock = threading.Lock()
_total = [0.0]
_installed = [False]


def _listen(event: str, duration: float, **kwargs) -> None:
    if event in _EVENTS:
        with _lock:
            _total[0] += duration


def compile_seconds() -> float:
    """Total compile seconds since the first call (which starts the count)."""
    with _lock:
        if not _installed[0]:
            jax.monitoring.register_event_duration_secs_listener(_listen)
            _installed[0] = True
        return _total[0]


def cpu_name(name: str) -> str:
    """The CPU-seconds metric beside a wall-time one: "time/rollout" -> "cpu/rollout"."""
    return "cpu/" + name.removeprefix("time/")


class SectionTimers:
    """Wall seconds per named section of a step (`seconds[name]`), the part of each spent compiling
    (`seconds[name + "_compile"]`) and this process's CPU seconds in it, all threads
    (`seconds[cpu_name(name)]`); a section timed twice in a step adds up. CPU seconds are what a
    comparison on a shared machine can trust: other jobs stretch wall time, not the work done."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def reset(self) -> None:
        self.seconds = {}

    def add(self, name: str, seconds: float) -> None:
        """Adds seconds measured elsewhere (another thread's work) to `name`."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, name: str):
        start, compiling, cpu_start = time.perf_counter(), compile_seconds(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            cpu = cpu_name(name)
            self.seconds[cpu] = self.seconds.get(cpu, 0.0) + time.process_time() - cpu_start
            self.seconds[f"{name}_compile"] = self.seconds.get(f"{name}_compile", 0.0) + compile_seconds() - compiling
