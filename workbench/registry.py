"""One registry class for everything the workbench looks up by name: allocators, advantage estimators,
policy losses, rollout backends and import formats.

The shape follows verl's `core_algos`: a module-level registry, a `register(name)` decorator that
refuses duplicates, and a `get(name)` whose error lists every valid name. Callers look things up by
the name in their config and never branch on it.

    POLICY_LOSSES = Registry("policy loss")

    @POLICY_LOSSES.register("ppo_clip")
    def ppo_clip_loss(...): ...

    POLICY_LOSSES.get("nosuch")   # ConfigError: unknown policy loss 'nosuch'; valid names: ppo_clip
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from workbench.errors import ConfigError, WorkbenchError

F = TypeVar("F")


class Registry(Generic[F]):
    """Named values of one kind. `kind` names it in messages ("advantage estimator"); an unknown name
    raises `error` listing the valid names after `label`, sorted (or in registration order when
    `sort` is False)."""

    def __init__(self, kind: str, *, error: type[WorkbenchError] = ConfigError, label: str = "valid names",
                 sort: bool = True) -> None:
        self.kind = kind
        self.error = error
        self.label = label
        self.sort = sort
        self._items: dict[str, F] = {}

    def add(self, name: str, value: F) -> F:
        """Register `value` under `name`; a second registration of a name raises ValueError."""
        if name in self._items:
            owner = getattr(self._items[name], "__qualname__", None)
            raise ValueError(f"{self.kind} {name!r} is already registered" + (f" (by {owner})" if owner else ""))
        self._items[name] = value
        return value

    def remove(self, name: str) -> F:
        """Take `name` out (a test's or a plugin's entry, when it is done); KeyError when it is not there."""
        return self._items.pop(name)

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator adding a function or class under `name` (duplicates are refused)."""
        return lambda value: self.add(name, value)

    def get(self, name: str) -> F:
        """The value registered as `name`; an unknown name raises `error` listing the valid ones."""
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise self.error(f"unknown {self.kind} {name!r}; {self.label}: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        """The registered names (sorted unless the registry keeps registration order)."""
        return sorted(self._items) if self.sort else list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
