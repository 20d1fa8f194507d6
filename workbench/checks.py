"""One way to build a config: a frozen dataclass built from plain data (a TOML table, a control
command's JSON, a dict), with unknown and ill-typed fields rejected by name, and its range checks in
the dataclass's own `__post_init__`, next to the fields they check.

    @dataclass(frozen=True)
    class PipelineConfig:             # workbench/config/pipeline.py, one field of it
        is_cap: float = 2.0
        \"\"\"Upper bound of the importance weight pi_prox / pi_behav (>= 1).\"\"\"

        def __post_init__(self) -> None:
            check(self.is_cap >= 1, "pipeline.is_cap", "a number >= 1", self.is_cap)

    build_config(PipelineConfig, {"is_cap": 4.0}, where="pipeline")

Every failure is a `ConfigError` naming the field as `section.field` and what is allowed. The run
config (`workbench.config`), the task configs (`workbench.tasks`), the organism's recipe and the
allocators' parameters are all built here.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal, TypeVar

from workbench.errors import ConfigError

T = TypeVar("T")


# -- range checks (called from __post_init__) ------------------------------------------------------


def check(ok: bool, name: str, allowed: str, value: Any) -> None:
    """Raise ConfigError "`name`: `value` is not allowed (`allowed`)" unless `ok`."""
    if not ok:
        raise ConfigError(f"{name}: {value!r} is not allowed ({allowed})")


def require(cond: bool, field: str, message: str) -> None:
    """Raise ConfigError "`field`: `message`" unless `cond` holds."""
    if not cond:
        raise ConfigError(f"{field}: {message}")


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
    """Raise ConfigError unless `value` is one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{owner}.{name} must be one of {', '.join(allowed)}; got {value!r}")


# -- building from plain data ----------------------------------------------------------------------


def type_name(tp: Any) -> str:
    """What a field of type `tp` accepts, in words ("an integer", "one of 'a', 'b'", ...)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {len(typing.get_args(tp))} numbers"
    if origin is dict:
        return "a table"
    if origin is list:
        return "a list"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _is_int(value: Any, integral_floats: bool) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (integral_floats and isinstance(value, float) and value.is_integer())


def coerce(tp: Any, value: Any, name: str, *, integral_floats: bool = False) -> Any:
    """`value` as a field of type `tp` (ints are numbers; lists become tuples); ConfigError
    "`name`: `value` is not allowed (must be ...)" otherwise. A type other than a Literal, a fixed
    tuple, a dict or int/float/bool/str is left to the dataclass's `__post_init__`."""
    origin = typing.get_origin(tp)
    ok = True
    if origin is Literal:
        ok = value in typing.get_args(tp)
    elif origin is tuple and ... in typing.get_args(tp) and dataclasses.is_dataclass(typing.get_args(tp)[0]):
        if not isinstance(value, (list, tuple)):  # an array of tables, e.g. [[guards]]
            raise ConfigError(f"{name}: {value!r} is not allowed (must be a list of tables)")
        return tuple(build_config(typing.get_args(tp)[0], v, where=f"{name}[{i}]", integral_floats=integral_floats)
                     for i, v in enumerate(value))
    elif origin is tuple and ... not in typing.get_args(tp):
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{name}: {value!r} is not allowed (must be {type_name(tp)})")
        return tuple(coerce(a, v, f"{name}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    elif origin is dict:
        ok = isinstance(value, dict)
        value = dict(value) if ok else value
    elif tp is bool or tp is str:
        ok = isinstance(value, tp)
    elif tp is int:
        ok = _is_int(value, integral_floats)
        value = int(value) if ok else value
    elif tp is float:
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        value = float(value) if ok else value
    elif isinstance(value, list):
        value = tuple(value)
    if not ok:
        raise ConfigError(f"{name}: {value!r} is not allowed (must be {type_name(tp)})")
    return value


def build_config(cls: type[T], data: Any, *, where: str, base: T | None = None, noun: str = "field",
                 integral_floats: bool = False) -> T:
    """The dataclass `cls` from the plain dict `data` (over `base`'s values when given; fields left
    out keep their defaults). `where` names the section in messages (`optim`, `task`, ...); fields
    that are dataclasses are built the same way under `where.field`. Unknown names are refused as
    "`where.name`: unknown `noun` (allowed in `where`: ...)" (`where` "" is the top level);
    `integral_floats` accepts 4.0 for an
    int field (JSON from a browser). The dataclass's `__post_init__` then checks ranges."""
    if base is None and isinstance(data, cls):
        return data
    section = where or "the config"
    if not isinstance(data, dict):
        raise ConfigError(f"{section}: expected a table (a mapping of {noun} to value), got {data!r}")
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    prefix = f"{where}." if where else ""
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown {noun} (allowed in {section}: {', '.join(known)})")
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        tp, name = hints[key], prefix + key
        if dataclasses.is_dataclass(tp):
            values[key] = build_config(tp, value, where=name, noun=noun, integral_floats=integral_floats)
        else:
            values[key] = coerce(tp, value, name, integral_floats=integral_floats)
    if base is not None:
        return dataclasses.replace(base, **values)  # type: ignore[type-var]
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{section}: {exc}") from None


def to_plain(obj: Any) -> Any:
    """A config as plain data (dataclasses become dicts, tuples lists): the inverse of `build_config`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
