"""Guards changed live: the `guard` control command (add, set, remove), recorded in `controls` like
every other command and applied by the engine at its next step boundary.

    args = {"op": "add", "guard": {"name": "spike", "rule": "train/loss > 10", "window": 2, ...}}
    args = {"op": "set", "name": "entropy_collapse", "changes": {"action": "rollback"}}
    args = {"op": "remove", "name": "zero_signal"}
"""

from __future__ import annotations

import dataclasses
import json
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


def validate_guard_command(args: dict[str, Any], known_metrics: set[str] | None = None) -> dict[str, Any]:
    """Check a `guard` command's arguments; return them canonical or raise ControlError naming the field."""
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
    if known_metrics is not None:
        try:
            g.check_metrics(known_metrics)
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


def guards_in_force(store: Any, run_id: str) -> dict[str, Guard]:
    """A run's guards: those of its config (with the defaults), then every applied `guard` command."""
    from workbench.config import RunConfig

    run = store.run(run_id)
    cfg = run.get("config") or {}
    try:
        entries = RunConfig.from_dict(cfg).guards if run.get("source") in (None, "", "workbench") else ()
    except ConfigError:
        entries = ()
    guards = guard_set(entries)
    controls = store.controls(run_id)
    for c in controls.sort("control_id").to_dicts() if len(controls) else []:
        if c["command"] != "guard" or c["status"] != "applied":
            continue
        args = json.loads(c["args"]) if isinstance(c["args"], str) else c["args"]
        try:
            guards = apply_guard_change(guards, args)
        except ConfigError:
            continue
    return guards


def recorded_metrics(store: Any, run_id: str) -> set[str]:
    """Metric names a run has recorded in its latest steps."""
    from workbench.guards.watch import metrics_map

    steps = store.run_steps(run_id)
    names: set[str] = set()
    for m in steps.tail(5)["metrics"].to_list() if len(steps) else []:
        names |= set(metrics_map(m))
    return names


def issue_guard(store: Any, run_id: str, args: dict[str, Any], *, who: str = "api") -> int:
    """Validate a `guard` command for a run (its rule's metrics against the engine's and the run's
    own) and queue it; returns the control id. ControlError naming the field, nothing stored."""
    from workbench.control.api import issue
    from workbench.guards.metrics import KNOWN_METRICS

    clean = validate_guard_command(dict(args), KNOWN_METRICS | recorded_metrics(store, run_id))
    if clean["op"] != "add":
        in_force = guards_in_force(store, run_id)
        if clean["name"] not in in_force:
            raise ControlError(f"run {run_id}: guard: name: no guard {clean['name']!r} in force "
                               f"(guards: {', '.join(in_force) or 'none'})")
    elif clean["guard"]["name"] in guards_in_force(store, run_id):
        raise ControlError(f"run {run_id}: guard: name: {clean['guard']['name']!r} exists already "
                           "(change it with `guard set`)")
    return issue(store, run_id, "guard", clean, who=who)
