"""Helpers shared by the allocators' config dataclasses: range checks that name the field, building a
config from a plain dict (as a control command or a TOML table gives it) with unknown and ill-typed
fields rejected by name, and reading each field's attribute docstring (for `workbench allocators list`).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal, get_args, get_origin

from workbench.docstrings import field_docs
from workbench.errors import ConfigError


def check_int(owner: str, name: str, value: Any, lo: int, hi: int | None = None) -> None:
    """Raise ConfigError unless `value` is an int in [lo, hi] (hi None: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}.{name} must be an integer, got {value!r}")
    if hi is None and value < lo:
        raise ConfigError(f"{owner}.{name} must be an integer >= {lo}, got {value}")
    if hi is not None and not lo <= value <= hi:
        raise ConfigError(f"{owner}.{name} must be an integer in [{lo}, {hi}], got {value}")


def check_float(
    owner: str,
    name: str,
    value: Any,
    lo: float,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    """Raise ConfigError unless `value` is a finite number in the given (half-)open range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}.{name} must be a finite number, got {value!r}")
    bad = value < lo or (lo_open and value == lo)
    if hi is not None:
        bad = bad or value > hi or (hi_open and value == hi)
    if bad:
        left = "(" if lo_open else "["
        right = ")" if (hi is None or hi_open) else "]"
        upper = "inf" if hi is None else f"{hi:g}"
        raise ConfigError(f"{owner}.{name} must be in {left}{lo:g}, {upper}{right}, got {value!r}")


def check_choice(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{owner}.{name} must be one of {', '.join(allowed)}; got {value!r}")


def _coerce(owner: str, name: str, hint: Any, value: Any) -> Any:
    """Check `value` against a field's type hint; ints are accepted where floats are expected."""
    origin = get_origin(hint)
    if origin is Literal:
        allowed = get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{owner}.{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{owner}.{name} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{owner}.{name} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{owner}.{name} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{owner}.{name} must be a string, got {value!r}")
        return value
    return value


def config_from_dict(cls: type, params: dict[str, Any], *, base: Any | None = None) -> Any:
    """Build `cls` from `params` (over `base`'s values when given), rejecting unknown and ill-typed
    fields by name; the dataclass's own `__post_init__` then checks ranges."""
    owner = cls.__name__ if base is None else type(base).__name__
    if not isinstance(params, dict):
        raise ConfigError(f"{owner}: parameters must be a mapping of field to value, got {type(params).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ConfigError(
            f"{owner}: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    values = {k: _coerce(owner, k, hints[k], v) for k, v in params.items()}
    if base is not None:
        return dataclasses.replace(base, **values)
    return cls(**values)


def describe_config(cls: type) -> list[dict[str, Any]]:
    """[{name, type, default, doc}] for each field of a config dataclass."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        hint = hints[f.name]
        type_name = (
            "|".join(map(str, get_args(hint))) if get_origin(hint) is Literal else getattr(hint, "__name__", str(hint))
        )
        out.append({"name": f.name, "type": type_name, "default": default, "doc": docs.get(f.name, "")})
    return out
