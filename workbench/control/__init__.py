"""Live control of runs: launch them as processes, steer them while they go, tell crashed from live.

The dashboard and `workbench ctl` use this API; the engine implements `protocol.Controllable` and
calls `apply.apply_pending` at step and stage boundaries. See docs/control.md.

    from workbench.control import launch, pause, resume, set_budget, wait
    run_id = launch("configs/organism.toml", store="store", overrides=["steps=500"])
    cid = set_budget(store, run_id, 256)      # validated now, applied at the next step boundary
    wait(store, run_id, cid)                  # {"status": "applied", "applied_step": 12, ...}
"""

from __future__ import annotations

from workbench.control.api import (
    allocator_in_force,
    checkpoint,
    issue,
    outcome,
    pause,
    restart_run,
    resume,
    set_allocator,
    set_allocator_params,
    set_budget,
    set_eval_interval,
    set_lr,
    set_staleness,
    set_temperature,
    stop,
    wait,
)
from workbench.control.guards import guards_in_force, issue_guard
from workbench.control.launch import launch
from workbench.control.liveness import refresh_statuses, runs_with_status
from workbench.control.protocol import COMMANDS, Controllable

__all__ = [
    "COMMANDS",
    "Controllable",
    "allocator_in_force",
    "checkpoint",
    "guards_in_force",
    "issue",
    "issue_guard",
    "launch",
    "outcome",
    "pause",
    "refresh_statuses",
    "restart_run",
    "resume",
    "runs_with_status",
    "set_allocator",
    "set_allocator_params",
    "set_budget",
    "set_eval_interval",
    "set_lr",
    "set_staleness",
    "set_temperature",
    "stop",
    "wait",
]
