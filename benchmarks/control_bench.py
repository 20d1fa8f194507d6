"""`workbench bench control`: steer a live organism run with every kind of command and time it.

The benchmark launches a small, fast organism run as a detached process (`launch`), waits for its
first step, then issues a script of commands one after another (valid ones through the Python API,
invalid ones both through the API, which refuses them before insert, and as raw rows, which the
engine must reject while the run goes on), waits for each outcome, and finally stops the run.

Per command it measures the apply latency (`resolved_at - created_at` of its row in the store) and
the apply distance in steps: `applied_step - issue_step`, where `issue_step` is the step in progress
when the command was issued (its insert committed: 1 + the steps whose rows were written by then).
Target: `max_apply_steps <= 1`, a command is applied no later than the step after the one it was
issued in.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import ControlError

if TYPE_CHECKING:
    from workbench.store.protocols import ControlStore


def bench_overrides() -> dict[str, Any]:
    """Small, fast settings: the small organism recipe and its task, 8 prompts x 4 rollouts per step,
    no evaluation, steps committed synchronously; far more steps than needed (the benchmark's last
    command stops the run)."""
    from workbench.models.organism import small_recipe

    recipe = small_recipe(steps=40).to_dict()
    return {
        "model.organism": recipe,
        "model.threads": 1,
        "task": {"kind": "arithmetic", **recipe["task"]},
        "steps": 100_000,
        "allocator.prompts_per_step": 8,
        "allocator.budget": 32,
        "allocator.params": {"n": 4},
        "sampling.max_new_tokens": 8,
        "eval.every": 0,
        "eval.at_start": False,
        "checkpoint.every": 100_000,
        "logging.heartbeat_s": 1.0,
        # steps committed before the next step starts, so the store tells the step in progress
        # exactly (with background writes it lags the engine by up to one step)
        "logging.background_writes": False,
    }


def script() -> list[tuple[str, dict[str, Any], str]]:
    """The commands: (command, args, how) with how = "api" (valid), "refused" (the API must refuse it)
    or "raw" (inserted unvalidated: the engine must reject it). Every kind appears; ends with stop."""
    return [
        ("set_budget", {"kind": "rollouts", "amount": 48}, "api"),
        ("set_budget", {"kind": "rollouts", "amount": 0}, "raw"),
        ("set_budget", {"kind": "rollouts", "amount": -4}, "refused"),
        ("set_temperature", {"temperature": 0.9}, "api"),
        ("set_temperature", {"temperature": -1.0}, "raw"),
        ("set_lr", {"lr": 2e-4}, "api"),
        ("set_lr", {"lr": 0.0}, "raw"),
        ("set_lr", {"lr": "fast"}, "refused"),
        ("set_eval_interval", {"every": 50}, "api"),
        ("set_eval_interval", {"every": -3}, "raw"),
        ("set_allocator", {"name": "multistage", "params": {"n": 4, "n_max": 12}}, "api"),
        ("set_allocator", {"name": "no_such_allocator", "params": {}}, "raw"),
        ("set_allocator_params", {"params": {"n_max": 16}}, "api"),
        ("set_allocator_params", {"params": {"no_such_field": 1}}, "raw"),
        ("set_allocator_params", {"params": {"n_max": "many"}}, "refused"),
        ("guard", {"op": "add", "guard": {"name": "loss_spike", "rule": "train/loss > 100", "window": 2}}, "api"),
        ("guard", {"op": "remove", "name": "no_such_guard"}, "raw"),
        ("guard", {"op": "add", "guard": {"name": "bad", "rule": "train/loss >"}}, "refused"),
        ("set_staleness", {"eta": 0}, "api"),
        ("set_staleness", {"eta": -1}, "raw"),
        ("checkpoint", {}, "api"),
        ("pause", {}, "api"),
        ("set_budget", {"kind": "rollouts", "amount": 40}, "api"),
        ("pause", {}, "raw"),
        ("resume", {}, "api"),
        ("resume", {}, "raw"),
        ("set_allocator", {"name": "uniform", "params": {"n": 4}}, "api"),
        ("set_budget", {"kind": "rollouts", "amount": 32}, "api"),
        ("explode", {}, "raw"),
        ("stop", {"now": True}, "raw"),
        ("set_temperature", {"temperature": 1.0}, "api"),
        ("set_eval_interval", {"every": 0}, "api"),
        ("stop", {}, "api"),
    ]


def _utc(t: datetime) -> datetime:
    """Aware UTC (the store writes UTC; a naive value is read as UTC)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _last_step(store: ControlStore, run_id: str) -> int:
    steps = store.run_steps(run_id)
    return int(steps["step"].max()) if len(steps) else 0


def _wait_for(pred, what: str, timeout_s: float, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise ControlError(f"bench control: timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def _issue(store: ControlStore, run_id: str, command: str, args: dict[str, Any], how: str) -> int | None:
    """Insert one command; None when the API refused it (as it must for how == "refused")."""
    from workbench.control import api

    if how == "raw":
        return int(store.add_control(run_id, command, args, who="bench"))
    try:
        cid = api.issue(store, run_id, command, args, who="bench")
    except ControlError:
        if how == "refused":
            return None
        raise
    if how == "refused":
        raise ControlError(f"bench control: the API accepted an invalid {command} {args}")
    return cid


def _drive(store: ControlStore, run_id: str, timeout_s: float) -> list[dict[str, Any]]:
    """Issue the script against the live run, waiting for each outcome; one record per command."""
    from workbench.control import api

    records = []
    for command, args, how in script():
        status = store.run(run_id)["status"]
        if status not in ("created", "running", "paused"):
            raise ControlError(f"bench control: run {run_id} is {status} before {command}; see its run.log")
        cid = _issue(store, run_id, command, args, how)
        rec: dict[str, Any] = {"command": command, "how": how, "control_id": cid, "status": "refused",
                               "issued_at": _utc(datetime.now(timezone.utc))}
        if cid is not None:
            row = api.wait(store, run_id, cid, timeout_s=timeout_s)
            if row["status"] == "pending":
                raise ControlError(f"bench control: control {cid} ({command}) still pending after {timeout_s} s")
            rec["status"] = row["status"]
        records.append(rec)
    return records


def _measure(store: ControlStore, run_id: str, records: list[dict[str, Any]]) -> None:
    """Add apply latency and distance in steps to each record, from the store's timestamps.

    `issue_step`: the step in progress when the command was issued, i.e. when its insert committed
    and returned (1 + the steps whose rows were written before then);
    `apply_steps = applied_step - issue_step`."""
    steps = store.run_steps(run_id)
    written = sorted(_utc(t) for t in steps["created_at"].to_list()) if len(steps) else []
    rows = {int(r["control_id"]): r for r in store.controls(run_id).to_dicts()}
    for rec in records:
        row = rows.get(rec["control_id"]) if rec["control_id"] is not None else None
        if row is None or row["resolved_at"] is None:
            continue
        rec["apply_s"] = (row["resolved_at"] - row["created_at"]).total_seconds()
        rec["issue_step"] = 1 + sum(1 for t in written if t <= rec["issued_at"])
        rec["applied_step"] = row["applied_step"]
        rec["apply_steps"] = row["applied_step"] - rec["issue_step"]


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's JSON from the per-command records."""
    resolved = [r for r in records if r["status"] in ("applied", "rejected")]
    lat = sorted(r["apply_s"] for r in resolved)
    dist = [r["apply_steps"] for r in resolved]

    def q(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else float("nan")

    return {
        "commands": len(records),
        "applied": sum(r["status"] == "applied" for r in records),
        "rejected": sum(r["status"] == "rejected" for r in records),
        "refused_before_insert": sum(r["status"] == "refused" for r in records),
        "kinds": sorted({r["command"] for r in records}),
        "p50_apply_s": round(statistics.median(lat), 3) if lat else float("nan"),
        "p95_apply_s": q(0.95),
        "max_apply_s": round(max(lat), 3) if lat else float("nan"),
        "max_apply_steps": max(dist) if dist else None,
        "min_apply_steps": min(dist) if dist else None,
    }


def run_bench(store_dir: Path | str | None = None, *, timeout_s: float = 900.0) -> dict[str, Any]:
    """Run the benchmark on a fresh run in `store_dir` (default: a temporary store, removed after)."""
    import shutil
    import tempfile

    if store_dir is not None:
        return _bench_in(Path(store_dir), timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix="workbench-bench-control-"))
    try:
        return _bench_in(tmp / "store", timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench_in(root: Path, timeout_s: float) -> dict[str, Any]:
    from workbench.control.launch import launch
    from workbench.store import open_store

    t0 = time.monotonic()
    run_id = launch(None, store=root, overrides=bench_overrides(), name="bench-control")
    with open_store(root) as st:
        def started() -> bool:
            return _last_step(st, run_id) >= 1 or st.run(run_id)["status"] in ("failed", "crashed")

        _wait_for(started, f"run {run_id} to take its first step", timeout_s)
        row = st.run(run_id)
        if row["status"] in ("failed", "crashed"):
            raise ControlError(f"bench control: run {run_id} {row['status']}: {row['error']}")
        startup_s = time.monotonic() - t0
        try:
            records = _drive(st, run_id, timeout_s=120)
            _wait_for(lambda: st.run(run_id)["status"] in ("stopped", "failed", "crashed"),
                      f"run {run_id} to stop", 120)
        finally:
            _kill_if_live(st, run_id)
        _measure(st, run_id, records)
        steps = st.run_steps(run_id)
        final = st.run(run_id)["status"]
    out = summarise(records)
    out["per_command"] = [
        {k: r.get(k) for k in ("command", "how", "status", "issue_step", "applied_step", "apply_s")}
        for r in records
    ]
    out.update(run_id=run_id, final_status=final, steps=len(steps), startup_s=round(startup_s, 1),
               step_time_s=round(float(steps["step_time_s"].median()), 3) if len(steps) else None,
               wall_s=round(time.monotonic() - t0, 1))
    return out


def _kill_if_live(store: ControlStore, run_id: str) -> None:
    """Leave no process behind when the benchmark fails half-way."""
    import os
    import signal

    row = store.run(run_id)
    if row["status"] in ("created", "running", "paused", "stopping") and row.get("pid"):
        try:
            os.killpg(int(row["pid"]), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
