"""Control commands: their kinds, where they apply, and the validation of their arguments.

Every command is a row in the store's `controls` table: a `command` name (one of `COMMANDS`) and a
JSON `args` object. `validate(command, args)` checks the arguments and returns them normalised
(the canonical shape the engine sees); it raises `ControlError` naming the command and the field.
The same function runs twice: in the Python API / CLI before a row is inserted (so a user learns of a
mistake at once), and in the engine before a command is applied (rows can be written by anyone with
the store, and the engine must never be harmed by a bad one).

Canonical argument shapes:

| command | args |
|---|---|
| pause, resume, stop, checkpoint | `{}` |
| set_budget | `{"kind": "rollouts" | "tokens", "amount": int}` |
| set_allocator | `{"name": str, "params": {...}}` (params validated by that allocator's `Config`) |
| set_allocator_params | `{"params": {...}}` (merged into the allocator in force, then validated) |
| set_temperature | `{"temperature": float}` |
| set_lr | `{"lr": float}` (the peak learning rate, `optim.lr`; the run's schedule still scales it) |
| set_eval_interval | `{"every": int}` (0 turns evaluation off) |
| set_staleness | `{"eta": int}` (0 .. the run's `pipeline.max_staleness_bound`, which the engine checks) |
| guard | `{"op": "add", "guard": {...}}`, `{"op": "set", "name", "changes": {...}}`, `{"op": "remove", "name"}` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.control.protocol import COMMANDS
from workbench.errors import ConfigError, ControlError
from workbench.guards.changes import validate_guard_command
from workbench.vllm_limits import TEMPERATURE_RANGE, uses_vllm

STAGE_COMMANDS = frozenset({"set_temperature"})
"""In-step settings: applied at the next stage boundary (or step boundary, whichever comes first)."""

STEP_COMMANDS = frozenset(COMMANDS) - STAGE_COMMANDS
"""Everything else is applied at the next step boundary only."""

BUDGET_KINDS = ("rollouts", "tokens")


@dataclass(frozen=True)
class Limits:
    """Engine limits a command must respect (a value outside them is rejected, never clamped)."""

    max_rollouts: int = 1_000_000
    """Largest rollout budget per step."""
    max_tokens: int = 1_000_000_000
    """Largest generated-token budget per step."""
    min_temperature: float = 0.0
    """Temperatures must be strictly above this."""
    max_temperature: float = 10.0
    """Largest sampling temperature."""
    max_lr: float = 1_000.0
    """Largest learning rate (far above any that trains; a value above it is a typing mistake)."""
    max_eval_interval: int = 1_000_000
    """Largest evaluation interval in steps."""
    max_staleness: int = 1_000
    """Largest staleness bound a command may ask for (the run's own bound is checked when applied)."""


LIMITS = Limits()


def _err(command: str, field: str, message: str) -> ControlError:
    return ControlError(f"{command}: {field}: {message}")


def _no_extra(command: str, args: dict[str, Any], allowed: tuple[str, ...]) -> None:
    extra = sorted(set(args) - set(allowed))
    if extra:
        want = ", ".join(allowed) if allowed else "none"
        raise _err(command, extra[0], f"unknown argument (allowed: {want})")


def _int(command: str, args: dict[str, Any], field: str, lo: int, hi: int) -> int:
    if field not in args:
        raise _err(command, field, "missing")
    v = args[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(command, field, f"must be an integer, got {v!r}")
    if isinstance(v, float):
        if not v.is_integer():
            raise _err(command, field, f"must be an integer, got {v!r}")
        v = int(v)
    if not lo <= v <= hi:
        raise _err(command, field, f"must be in [{lo}, {hi}], got {v}")
    return v


def _float(command: str, args: dict[str, Any], field: str, lo: float, hi: float) -> float:
    """A finite float in (lo, hi]."""
    if field not in args:
        raise _err(command, field, "missing")
    v = args[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(command, field, f"must be a number, got {v!r}")
    v = float(v)
    if not math.isfinite(v) or not lo < v <= hi:
        raise _err(command, field, f"must be in ({lo:g}, {hi:g}], got {v!r}")
    return v


def _params(command: str, args: dict[str, Any], *, required: bool) -> dict[str, Any]:
    if "params" not in args:
        if required:
            raise _err(command, "params", "missing")
        return {}
    p = args["params"]
    if not isinstance(p, dict) or not all(isinstance(k, str) for k in p):
        raise _err(command, "params", f"must be an object of named values, got {p!r}")
    if required and not p:
        raise _err(command, "params", "empty: name at least one parameter")
    return dict(p)


def check_allocator(name: str, params: dict[str, Any], *, command: str = "set_allocator") -> None:
    """Validate `params` with the allocator's own `Config` (unknown fields, types, ranges).

    Raises ControlError naming the command, allocator and field."""
    from workbench.allocators import available_allocators, make_allocator

    names = list(available_allocators())
    if name not in names:
        raise _err(command, "name", f"unknown allocator {name!r} (available: {', '.join(sorted(names))})")
    try:
        make_allocator(name, params, seed=0)
    except (ConfigError, TypeError, ValueError) as exc:
        raise _err(command, "params", f"allocator {name!r}: {exc}") from None


def validate(
    command: str,
    args: dict[str, Any] | None,
    *,
    limits: Limits = LIMITS,
    allocator: str | None = None,
    allocator_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check one command's arguments; return them in canonical form or raise ControlError.

    `allocator` / `allocator_params`: the allocator in force and its parameters, when known; with
    them `set_allocator_params` is validated against that allocator's Config (merged), without them
    only its shape is checked (the engine validates the merge when it applies the command)."""
    if command not in COMMANDS:
        raise ControlError(f"unknown command {command!r} (commands: {', '.join(COMMANDS)})")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise _err(command, "args", f"must be an object, got {args!r}")
    if command in ("pause", "resume", "stop", "checkpoint"):
        _no_extra(command, args, ())
        return {}
    if command == "set_budget":
        _no_extra(command, args, ("kind", "amount"))
        kind = args.get("kind", "rollouts")
        if kind not in BUDGET_KINDS:
            raise _err(command, "kind", f"must be one of {', '.join(BUDGET_KINDS)}, got {kind!r}")
        hi = limits.max_rollouts if kind == "rollouts" else limits.max_tokens
        return {"kind": kind, "amount": _int(command, args, "amount", 1, hi)}
    if command == "set_allocator":
        _no_extra(command, args, ("name", "params"))
        name = args.get("name")
        if not isinstance(name, str) or not name:
            raise _err(command, "name", f"must be an allocator name, got {name!r}")
        params = _params(command, args, required=False)
        check_allocator(name, params, command=command)
        return {"name": name, "params": params}
    if command == "set_allocator_params":
        _no_extra(command, args, ("params",))
        params = _params(command, args, required=True)
        if allocator is not None:
            check_allocator(allocator, {**(allocator_params or {}), **params}, command=command)
        return {"params": params}
    if command == "guard":
        return validate_guard_command(args)
    if command == "set_temperature":
        _no_extra(command, args, ("temperature",))
        t = _float(command, args, "temperature", limits.min_temperature, limits.max_temperature)
        return {"temperature": t}
    if command == "set_lr":
        _no_extra(command, args, ("lr",))
        return {"lr": _float(command, args, "lr", 0.0, limits.max_lr)}
    if command == "set_staleness":
        _no_extra(command, args, ("eta",))
        return {"eta": _int(command, args, "eta", 0, limits.max_staleness)}
    # set_eval_interval
    _no_extra(command, args, ("every",))
    return {"every": _int(command, args, "every", 0, limits.max_eval_interval)}


def applies_at(command: str, boundary: str) -> bool:
    """Whether `command` may be applied at a `boundary` ("step" or "stage")."""
    if boundary == "step":
        return True
    if boundary == "stage":
        return command in STAGE_COMMANDS
    raise ControlError(f"unknown boundary {boundary!r} (step or stage)")


def parse_params(items: list[str]) -> dict[str, Any]:
    """`["k=3", "mode=greedy", "w=[1, 2]"]` -> `{"k": 3, "mode": "greedy", "w": [1, 2]}`.

    Values are read as TOML values (numbers, booleans, arrays, quoted strings), else kept as text."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ControlError(f"parameter {item!r}: expected name=value (for example k=4)")
        try:
            out[key] = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = text.strip()
    return out


def control_limits(rollout: Any) -> Limits | None:
    """The live-control limits of a run with this `[rollout]` section (`Limits`): with vLLM, temperatures above 2 and below 0.01 are refused; None: the defaults."""
    if not uses_vllm(rollout):
        return None
    lo, hi = TEMPERATURE_RANGE
    return Limits(min_temperature=math.nextafter(lo, 0.0), max_temperature=hi)  # (just below 0.01, 2]
