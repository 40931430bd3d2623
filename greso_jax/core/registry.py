"""Name -> implementation registries for the pluggable families (strategies, advantages, loss aggregations, KL)."""

from __future__ import annotations

import contextlib
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """One family's implementations by name. `@REGISTRY.register("name")` adds one where it is defined.

    Iterating yields the names in registration order, so a registry can stand wherever a tuple
    of allowed names did (config choices, experiment variants, benchmark sweeps).
    """

    def __init__(self, family: str):
        self.family = family
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.family}: a registered name must be a non-empty string, got {name!r}")

        def add(entry: T) -> T:
            if name in self._entries and self._entries[name] is not entry:
                raise ValueError(f"{self.family}: {name!r} is already registered ({self._entries[name]!r})")
            self._entries[name] = entry
            return entry

        return add

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    @contextlib.contextmanager
    def temporarily(self, name: str, entry: T) -> Iterator[T]:
        """Registers `entry` for the duration of a `with` block (tests add toy implementations this way)."""
        self.register(name)(entry)
        try:
            yield entry
        finally:
            self.unregister(name)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.family} {name!r}; known: {', '.join(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def items(self):
        return self._entries.items()

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.family!r}: {', '.join(self._entries)})"
