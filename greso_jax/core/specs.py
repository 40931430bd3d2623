"""Typed field specs and the one checker every config field goes through (`check_field`, `ConfigError`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence


class ConfigError(ValueError):
    """An invalid config field; the message starts with the field's dotted name."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a field accepts: its type(s), an optional range, a choice list or a custom check."""

    kind: type | tuple[type, ...]
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: value must be > low (not >=)
    choices: Sequence[Any] | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None


INT, FLOAT, BOOL, STR, SEQ = int, (int, float), bool, str, (tuple, list)


def check_field(name: str, value, spec: Spec) -> None:
    """Raises ConfigError naming `name` when `value` does not satisfy `spec`."""
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{name}: expected {'/'.join(k.__name__ for k in kinds)}, got bool {value!r}")
    if not isinstance(value, kinds):
        raise ConfigError(
            f"{name}: expected {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name}: must be finite, got {value!r}")
    choices = None if spec.choices is None else tuple(spec.choices)
    if choices is not None and value not in choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(map(str, choices))}")
    if spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low):
        raise ConfigError(f"{name}: must be {'>' if spec.low_open else '>='} {spec.low}, got {value!r}")
    if spec.high is not None and value > spec.high:
        raise ConfigError(f"{name}: must be <= {spec.high}, got {value!r}")
    if spec.check is not None and (problem := spec.check(value)):
        raise ConfigError(f"{name}: {problem}, got {value!r}")


def field(default, spec: Spec, doc: str):
    """A dataclass field that carries its spec and one line of documentation (read by config.base)."""
    return dataclasses.field(default=default, metadata={"spec": spec, "doc": doc})


def check_dataclass(params, prefix: str) -> None:
    """Checks every field of a settings dataclass declared with `field(...)`; errors name `prefix.field`."""
    for f in dataclasses.fields(params):
        spec = f.metadata.get("spec")
        if spec is not None:
            check_field(f"{prefix}.{f.name}", getattr(params, f.name), spec)
