"""Liveness: telling a crashed run from a live one.

A running engine heart-beats into `runs.heartbeat_at` every few seconds (from a background thread,
so a long step or a pause does not look like death). A run is **crashed** when both hold:

1. its heartbeat is stale (older than `STALE_S`; a run that never beat counts from `created_at`), and
2. its process is gone: no process with that pid on this host, a zombie (killed but not yet reaped
   by its parent), or a process started after the last heartbeat (the pid was reused).

Either alone is not enough: a busy machine can delay heartbeats of a live process, and a run on
another host has a pid we cannot check (such runs are left as they are).
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.store.protocols import RunStore

LIVE_STATUSES = ("created", "running", "paused", "stopping")
"""Statuses of a run whose process should exist."""

STALE_S = 20.0
"""A heartbeat older than this many seconds is stale (the engine beats every few seconds)."""


def _as_epoch(value: Any) -> float | None:
    """Seconds since the epoch from a datetime (naive = UTC), a number, or None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp()
    if isinstance(value, str):
        return _as_epoch(dt.datetime.fromisoformat(value))
    return None


def pid_alive(pid: int | None, *, since: float | None = None) -> bool:
    """True when `pid` is a live, non-zombie process on this host that started no later than
    `since` (epoch seconds, with a second of slack), i.e. plausibly the process that beat then."""
    import psutil

    if not pid:
        return False
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return since is None or proc.create_time() <= since + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def is_local(host: str | None) -> bool:
    """Whether a run's host is this machine (an unknown host counts as local)."""
    return not host or host in (socket.gethostname(), "localhost", "127.0.0.1")


def heartbeat_age_s(run: dict[str, Any], *, now: float | None = None) -> float | None:
    """Seconds since the run's last heartbeat (or since it was created, if it never beat)."""
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    last = _as_epoch(run.get("heartbeat_at")) or _as_epoch(run.get("created_at"))
    return None if last is None else max(0.0, now - last)


def is_crashed(run: dict[str, Any], *, stale_s: float = STALE_S, now: float | None = None) -> bool:
    """Whether a run with a live status is in fact dead (stale heartbeat AND process gone)."""
    if run.get("status") not in LIVE_STATUSES or not is_local(run.get("host")):
        return False
    age = heartbeat_age_s(run, now=now)
    if age is None or age < stale_s:
        return False
    last = _as_epoch(run.get("heartbeat_at"))
    return not pid_alive(run.get("pid"), since=last)


def refresh_statuses(store: RunStore, *, stale_s: float = STALE_S, now: float | None = None) -> list[str]:
    """Mark every crashed run `crashed` in the store; return their ids."""
    runs = store.list_runs()
    rows = runs.to_dicts() if hasattr(runs, "to_dicts") else list(runs)
    crashed = []
    for run in rows:
        if is_crashed(run, stale_s=stale_s, now=now):
            age = heartbeat_age_s(run, now=now)
            store.set_run_status(
                run["run_id"],
                "crashed",
                error=f"process {run.get('pid')} gone and no heartbeat for {age:.0f} s",
            )
            crashed.append(run["run_id"])
    return crashed


def runs_with_status(store: RunStore, *, stale_s: float = STALE_S, status_dir: Any = None) -> Any:
    """Every run (Polars frame, newest first) after marking crashed ones, with `heartbeat_age_s` and
    `store_status`: the run's own word on an outage of its store ("store unreachable, retrying since
    ...", read from `status_dir`, the store's local folder; see `workbench.store.outage`), else null."""
    import polars as pl

    from workbench.store.outage import read_statuses

    refresh_statuses(store, stale_s=stale_s)
    frame = store.list_runs()
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    ages = [heartbeat_age_s(r, now=now) for r in frame.to_dicts()]
    ages = [None if a is None else round(a, 1) for a in ages]
    outages = read_statuses(status_dir)
    said = [outages.get(r, {}).get("message") for r in frame["run_id"].to_list()]
    return frame.with_columns(pl.Series("heartbeat_age_s", ages, dtype=pl.Float64),
                              pl.Series("store_status", said, dtype=pl.String))
