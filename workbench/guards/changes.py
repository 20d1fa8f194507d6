"""Guards changed live: the `guard` control command (add, set, remove), recorded in `controls` like
every other command and applied by the engine at its next step boundary. Pure: checking a command and
the guard set after it; issuing one for a run is `workbench.control.guards`.

    args = {"op": "add", "guard": {"name": "spike", "rule": "train/loss > 10", "window": 2, ...}}
    args = {"op": "set", "name": "entropy_collapse", "changes": {"action": "rollback"}}
    args = {"op": "remove", "name": "zero_signal"}
"""

from __future__ import annotations

import dataclasses
from typing import Any

from workbench.errors import ConfigError, ControlError
from workbench.guards.config import Guard, GuardConfig, guard_set

OPS = ("add", "set", "remove")
FIELDS = ("rule", "window", "action", "settings", "preset", "enabled")


def _err(field: str, message: str) -> ControlError:
    return ControlError(f"guard: {field}: {message}")


def _config(spec: dict[str, Any]) -> GuardConfig:
    unknown = sorted(set(spec) - {"name", *FIELDS})
    if unknown:
        raise _err(unknown[0], f"unknown field (allowed: name, {', '.join(FIELDS)})")
    if "window" in spec and (isinstance(spec["window"], bool) or not isinstance(spec["window"], int)
                             or spec["window"] < 1):
        raise _err("window", f"{spec['window']!r} is not allowed (an integer >= 1)")
    try:
        return GuardConfig(**spec)
    except (ConfigError, TypeError) as exc:
        raise ControlError(f"guard: {exc}") from None


def validate_guard_command(args: dict[str, Any], recorded: set[str] | None = None) -> dict[str, Any]:
    """Check a `guard` command's arguments; return them canonical or raise ControlError naming the field.
    With `recorded` (the metrics the run has recorded), an added rule's metrics are checked too: each
    must be in the catalogue (`workbench/metrics.py`) or in `recorded`."""
    op = args.get("op")
    if op not in OPS:
        raise _err("op", f"{op!r} is not allowed (one of {', '.join(OPS)})")
    if op == "remove":
        name = args.get("name")
        if not isinstance(name, str) or not name:
            raise _err("name", "missing")
        return {"op": "remove", "name": name}
    if op == "set":
        name, changes = args.get("name"), args.get("changes")
        if not isinstance(name, str) or not name:
            raise _err("name", "missing")
        if not isinstance(changes, dict) or not changes:
            raise _err("changes", "name at least one field to change (rule, window, action, settings)")
        _config({"name": name, "rule": "rollout/count >= 0", **changes})  # each changed field's checks
        return {"op": "set", "name": name, "changes": dict(changes)}
    spec = args.get("guard")
    if not isinstance(spec, dict):
        raise _err("guard", "must be a table of the guard's fields")
    spec = dict(spec)
    hint = spec.pop("hint", "")  # a canonical spec (to_dict) carries its preset's hint
    g = _config(spec).resolve()
    if hint and isinstance(hint, str):
        g = dataclasses.replace(g, hint=hint)
    if recorded is not None:
        try:
            g.check_metrics(recorded)
        except ConfigError as exc:
            raise ControlError(f"guard: {exc}") from None
    return {"op": "add", "guard": g.to_dict()}


def apply_guard_change(guards: dict[str, Guard], args: dict[str, Any]) -> dict[str, Guard]:
    """The guard set after one validated command (ConfigError when it names no guard in force, or adds
    one that exists)."""
    out = dict(guards)
    op = args["op"]
    if op == "add":
        g = Guard.from_dict(args["guard"])
        if g.name in out:
            raise ConfigError(f"guard {g.name!r}: exists already (change it with `guard set`)")
        out[g.name] = g
        return out
    name = args["name"]
    if name not in out:
        raise ConfigError(f"guard {name!r}: no such guard in force (guards: {', '.join(out) or 'none'})")
    if op == "remove":
        del out[name]
        return out
    merged = {**out[name].to_dict(), **args["changes"]}
    merged.pop("preset", None)
    out[name] = Guard.from_dict(merged)
    return out
