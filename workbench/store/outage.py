"""What a run says while its store is unreachable, where it can be read without the store.

While object storage or a PostgreSQL catalog does not answer, the engine's writer keeps its steps in
memory and retries (`workbench.store.group`); it cannot write the run's status into the store, so it
writes it into a small JSON file in the store's local folder (the store directory; for a store on
object storage the SQLite catalog's folder or $WORKBENCH_LOCAL_DIR, see `objectstore.local_dir`):

    <local folder>/status/<run id>.json
    {"run_id": ..., "state": "retrying" | "paused", "since": "2026-12-04T22:41:03+00:00",
     "queued_steps": 12, "bound": 256, "error": "...", "pid": 4242, "host": "box", "updated_at": ...}

written atomically (a temp file renamed over it) at the outage's start, at each retry and when the run
pauses at the bound, and removed when the queued steps are committed (an `store_outage` event then
records the outage in the store). `workbench runs` and the dashboard's Runs and Live pages read these
files (`read_statuses`), and still show them when the store itself cannot be read.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import secrets
import socket
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STATUS_DIR = "status"
"""The folder, in the store's local folder, holding one status file per run in an outage."""
STATES = ("retrying", "paused")


def status_file(folder: str | os.PathLike[str], run_id: str) -> Path:
    return Path(folder) / STATUS_DIR / (re.sub(r"[^A-Za-z0-9_.-]", "_", run_id) + ".json")


def write_status(folder: str | os.PathLike[str], run_id: str, *, state: str, since: dt.datetime,
                 queued_steps: int, bound: int, error: str | None = None) -> None:
    """Write (atomically) the run's outage status; a failure to write it is logged, never raised."""
    if state not in STATES:
        raise ValueError(f"outage state {state!r}: must be one of {STATES}")
    row = {"run_id": run_id, "state": state, "since": since.isoformat(), "queued_steps": int(queued_steps),
           "bound": int(bound), "error": error, "pid": os.getpid(), "host": socket.gethostname(),
           "updated_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    path = status_file(folder, run_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        tmp.write_text(json.dumps(row))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write the store status of run %s at %s: %s", run_id, path, exc)


def clear_status(folder: str | os.PathLike[str], run_id: str) -> None:
    try:
        status_file(folder, run_id).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove the store status of run %s: %s", run_id, exc)


def _alive(row: dict[str, Any]) -> bool:
    """False when the file's process is known gone (this host, no such pid): a left-over file."""
    if row.get("host") not in (None, socket.gethostname()):
        return True
    try:
        import psutil

        return psutil.pid_exists(int(row.get("pid") or 0))
    except (ImportError, ValueError):
        return True


def read_statuses(folder: str | os.PathLike[str] | None) -> dict[str, dict[str, Any]]:
    """The outage status of every run that has one in `folder` (run id -> row, `message` added);
    files of processes that are gone and files that cannot be parsed are skipped."""
    if folder is None:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((Path(folder) / STATUS_DIR).glob("*.json")):
        try:
            row = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(row, dict) and row.get("run_id") and row.get("state") in STATES and _alive(row):
            row["message"] = describe(row)
            found[str(row["run_id"])] = row
    return found


def describe(row: dict[str, Any]) -> str:
    """One line for a status row: 'store unreachable, retrying since 22:41:03 UTC (3 steps queued,
    bound 256)', or, at the bound, that the run is paused until the store is back."""
    try:
        since = dt.datetime.fromisoformat(str(row["since"])).astimezone(dt.timezone.utc)
        when = f"{since:%Y-%m-%d %H:%M:%S} UTC"
    except (KeyError, ValueError):
        when = str(row.get("since"))
    queued, bound = row.get("queued_steps"), row.get("bound")
    if row.get("state") == "paused":
        return (f"store unreachable, retrying since {when}: paused at the bound of {bound} queued steps "
                f"(store.max_queued_steps); goes on when the store is back")
    return f"store unreachable, retrying since {when} ({queued} steps queued, bound {bound})"
