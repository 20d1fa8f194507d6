"""The allocator registry (a `workbench.registry.Registry`: a decorator that refuses duplicates, a
getter that lists the valid names when it fails), and `make_allocator`, which builds one from a plain dict of parameters (a
run config's table or a live control command) rejecting unknown and ill-typed fields by name."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from workbench.allocators._config import config_from_dict, describe_config
from workbench.allocators.base import Allocator
from workbench.registry import Registry

ALLOCATORS: Registry[type[Allocator]] = Registry("allocator", label="valid")

A = TypeVar("A", bound=type[Allocator])


def register_allocator(name: str) -> Callable[[A], A]:
    """Class decorator: register an Allocator subclass under `name` (sets `cls.name`)."""

    def deco(cls: A) -> A:
        if not isinstance(cls, type) or not issubclass(cls, Allocator):
            raise TypeError(f"register_allocator({name!r}) needs an Allocator subclass, got {cls!r}")
        ALLOCATORS.add(name, cls)
        cls.name = name
        return cls

    return deco


def available_allocators() -> list[str]:
    """Registered names, sorted."""
    return ALLOCATORS.names()


def get_allocator(name: str) -> type[Allocator]:
    """The class registered under `name`; an unknown name raises ConfigError listing the valid ones."""
    return ALLOCATORS.get(name)


def make_config(name: str, params: dict[str, Any] | None = None) -> Any:
    """The validated config of allocator `name` from a dict (missing fields take their defaults)."""
    return config_from_dict(get_allocator(name).Config, {} if params is None else params)


def make_allocator(name: str, params: dict[str, Any] | None = None, seed: int = 0) -> Allocator:
    """Build allocator `name` from a dict of parameters; raises ConfigError naming a bad field."""
    cls = get_allocator(name)
    return cls(make_config(name, params), seed=seed)


def describe_allocator(name: str) -> dict[str, Any]:
    """Name, one-line summary, module docstring and parameters (name, type, default, doc)."""
    cls = get_allocator(name)
    import sys

    doc = (sys.modules[cls.__module__].__doc__ or "").strip()
    return {
        "name": name,
        "summary": doc.splitlines()[0] if doc else "",
        "doc": doc,
        "params": describe_config(cls.Config),
    }


def shipped_allocators() -> list[str]:
    """The allocators that come with the workbench (not ones registered by user code or tests)."""
    return [n for n in available_allocators() if get_allocator(n).__module__.startswith("workbench.")]
