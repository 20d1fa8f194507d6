"""Applying control commands inside a running engine.

The engine calls `apply_pending(store, run_id, engine, step=N, boundary="step")` before sampling
each step, and `boundary="stage"` before each further stage inside a step. Each pending command (in
the order issued) is validated, applied through the engine's `Controllable` methods and resolved in
the store: `applied` at step N, or `rejected` with the reason. A command that fails in any way is
rejected and the run goes on: a bad command never harms the run.

At a stage boundary only in-step settings (`STAGE_COMMANDS`: the sampling temperature) are applied;
everything else waits, still pending, for the next step boundary.

Pause is handled here: on `pause` the run's status becomes `paused` and this function keeps polling
the store (the engine's heartbeat thread keeps heart-beating meanwhile) until `resume` or `stop`
arrives; other commands issued while paused are applied at once, at the same step. `stop` calls
`engine.request_stop()`; commands issued after it stay pending and apply when the run is resumed.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from workbench.control.commands import LIMITS, Limits, applies_at, validate
from workbench.control.protocol import Controllable
from workbench.errors import ControlError, StoreError, WorkbenchError

if TYPE_CHECKING:
    from workbench.store.protocols import RunStore

log = logging.getLogger(__name__)

_STATUS_AFTER = {"pause": "paused", "resume": "running", "stop": "stopping"}
"""The run's status once each lifecycle command is applied."""

POLL_S = 0.25
"""How often a paused run looks for new commands."""


def _dispatch(engine: Controllable, command: str, args: dict[str, Any]) -> None:
    """Call the engine method for one validated command (pause/resume are handled by the caller)."""
    if command == "set_budget":
        engine.set_budget(args["kind"], args["amount"])
    elif command == "set_allocator":
        engine.set_allocator(args["name"], args["params"])
    elif command == "set_allocator_params":
        engine.set_allocator_params(args["params"])
    elif command == "set_temperature":
        engine.set_temperature(args["temperature"])
    elif command == "set_lr":
        engine.set_lr(args["lr"])
    elif command == "set_eval_interval":
        engine.set_eval_interval(args["every"])
    elif command == "set_staleness":
        engine.set_staleness(args["eta"])
    elif command == "guard":
        change = getattr(engine, "change_guard", None)
        if change is None:
            raise ControlError("guard: this engine runs no guards")
        change(args)
    elif command == "checkpoint":
        engine.request_checkpoint()
    elif command == "stop":
        engine.request_stop()


def apply_one(
    row: dict[str, Any], engine: Controllable, *, paused: bool, limits: Limits
) -> tuple[str, str | None, dict[str, Any]]:
    """Validate and apply one control row; returns (status, reason, canonical args)."""
    command = str(row.get("command"))
    try:
        args = validate(command, _args_of(row), limits=limits)
        if command == "pause" and paused:
            raise ControlError("pause: the run is already paused")
        if command == "resume" and not paused:
            raise ControlError("resume: the run is not paused")
        _dispatch(engine, command, args)
    except WorkbenchError as exc:
        return "rejected", str(exc), {}
    except Exception as exc:  # noqa: BLE001 - an engine bug must not kill the run
        log.exception("control %s (%s) failed", row.get("control_id"), command)
        return "rejected", f"{command}: engine error: {type(exc).__name__}: {exc}", {}
    return "applied", None, args


def _args_of(row: dict[str, Any]) -> Any:
    args = row.get("args")
    if isinstance(args, str):
        import json

        try:
            return json.loads(args) if args else {}
        except json.JSONDecodeError:
            return args
    return args


def _record(store: RunStore, run_id: str, row: dict[str, Any], outcome: dict[str, Any]) -> None:
    """Resolve the control row and log its outcome as an event."""
    store.resolve_control(
        row["control_id"], outcome["status"], step=outcome["step"], reason=outcome["reason"]
    )
    if outcome["status"] == "applied":
        msg = f"control {outcome['control_id']} {outcome['command']} applied at step {outcome['step']}"
        level = "info"
    else:
        msg = f"control {outcome['control_id']} {outcome['command']} rejected: {outcome['reason']}"
        level = "warning"
    try:
        store.add_event(run_id, level, "control", msg, step=outcome["step"], data=outcome)
    except StoreError:  # the outcome is in `controls` already; the event is a convenience
        log.warning("could not log event for control %s", outcome["control_id"])


def _pending(store: RunStore, run_id: str, *, tolerate: bool) -> list[dict[str, Any]]:
    try:
        rows = list(store.pending_controls(run_id))
    except StoreError:
        if not tolerate:
            raise
        log.warning("reading controls of run %s failed; retrying", run_id)
        return []
    return sorted(rows, key=lambda r: r["control_id"])


def apply_pending(
    store: RunStore,
    run_id: str,
    engine: Controllable,
    *,
    step: int,
    boundary: str = "step",
    limits: Limits | None = None,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Apply the run's pending commands at a step or stage boundary; return their outcomes.

    Each outcome: `{"control_id", "command", "args", "status", "step", "reason"}`. Blocks while the
    run is paused (see the module docstring). `limits` default to `engine.control_limits` when the
    engine has one, else `commands.LIMITS`."""
    applies_at("pause", boundary)  # rejects an unknown boundary
    if limits is None:
        limits = getattr(engine, "control_limits", None) or LIMITS
    outcomes: list[dict[str, Any]] = []
    paused = False
    while True:
        for row in _pending(store, run_id, tolerate=paused):
            command = str(row.get("command"))
            if boundary == "stage" and not applies_at(command, "stage"):
                continue
            status, reason, args = apply_one(row, engine, paused=paused, limits=limits)
            outcome = {
                "control_id": row["control_id"],
                "command": command,
                "args": args,
                "status": status,
                "step": step,
                "reason": reason,
            }
            # the run's status changes before the outcome is visible: a reader that sees
            # "pause applied" also sees status paused
            if status == "applied" and command in _STATUS_AFTER:
                store.set_run_status(run_id, _STATUS_AFTER[command])
                paused = command == "pause"
            _record(store, run_id, row, outcome)
            outcomes.append(outcome)
            if status == "applied" and command == "stop":
                return outcomes
        if not paused:
            return outcomes
        sleep(poll_s)
