"""The strategy registry: `@register_strategy("name")` on a Selector subclass; `make_selector` builds one by name.

Besides the classes it holds what the tools enumerate instead of naming strategies: the aliases
an experiment variant may use ("ds"), named variants (a strategy with some settings changed, e.g.
"ds_fixed"), and two roles: the comparison baseline (a variant) and the bound (the strategy every
pre-rollout selector is measured against).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from greso_jax.core.registry import Registry
from greso_jax.selection.base import Selector
from greso_jax.selection.settings import PassConfig

STRATEGIES: Registry[type[Selector]] = Registry("selection strategy")
ALIASES: dict[str, str] = {}  # short name -> registered strategy, filled by register_strategy(aliases=...)
BASELINE, BOUND, CAUSAL_BOUND = "baseline", "bound", "causal_bound"
_ROLES: dict[str, str] = {}  # role -> the variant (BASELINE) or strategy (BOUND, CAUSAL_BOUND) that has it


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named run of a registered strategy: its settings with `overrides` changed. The name is what run
    folders, reports and the simulator's tables call it."""

    name: str
    strategy: str
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def settings(self) -> dict[str, Any]:
        """The overridden fields of selection.<strategy>.*."""
        return dict(self.overrides)


VARIANTS: Registry[Variant] = Registry("strategy variant")


def _take_role(role: str, name: str) -> None:
    if _ROLES.get(role, name) != name:
        raise ValueError(f"{role}: already {_ROLES[role]!r}, cannot also be {name!r}")
    _ROLES[role] = name


def register_strategy(name: str, *, aliases: tuple[str, ...] = (), bound: bool = False, causal_bound: bool = False):
    """Class decorator: registers a Selector subclass under `name` (its `strategy` attribute), with the
    short names an experiment variant may use for it; `bound`: it is the bound (the oracle);
    `causal_bound`: it is the bound of every selector that predicts from history (known_rate)."""
    def add(cls: type[Selector]) -> type[Selector]:
        if not (isinstance(cls, type) and issubclass(cls, Selector)):
            raise TypeError(f"register_strategy({name!r}): {cls!r} is not a Selector subclass")
        cls.strategy = name
        STRATEGIES.register(name)(cls)
        for alias in aliases:
            if ALIASES.get(alias, name) != name or alias in STRATEGIES:
                raise ValueError(f"alias {alias!r} of {name!r} is taken")
            ALIASES[alias] = name
        if bound:
            _take_role(BOUND, name)
        if causal_bound:
            _take_role(CAUSAL_BOUND, name)
        return cls
    return add


def register_variant(name: str, strategy: str, *, baseline: bool = False, **overrides) -> Variant:
    """Registers `strategy` with `overrides` of its settings as variant `name`; `baseline`: it is the
    comparison baseline (the target accuracy and the speedups are measured against it)."""
    variant = VARIANTS.register(name)(Variant(name, strategy, tuple(sorted(overrides.items()))))
    if baseline:
        _take_role(BASELINE, name)
    return variant


SIZED = "@"  # "NAME@SIZER": variant or strategy NAME with its passes sized by SIZER (selection.pass_sizing)


def variant(name: str) -> Variant:
    """A named variant, or a registered strategy's name as the variant with its defaults; either one
    followed by "@SIZER" is it with `pass_sizing=SIZER` (comparisons at equal sizing)."""
    base, sized, sizer = name.partition(SIZED)
    if sized:
        run = variant(base)
        choices = sizing_choices(run.strategy)
        if sizer not in choices:
            raise ValueError(f"{name!r}: {run.strategy} sizes its passes by one of {list(choices)} "
                             f"(selection.{run.strategy}.pass_sizing), not {sizer!r}")
        return Variant(name, run.strategy, tuple(sorted({**run.settings, "pass_sizing": sizer}.items())))
    if name in VARIANTS:
        return VARIANTS.get(name)
    STRATEGIES.get(name)  # raises naming the known strategies
    return Variant(name, name)


def sizing_choices(strategy: str) -> tuple[str, ...]:
    """The pass sizers strategy can be run with (its settings' `pass_sizing` choices); () when its passes
    are its own (vanilla, AERO, the oracle)."""
    settings = STRATEGIES.get(strategy).Settings
    fields = {} if settings is None else {f.name: f for f in dataclasses.fields(settings)}
    return tuple(fields["pass_sizing"].metadata["spec"].choices) if "pass_sizing" in fields else ()


def named_variants(strategy: str | None = None) -> tuple[Variant, ...]:
    """The named variants (of `strategy`, or of all), in registration order."""
    return tuple(v for _, v in VARIANTS.items() if strategy in (None, v.strategy))


def baseline() -> Variant:
    """The comparison baseline (Dynamic Sampling in the papers' fixed passes); its strategy with its
    defaults is the second baseline the reports set beside it."""
    return VARIANTS.get(_ROLES[BASELINE])


def bound() -> str:
    """The strategy every pre-rollout selector is measured against (the oracle, simulation only)."""
    return _ROLES[BOUND]


def causal_bound() -> str:
    """The strategy told every prompt's true rate (simulation only): no predictor from history can beat it."""
    return _ROLES[CAUSAL_BOUND]


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


def settings_of(name: str, values: Mapping | None, *, group_size: int | None = None) -> Any:
    """Strategy `name`'s settings dataclass from a mapping of its fields, checked (errors name
    `selection.<name>.<field>`; with `group_size`, also what it derives from rl.group_size); None for a
    strategy without settings."""
    cls = STRATEGIES.get(name).Settings
    if cls is None:
        if values:
            raise ValueError(f"selection.{name}: the strategy takes no settings, got {sorted(values)}")
        return None
    return cls(**dict(values or {})).checked(f"selection.{name}", group_size=group_size)


def make_selector(strategy: str, *, num_prompts: int, group_size: int, seed: int,
                  passes: PassConfig | None = None, settings: Mapping | None = None, checked: bool = False,
                  **offered) -> Selector:
    """The selector registered as `strategy`.

    group_size: responses per prompt (rl.group_size); passes: the shared pass sizing (`selection.*`);
    settings: the strategy's own section (`selection.<name>.*`) as a mapping, None for its defaults;
    checked: passes and settings were checked already for this group size (config.validate);
    offered: the extras a caller can give (prompt_levels; the simulator's outcome and success): the
    strategy gets exactly those it declares in `extras`.
    """
    cls = STRATEGIES.get(strategy)
    known = {name for _, c in STRATEGIES.items() for name in c.extras}
    if set(offered) - known:
        raise TypeError(f"make_selector: no strategy takes {sorted(set(offered) - known)}; extras: {sorted(known)}")
    extras = {name: offered[name] for name in cls.extras if name in offered}
    return cls(num_prompts, group_size=group_size, pass_config=passes, seed=seed, checked=checked,
               **dict(settings or {}), **extras)
