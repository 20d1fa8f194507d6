"""Alerts (a guard's firings with their evidence) and attempts (the steps a rollback abandoned).

An alert row records the rule, the values that fired it, its steps and what its action did; the
rollouts behind it are rows of `alert_rollouts`. Its `status` goes open -> acknowledged (a person saw
it) or acted (its action ran: the run paused, stopped or rolled back).

A rollback keeps the steps it abandons: `archive_attempt` moves the run's rows past the checkpoint
(steps, allocations, rollouts, prompt statistics, evals, events, the controls applied there) to a new
run row `<run_id>.attemptN` with status `abandoned` and `parent_run_id` the run, in one transaction.
So every reader that asks for the run reads the live attempt; the abandoned one is read by its own id.
"""

from __future__ import annotations

import uuid
from typing import Any

import duckdb
import polars as pl

from workbench.errors import DataError, StoreError
from workbench.store.connection import Lake
from workbench.store.records import now_utc, rows_to_arrow
from workbench.store.schema import STEP_TABLES
from workbench.store.writer import insert

ALERT_STATUSES = ("open", "acknowledged", "acted")
"""An alert's status: open (new), acknowledged (a person saw it), acted (its action ran)."""

ROLLOUT_KEY = ("step", "stage", "prompt_id", "idx")
"""What names one rollout of a run."""

ABANDONED = "abandoned"
"""Status of the run row holding the steps a rollback abandoned (an earlier attempt of a run)."""


class AlertsMixin:
    """Alert and attempt methods of `Store` (see workbench/store/store.py)."""

    _lake: Lake
    _last_step: dict[str, int]

    def add_alert(self, run_id: str, alert: dict[str, Any], rollouts: list[dict[str, Any]] | None = None) -> str:
        """Record an alert (keys: guard, rule, window_steps, action, first_step, step, evidence, message,
        hint, status, outcome) and the keys (step, stage, prompt_id, idx) of its rollouts; its id."""
        alert_id = alert.get("alert_id") or uuid.uuid4().hex[:16]
        status = alert.get("status", "open")
        if status not in ALERT_STATUSES:
            raise DataError(f"alert status {status!r}: must be one of {ALERT_STATUSES}")
        row = {**alert, "alert_id": alert_id, "run_id": run_id, "created_at": now_utc(), "status": status,
               "steps_run_id": alert.get("steps_run_id") or run_id, "rollouts": len(rollouts or [])}
        table = rows_to_arrow("alerts", [row], {})
        keys = rows_to_arrow("alert_rollouts", [{k: r[k] for k in ROLLOUT_KEY} for r in rollouts or []],
                             {"alert_id": alert_id, "run_id": run_id}) if rollouts else None

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            insert(cur, "alerts", table)
            if keys is not None:
                insert(cur, "alert_rollouts", keys, {"alert_id": alert_id, "run_id": run_id})

        self._lake.write(tx, f"add alert of guard {alert.get('guard')!r} to run {run_id}")
        return alert_id

    def set_alert_status(self, alert_id: str, status: str, *, outcome: str | None = None) -> None:
        """Acknowledge an alert, or record that its action ran (`outcome` says what it did)."""
        if status not in ALERT_STATUSES:
            raise DataError(f"alert status {status!r}: must be one of {', '.join(ALERT_STATUSES)}")

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("SELECT count(*) FROM alerts WHERE alert_id = ?", [alert_id])
            if not cur.fetchone()[0]:
                raise StoreError(f"unknown alert {alert_id!r} in store {self._lake.location.describe()}")
            cur.execute("UPDATE alerts SET status = ?, outcome = coalesce(?, outcome), resolved_at = ? "
                        "WHERE alert_id = ?", [status, outcome, now_utc(), alert_id])

        self._lake.write(tx, f"set alert {alert_id} {status}")

    def alerts(self, run_id: str | None = None, *, status: str | None = None) -> pl.DataFrame:
        """Alerts newest first, of one run or all, optionally of one status."""
        clauses, params = ["true"], []
        if run_id is not None:
            clauses.append("run_id = ?")
            params.append(run_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        return self._lake.read_sparse("alerts", f"SELECT * FROM alerts WHERE {' AND '.join(clauses)} "
                                      "ORDER BY created_at DESC, alert_id", params)

    def alert_rollouts(self, alert_id: str) -> pl.DataFrame:
        """The keys (run_id, step, stage, prompt_id, idx) of the rollouts behind an alert."""
        return self._lake.read_sparse("alert_rollouts", "SELECT * FROM alert_rollouts WHERE alert_id = ? "
                                      "ORDER BY step, stage, prompt_id, idx", [alert_id])

    def attempts(self, run_id: str) -> pl.DataFrame:
        """The earlier (abandoned) attempts of a run, oldest first, with their first and last step."""
        return self._lake.read(
            "SELECT r.run_id, r.name, r.created_at, r.error AS reason, s.first_step, s.last_step "
            "FROM runs r LEFT JOIN (SELECT run_id, min(step) AS first_step, max(step) AS last_step "
            "FROM steps GROUP BY run_id) s USING (run_id) WHERE r.parent_run_id = ? AND r.status = ? "
            "ORDER BY r.created_at, r.run_id", [run_id, ABANDONED])

    def archive_attempt(self, run_id: str, step: int, reason: str) -> str:
        """Move the run's rows past `step` to a new abandoned attempt of the run; returns its id."""
        holder: dict[str, str] = {}

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("SELECT name FROM runs WHERE run_id = ?", [run_id])
            found = cur.fetchone()
            if found is None:
                raise StoreError(f"unknown run {run_id!r} in store {self._lake.location.describe()}")
            cur.execute("SELECT count(*) FROM runs WHERE parent_run_id = ? AND status = ?", [run_id, ABANDONED])
            n = int(cur.fetchone()[0]) + 1
            attempt = holder["id"] = f"{run_id}.attempt{n}"
            t = now_utc()
            cur.execute("INSERT INTO runs BY NAME SELECT * REPLACE (? AS run_id, ? AS name, ? AS status, "
                        "? AS parent_run_id, ? AS created_at, ? AS updated_at, ? AS error, NULL AS pid, "
                        "NULL AS heartbeat_at) FROM runs WHERE run_id = ?",
                        [attempt, f"{found[0]} (attempt {n}, abandoned)", ABANDONED, run_id, t, t, reason, run_id])
            for table in (*STEP_TABLES, "events", "alert_rollouts"):
                cur.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ? AND step > ?", [attempt, run_id, int(step)])
            cur.execute("UPDATE controls SET run_id = ? WHERE run_id = ? AND status = 'applied' AND applied_step > ?",
                        [attempt, run_id, int(step)])
            cur.execute("UPDATE alerts SET steps_run_id = ? WHERE run_id = ? AND step > ? AND steps_run_id = ?",
                        [attempt, run_id, int(step), run_id])
            cur.execute("INSERT INTO prompts SELECT ? AS run_id, * EXCLUDE (run_id) FROM prompts WHERE run_id = ?",
                        [attempt, run_id])

        self._lake.write(tx, f"keep run {run_id}'s steps after {step} as an earlier attempt")
        self._last_step.pop(run_id, None)
        return holder["id"]
