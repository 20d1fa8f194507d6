"""Guards of a run through the store: the set in force (its config's, then every applied `guard`
command) and issuing a `guard` command after checking it (`workbench.guards.changes` checks it; the
engine applies it at its next step boundary).

    issue_guard(store, run_id, {"op": "add", "guard": {"name": "spike", "rule": "train/loss > 10"}})
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from workbench.config import RunConfig
from workbench.control.api import issue
from workbench.errors import ConfigError, ControlError
from workbench.guards.changes import apply_guard_change, validate_guard_command
from workbench.guards.config import Guard, guard_set
from workbench.guards.watch import metrics_map

if TYPE_CHECKING:
    from workbench.store.protocols import ControlStore


def guards_in_force(store: ControlStore, run_id: str) -> dict[str, Guard]:
    """A run's guards: those of its config (with the defaults), then every applied `guard` command."""
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


def recorded_metrics(store: ControlStore, run_id: str) -> set[str]:
    """Metric names a run has recorded in its latest steps."""
    steps = store.run_steps(run_id)
    names: set[str] = set()
    for m in steps.tail(5)["metrics"].to_list() if len(steps) else []:
        names |= set(metrics_map(m))
    return names


def issue_guard(store: ControlStore, run_id: str, args: dict[str, Any], *, who: str = "api") -> int:
    """Validate a `guard` command for a run (its rule's metrics against the engine's and the run's
    own) and queue it; returns the control id. ControlError naming the field, nothing stored."""
    clean = validate_guard_command(dict(args), recorded_metrics(store, run_id))
    if clean["op"] != "add":
        in_force = guards_in_force(store, run_id)
        if clean["name"] not in in_force:
            raise ControlError(f"run {run_id}: guard: name: no guard {clean['name']!r} in force "
                               f"(guards: {', '.join(in_force) or 'none'})")
    elif clean["guard"]["name"] in guards_in_force(store, run_id):
        raise ControlError(f"run {run_id}: guard: name: {clean['guard']['name']!r} exists already "
                           "(change it with `guard set`)")
    return issue(store, run_id, "guard", clean, who=who)
