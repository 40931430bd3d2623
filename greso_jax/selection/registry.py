"""The strategy registry: `@register_strategy("name")` on a Selector subclass; `make_selector` builds one by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from greso_jax.core.registry import Registry
from greso_jax.selection.base import PassConfig, Selector

STRATEGIES: Registry[type[Selector]] = Registry("selection strategy")
ALIASES = {"ds": "dynamic_sampling"}  # short names experiment variants accept


def register_strategy(name: str):
    """Class decorator: registers a Selector subclass under `name` (its `strategy` attribute)."""
    def add(cls: type[Selector]) -> type[Selector]:
        if not (isinstance(cls, type) and issubclass(cls, Selector)):
            raise TypeError(f"register_strategy({name!r}): {cls!r} is not a Selector subclass")
        cls.strategy = name
        return STRATEGIES.register(name)(cls)
    return add


def resolve_strategy(name: str) -> str:
    """The registered name for `name` or its alias; raises naming the known strategies."""
    name = ALIASES.get(name, name)
    STRATEGIES.get(name)
    return name


def training_strategies() -> tuple[str, ...]:
    """Registered strategies a training run can use (all but the simulation-only ones), in registration order."""
    return tuple(name for name, cls in STRATEGIES.items() if not cls.simulation_only)


def training_strategy_names() -> tuple[str, ...]:
    """What an experiment variant may name: the training strategies and their aliases."""
    return (*training_strategies(), *(alias for alias, name in ALIASES.items() if name in training_strategies()))


def default_settings(name: str) -> dict[str, Any]:
    """The defaults of strategy `name`'s own config section ({} for a strategy without one)."""
    settings = STRATEGIES.get(name).Settings
    return {} if settings is None else dataclasses.asdict(settings())


def settings_of(name: str, values: Mapping | None) -> Any:
    """Strategy `name`'s settings dataclass from a mapping of its fields, checked (errors name
    `selection.<name>.<field>`); None for a strategy without settings."""
    cls = STRATEGIES.get(name).Settings
    if cls is None:
        if values:
            raise ValueError(f"selection.{name}: the strategy takes no settings, got {sorted(values)}")
        return None
    return cls(**dict(values or {})).checked(f"selection.{name}")


def make_selector(strategy: str, *, num_prompts: int, group_size: int, seed: int,
                  passes: PassConfig | None = None, settings: Mapping | None = None, **extras) -> Selector:
    """The selector registered as `strategy` (or its alias).

    group_size: responses per prompt (rl.group_size); passes: the shared pass sizing
    (`selection.*`); settings: the strategy's own section (`selection.<name>.*`) as a mapping,
    None for its defaults; extras: what only some strategies take (the oracle's `outcome`).
    """
    name = resolve_strategy(strategy)
    cls = STRATEGIES.get(name)
    fields = settings_of(name, settings)
    kwargs = {} if fields is None else dataclasses.asdict(fields)
    return cls(num_prompts, group_size=group_size, pass_config=passes, seed=seed, **kwargs, **extras)
