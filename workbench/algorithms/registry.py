"""A small named-function registry, shared by the advantage estimators and the policy losses.

The shape follows verl's `core_algos`: a module-level dict, a `register(name)` decorator that refuses
duplicates, and a `get(name)` whose error lists every valid name. The engine looks functions up by
the name in its config and never branches on it.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from workbench.errors import ConfigError

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Named functions of one kind (`kind` appears in error messages, e.g. "advantage estimator")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator adding a function under `name`; a second registration of a name is an error."""

        def decorate(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> F:
        """The function registered as `name`; unknown names raise a ConfigError listing the valid ones."""
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items))
            raise ConfigError(f"unknown {self.kind} {name!r}; valid names: {valid}") from None

    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._items)
