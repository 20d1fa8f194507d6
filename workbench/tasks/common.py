"""Helpers shared by the task config dataclasses: building a frozen config from a plain dict (as read
from TOML or JSON) and rejecting unknown keys by name, so a typo in a run config fails at load time
instead of silently falling back to a default."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from workbench.errors import ConfigError

T = TypeVar("T")


def config_from_dict(cls: type[T], data: dict[str, Any], *, where: str = "task") -> T:
    """Build the dataclass `cls` from `data`, naming unknown keys and the allowed ones.

    Lists become tuples (TOML and JSON have no tuples; the configs are frozen and hashable).
    `where` prefixes field names in messages (e.g. "task.levels").
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of fields, got {type(data).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(names)}"
        )
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{where}: {exc}") from exc


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The plain-dict form of a config (tuples become lists), the inverse of `config_from_dict`."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def require(cond: bool, field: str, message: str) -> None:
    """Raise a ConfigError naming `field` unless `cond` holds."""
    if not cond:
        raise ConfigError(f"{field}: {message}")
