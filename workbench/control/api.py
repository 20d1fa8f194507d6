"""The Python API of live control (what the dashboard and `workbench ctl` call).

Each command function validates what can be validated before anything is written (the arguments,
the allocator's parameters against its `Config`, the run's status) and inserts one row into the
store's `controls` table, returning its id. The engine applies it at its next step boundary (the
temperature at its next stage boundary) and records the outcome; `outcome()` / `wait()` read it back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from workbench.control.commands import validate
from workbench.errors import ControlError, StoreError
from workbench.vllm_limits import temperature_problem, uses_vllm

if TYPE_CHECKING:
    from workbench.store.protocols import ControlStore, RunStore

ENDED = ("finished", "failed")
"""Runs that will never run again: no command can reach them."""
RESTARTABLE = ("stopped", "crashed")
"""Runs that `workbench resume RUN` restarts; settings issued now apply when they restart."""
LIFECYCLE = ("pause", "resume", "stop", "checkpoint")


def _run(store: ControlStore, run_id: str) -> dict[str, Any]:
    """The run's row, or ControlError naming the run."""
    try:
        row = store.run(run_id)
    except (StoreError, KeyError, LookupError):
        row = None
    if not row:
        raise ControlError(f"run {run_id!r}: no such run in the store")
    return row


def _check_status(run: dict[str, Any], command: str) -> None:
    status = run.get("status")
    rid = run.get("run_id")
    if status == "imported":
        raise ControlError(f"run {rid}: {command}: the run was imported from {run.get('source') or 'another engine'}'s "
                           "files and is read-only (no engine of ours runs it)")
    if status in ENDED:
        raise ControlError(f"run {rid}: {command}: the run is {status}; commands reach only live runs")
    if status in RESTARTABLE and command in LIFECYCLE:
        hint = " (restart it with `workbench resume " + str(rid) + "`)" if command == "resume" else ""
        raise ControlError(f"run {rid}: {command}: the run is {status}, not running{hint}")


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value) if value else {}
        except json.JSONDecodeError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def allocator_in_force(store: ControlStore, run_id: str) -> tuple[str | None, dict[str, Any]]:
    """The allocator (name, params) the run will use once its pending commands are applied.

    Starts from the latest step row (or the run's config) and replays the allocator commands that
    are pending or applied after that step."""
    run = _run(store, run_id)
    alloc = _as_dict(_as_dict(run.get("config")).get("allocator"))
    name, params, last = alloc.get("name"), _as_dict(alloc.get("params")), -1
    steps = store.run_steps(run_id)
    if len(steps):
        row = steps.sort("step").tail(1).to_dicts()[0]
        last = int(row["step"])
        if row.get("allocator"):
            name, params = row["allocator"], _as_dict(row.get("allocator_params"))
    controls = store.controls(run_id)
    for c in controls.sort("control_id").to_dicts() if len(controls) else []:
        if c["command"] not in ("set_allocator", "set_allocator_params"):
            continue
        if not (c["status"] == "pending" or (c["status"] == "applied" and (c["applied_step"] or 0) > last)):
            continue
        args = _as_dict(c.get("args"))
        if c["command"] == "set_allocator":
            name, params = args.get("name"), _as_dict(args.get("params"))
        else:
            params = {**params, **_as_dict(args.get("params"))}
    return name, params


def issue(store: ControlStore, run_id: str, command: str, args: dict[str, Any] | None = None, *, who: str = "api") -> int:
    """Validate one command for `run_id` and insert it; returns the control id."""
    run = _run(store, run_id)
    _check_status(run, command)
    current: tuple[str | None, dict[str, Any]] = (None, {})
    if command == "set_allocator_params":
        current = allocator_in_force(store, run_id)
    rollout = _as_dict(_as_dict(run.get("config")).get("rollout"))
    try:
        clean = validate(command, args, allocator=current[0], allocator_params=current[1])
        problem = temperature_problem(clean["temperature"]) if command == "set_temperature" else None
        if problem and uses_vllm(rollout):  # the run samples with vLLM: only what vLLM does
            raise ControlError(f"{command}: temperature: {problem}")
    except ControlError as exc:
        raise ControlError(f"run {run_id}: {exc}") from None
    return int(store.add_control(run_id, command, clean, who=who))


def pause(store: ControlStore, run_id: str, *, who: str = "api") -> int:
    """Pause at the next step boundary (the process and its state wait)."""
    return issue(store, run_id, "pause", who=who)


def resume(store: ControlStore, run_id: str, *, who: str = "api") -> int:
    """Resume a paused run (a stopped or crashed one restarts with `restart`)."""
    return issue(store, run_id, "resume", who=who)


def stop(store: ControlStore, run_id: str, *, who: str = "api") -> int:
    """Checkpoint, then exit (status `stopped`; `workbench resume RUN` continues it)."""
    return issue(store, run_id, "stop", who=who)


def checkpoint(store: ControlStore, run_id: str, *, who: str = "api") -> int:
    """Write a checkpoint at the end of the current step."""
    return issue(store, run_id, "checkpoint", who=who)


def set_budget(store: ControlStore, run_id: str, amount: int, kind: str = "rollouts", *, who: str = "api") -> int:
    """Budget per step (rollouts or generated tokens) from the next step on."""
    return issue(store, run_id, "set_budget", {"kind": kind, "amount": amount}, who=who)


def set_allocator(
    store: ControlStore, run_id: str, name: str, params: dict[str, Any] | None = None, *, who: str = "api"
) -> int:
    """Switch the allocator (params validated by its Config) from the next step on."""
    return issue(store, run_id, "set_allocator", {"name": name, "params": dict(params or {})}, who=who)


def set_allocator_params(store: ControlStore, run_id: str, params: dict[str, Any], *, who: str = "api") -> int:
    """Change some parameters of the allocator in force from the next step on."""
    return issue(store, run_id, "set_allocator_params", {"params": dict(params)}, who=who)


def set_temperature(store: ControlStore, run_id: str, temperature: float, *, who: str = "api") -> int:
    """Sampling temperature from the next stage on."""
    return issue(store, run_id, "set_temperature", {"temperature": temperature}, who=who)


def set_lr(store: ControlStore, run_id: str, lr: float, *, who: str = "api") -> int:
    """The learning rate (`optim.lr`, scaled by the run's schedule) from the next step on."""
    return issue(store, run_id, "set_lr", {"lr": lr}, who=who)


def set_eval_interval(store: ControlStore, run_id: str, every: int, *, who: str = "api") -> int:
    """Evaluate every `every` steps (0 turns evaluation off)."""
    return issue(store, run_id, "set_eval_interval", {"every": every}, who=who)


def set_staleness(store: ControlStore, run_id: str, eta: int, *, who: str = "api") -> int:
    """The asynchronous pipeline's staleness bound from the next step on (0 .. the run's bound)."""
    return issue(store, run_id, "set_staleness", {"eta": eta}, who=who)


def outcome(store: ControlStore, run_id: str, control_id: int) -> dict[str, Any]:
    """The control's row (status pending / applied with applied_step / rejected with reason)."""
    frame = store.controls(run_id)
    rows = [r for r in (frame.to_dicts() if len(frame) else []) if int(r["control_id"]) == int(control_id)]
    if not rows:
        raise ControlError(f"run {run_id}: no control {control_id}")
    return rows[0]


def wait(store: ControlStore, run_id: str, control_id: int, *, timeout_s: float = 60.0, poll_s: float = 0.2) -> dict[str, Any]:
    """Block until the control is resolved (or `timeout_s` passes); return its row."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = outcome(store, run_id, control_id)
        if row["status"] != "pending" or time.monotonic() >= deadline:
            return row
        time.sleep(poll_s)


def restart_run(store: RunStore, run_id: str) -> int:
    """Restart a stopped or crashed run (`workbench resume RUN`, detached); returns its pid.

    Crashed runs are detected first (stale heartbeat and process gone)."""
    from workbench.control.launch import restart
    from workbench.control.liveness import refresh_statuses

    refresh_statuses(store)
    row = _run(store, run_id)
    status = row.get("status")
    if row.get("source") not in (None, "", "workbench"):
        raise ControlError(f"run {run_id}: restart: the run was written by {row['source']}, not by this "
                           "workbench's engine; restart it in its own trainer")
    if status not in RESTARTABLE:
        raise ControlError(f"run {run_id}: restart: the run is {status}; only stopped or crashed runs restart")
    return restart(store, run_id)
