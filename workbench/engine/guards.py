"""The engine's side of the guards (the rules and the watch are `workbench.guards`): one call after each
step is handed to the store's writer.

    if guard_step(ctx, step, metrics, table) == "rollback":
        return "rollback"            # the loop goes on from the checkpoint (train() re-enters it)

Each firing guard's alert is recorded with its evidence, then its action runs:
- alert: nothing more (the dashboard shows a banner);
- pause / stop: a `pause` / `stop` control command (who = `guard:<name>`), applied at the next step
  boundary like one a person issued, with its outcome in `controls`;
- rollback: the steps after the last checkpoint before the rule first held are kept as an earlier
  attempt of the run (`Store.archive_attempt`), the checkpoints after it set aside, the settings the
  guard names queued as control commands, and the loop goes on from that checkpoint. A guard that
  fires again after its rollback takes that checkpoint as not cured (a fault can be in a checkpoint
  written after it began: a learning rate's first update): its next rollback goes to the last
  checkpoint before the one it restored last. With no such checkpoint, or after `MAX_ROLLBACKS`
  rollbacks by one guard, the run stops instead.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from workbench.control.commands import validate
from workbench.engine.checkpoint import checkpoint_steps, set_aside
from workbench.engine.context import RunContext, RunGuards
from workbench.engine.evaluate import eval_metrics
from workbench.guards.config import setting_command
from workbench.guards.watch import Firing, alert_message, alert_row, metrics_map, rollout_rows
from workbench.store.protocols import RunStore

log = logging.getLogger(__name__)

MAX_ROLLBACKS = 3
"""Rollbacks one guard may make in a run; after that its firing stops the run (it keeps coming back)."""


def guard_step(ctx: RunContext, step: int, metrics: dict[str, Any], table: Any) -> str | None:
    """Evaluate the run's guards on the step just recorded and act; "rollback" when the loop must go
    on from a checkpoint (the run's state is already set for it), else None."""
    store, run_id, state = ctx.store, ctx.run_id, ctx.state
    in_force = state.live.guards or {}  # the config's guards (set by live_settings) and the live changes
    if state.guards is None:
        state.guards = RunGuards(in_force)
    rg = state.guards
    rg.sync(in_force)
    if not rg.loaded:
        rg.loaded = True
        steps = store.run_steps(run_id)
        earlier = steps.filter(steps["step"] < step) if len(steps) else steps
        rg.watch.load_history([*_evaluation_at_start(store, run_id),
                               *((r["step"], metrics_map(r["metrics"])) for r in earlier.to_dicts())])
        rg.rollbacks = rollbacks_made(store, run_id)
    rows = rollout_rows(table, step) if table is not None and rg.needs_rollouts() else None
    fired = rg.watch.step(step, metrics, rows)
    alerts = []
    for f in fired:  # every alert first: a rollback moves its steps, and every alert's, to the attempt
        try:
            alerts.append((f, store.add_alert(run_id, alert_row(f), f.rollouts)))
            log.warning(alert_message(f))
        except Exception:  # noqa: BLE001 - a guard must never kill the run it watches
            log.exception("guard %s failed to record its alert at step %d", f.guard.name, step)
    rolled_by = None
    for f, alert_id in alerts:
        try:
            if rolled_by is not None and f.guard.action == "rollback":  # one rollback per step
                store.set_alert_status(alert_id, "acted", outcome=f"the run was rolled back at this step by "
                                                                   f"guard {rolled_by!r}")
            elif _act(ctx, rg, f, alert_id) == "rollback":
                rolled_by = f.guard.name
        except Exception:  # noqa: BLE001
            log.exception("guard %s failed to act at step %d", f.guard.name, step)
    return "rollback" if rolled_by is not None else None


def _act(ctx: RunContext, rg: RunGuards, f: Firing, alert_id: str) -> str | None:
    store, run_id, action = ctx.store, ctx.run_id, f.guard.action
    who = f"guard:{f.guard.name}"
    if action == "alert":
        return None
    if action == "rollback":
        done = rg.rollbacks.setdefault(f.guard.name, [])
        before = min(f.first_step, done[-1]) if done else f.first_step  # fired again: further back
        target = _checkpoint_before(ctx.parts.ckpt_dir, before)
        if target is not None and len(done) < MAX_ROLLBACKS:
            done.append(target)
            return _rollback(ctx, rg, f, alert_id, target, again=len(done) > 1)
        why = (f"no checkpoint before step {before}" if target is None
               else f"{MAX_ROLLBACKS} rollbacks by this guard already")
        cid = store.add_control(run_id, "stop", {}, who=who)
        store.set_alert_status(alert_id, "acted", outcome=f"{why}: stopped instead (control {cid})")
        return None
    cid = store.add_control(run_id, action, {}, who=who)
    store.set_alert_status(alert_id, "acted", outcome=f"{action} queued as control {cid} (next step boundary)")
    return None


def _evaluation_at_start(store: RunStore, run_id: str) -> list[tuple[int, dict[str, float]]]:
    """The run's evaluation before its first step (`eval.at_start`) as the history's step 0, so a rule
    over `eval/` metrics reads it from step 1 on (`reward_hacking` compares the first training reward with
    it); none when the run took none."""
    ev = store.evals(run_id)
    at0 = ev.filter(ev["step"] == 0).to_dicts() if len(ev) else []
    return [(0, eval_metrics(at0))] if at0 else []


def rollbacks_made(store: RunStore, run_id: str) -> dict[str, list[int]]:
    """The rollbacks guards made in a run before this process watched it (a resumed run), by guard:
    the checkpoint steps they went back to, oldest first (from the `guard_rollback` events of the
    run and of its earlier attempts, which a later rollback moves there)."""
    ids = [*store.attempts(run_id)["run_id"].to_list(), run_id]
    found: list[tuple[Any, str, int]] = []
    for rid in ids:
        ev = store.events(rid)
        for e in ev.filter((ev["kind"] == "guard_rollback") & ~ev["rolled_back"].fill_null(False)).to_dicts():
            data = e["data"] if isinstance(e["data"], dict) else json.loads(e["data"] or "{}")
            if data.get("guard") and e["step"] is not None:
                found.append((e["ts"], data["guard"], int(e["step"])))
    out: dict[str, list[int]] = {}
    for _, guard, step in sorted(found, key=lambda t: t[0]):
        out.setdefault(guard, []).append(step)
    return out


def _checkpoint_before(ckpt_dir: Path, first_step: int) -> int | None:
    earlier = [k for k in checkpoint_steps(ckpt_dir) if k < first_step]
    return max(earlier) if earlier else None


def _rollback(ctx: RunContext, rg: RunGuards, f: Firing, alert_id: str, target: int, *,
              again: bool = False) -> str:
    s, store, run_id = ctx.parts, ctx.store, ctx.run_id
    assert s.writer is not None
    s.writer.flush()  # every step handed over is committed before its rows move
    reason = f"rolled back by guard {f.guard.name!r} (fired at step {f.step}) to the checkpoint of step {target}"
    if again:
        reason += " (it fired again after its last rollback, so one checkpoint further back)"
    attempt = store.archive_attempt(run_id, target, reason)  # "<run_id>.attemptN"
    set_aside(s.ckpt_dir, target, attempt.removeprefix(f"{run_id}."))  # checkpoints/attemptN/
    queued = []
    for key, value in f.guard.settings.items():
        command, args = setting_command(key, value, ctx.state.live.budget_kind)
        queued.append(store.add_control(run_id, command, validate(command, args), who=f"guard:{f.guard.name}"))
    ctx.state.control_token = None  # the next step boundary reads the queued settings
    rg.watch.rewind(target)
    settings = f", then {', '.join(f'{k} = {v}' for k, v in f.guard.settings.items())} (controls {queued})" if queued else ""
    outcome = f"rolled back to step {target}{settings}; steps {target + 1}-{f.step} kept as {attempt}"
    store.set_alert_status(alert_id, "acted", outcome=outcome)
    store.add_event(run_id, "warning", "guard_rollback", f"{reason}{settings}", step=target,
                    data={"alert_id": alert_id, "attempt": attempt, "guard": f.guard.name})
    return "rollback"
