"""Seconds this process has spent compiling JAX programs (tracing, lowering, XLA), from JAX's monitoring events.

Compilation is a fixed cost per program shape, paid once per run: a benchmark that compares
strategies by rollout or update time reports it apart, or a strategy that happens to touch one
more row bucket would look slower for a reason unrelated to the responses it generates.
"""

from __future__ import annotations

import threading

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
