"""The engine's write path: runs, steps (one transaction each), rollback, events and controls."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import uuid
from pathlib import Path
from typing import Any, Callable

import duckdb
import pyarrow as pa

from workbench.errors import DataError, StoreError
from workbench.faults import fault_point
from workbench.store.connection import Lake
from workbench.store.records import StepRecord, now_utc, prompt_summary, rollouts_to_arrow, rows_to_arrow, step_row
from workbench.store.schema import STEP_TABLES, TABLES

log = logging.getLogger(__name__)

RUN_STATUSES = ("created", "running", "paused", "stopping", "stopped", "finished", "failed", "crashed",
                "imported", "abandoned")
CONTROL_OUTCOMES = ("applied", "rejected")
EVENT_LEVELS = ("debug", "info", "warning", "error")


def insert(cur: duckdb.DuckDBPyConnection, table: str, data: pa.Table,
           consts: dict[str, Any] | None = None) -> None:
    """INSERT an Arrow table into `table` by column name; `consts` fills whole columns with one bound
    value (cheaper than materialising a constant column in Python)."""
    if data.num_rows == 0:
        return
    consts = {k: v for k, v in (consts or {}).items() if k not in data.column_names}
    types = dict(TABLES[table])
    view = f"_in_{table}"
    cur.register(view, data)
    try:
        head = "".join(f"CAST(? AS {types[col]}) AS {col}, " for col in consts)
        cur.execute(f"INSERT INTO {table} BY NAME SELECT {head}* FROM {view}", list(consts.values()))
    finally:
        cur.unregister(view)


def _changed(cur: duckdb.DuckDBPyConnection) -> int:
    row = cur.fetchone()
    return int(row[0]) if row else 0


class WriterMixin:
    """Write methods of `Store` (see workbench/store/store.py); `self._lake` is the attached store."""

    _lake: Lake
    _last_step: dict[str, int]
    _steps_written: int
    upkeep_every: int
    _upkeep_lock: Any
    _upkeep_thread: Any
    _upkeep_due: bool

    # -- runs ------------------------------------------------------------------------------
    def create_run(self, name: str, config: dict[str, Any], seed: int, *, parent_run_id: str | None = None,
                   pid: int | None = None, host: str | None = None, code_version: str | None = None,
                   log_path: str | None = None, status: str = "created", source: str | None = None,
                   run_id: str | None = None) -> str:
        """Register a new run; returns its id (`<name>-<UTC time>-<4 hex>`, readable and unique, unless
        `run_id` gives one: the processes of one job agree on it). `source` names the engine that
        produced it (None: this workbench's; "verl", "trl", ... for imported runs; "sdk")."""
        _check_status(status)
        now = now_utc()
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:40] or "run"
        run_id = run_id or f"{slug}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        row = {"run_id": run_id, "name": name, "created_at": now, "updated_at": now, "status": status,
               "config": config, "seed": int(seed), "pid": pid if pid is not None else os.getpid(),
               "host": host or socket.gethostname(), "heartbeat_at": now, "parent_run_id": parent_run_id,
               "code_version": code_version, "log_path": log_path, "source": source}
        data = rows_to_arrow("runs", [row], {})
        self._lake.write(lambda cur: insert(cur, "runs", data), f"create run {name!r}")
        self._last_step[run_id] = -(2**31)  # a new run has no steps: its first write needs no query
        return run_id

    def set_run_status(self, run_id: str, status: str, *, error: str | None = None,
                       pid: int | None = None) -> None:
        """Set a run's status (and error message / process id when given)."""
        _check_status(status)

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("UPDATE runs SET status = ?, updated_at = ?, error = coalesce(?, error), "
                        "pid = coalesce(?, pid) WHERE run_id = ?", [status, now_utc(), error, pid, run_id])
            if _changed(cur) == 0:
                raise StoreError(f"unknown run {run_id!r} in store {self._lake.location.describe()}")

        self._lake.write(tx, f"set status of run {run_id}")

    def heartbeat(self, run_id: str) -> None:
        """Record that the run's process is alive now (`runs.heartbeat_at`)."""
        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", [now_utc(), run_id])
            if _changed(cur) == 0:
                raise StoreError(f"unknown run {run_id!r} in store {self._lake.location.describe()}")

        self._lake.write(tx, f"heartbeat of run {run_id}")

    # -- steps -----------------------------------------------------------------------------
    def write_step(self, record: StepRecord) -> None:
        """Commit a whole training step in ONE transaction: a reader sees all of it or none of it.
        Refuses a step the run already has (roll the run back first, see `rollback_run`)."""
        self.write_steps([record])

    def write_steps(self, records: list[StepRecord], *, timeout_s: float = 120.0,
                    on_retry: Callable[[StoreError], None] | None = None) -> None:
        """Commit several whole steps (of one run or several) in ONE transaction: a reader sees all of
        them or none of them. Every row is converted and checked before anything is written; a step
        the store already has, or one given twice in `records`, refuses the whole batch (nothing of
        it is written). Each table gets one Arrow concatenation and one INSERT, so a batch of many
        steps pays the catalog's fixed commit cost once (group commit; bulk importers batch by rows).
        A commit that fails to reach the store is replayed until `timeout_s` (see `Lake.write`, which
        calls `on_retry` before each such replay)."""
        records = list(records)
        if not records:
            return
        seen: dict[tuple[str, int], int] = {}
        for i, record in enumerate(records):
            if not isinstance(record, StepRecord):
                raise DataError(f"write_steps: record {i} is a {type(record).__name__}, not a StepRecord")
            key = (record.run_id, int(record.step))
            if key in seen:
                raise DataError(f"write_steps: step {key[1]} of run {key[0]!r} is given twice in one batch "
                                f"(records {seen[key]} and {i}); nothing was written")
            seen[key] = i
        batch = _StepBatch(records)
        by_run: dict[str, list[int]] = {}
        for record in records:
            if record.step_row:  # a rank's share of a step (SDK) has no steps row to check
                by_run.setdefault(record.run_id, []).append(int(record.step))
        for run_id, steps in by_run.items():
            self._check_new_steps(run_id, steps)

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            batch.insert(cur)
            fault_point("commit")  # kill tests: rows inserted, COMMIT not reached

        first = records[0]
        what = (f"write step {first.step} of run {first.run_id}" if len(records) == 1
                else f"write {len(records)} steps ({batch.rollout_rows} rollouts) of run(s) "
                     f"{', '.join(sorted({r.run_id for r in records}))}")
        self._lake.write(tx, what, timeout_s=timeout_s, on_retry=on_retry)
        for run_id, steps in by_run.items():
            top = max(steps)
            self._last_step[run_id] = max(top, self._last_step.get(run_id, top))
        before = self._steps_written
        self._steps_written += len(records)
        if self.upkeep_every and self._steps_written // self.upkeep_every > before // self.upkeep_every:
            self._upkeep()

    def _upkeep(self) -> None:
        """Merge small files (see `maintenance.upkeep`) on a background thread, so the commit that
        triggered it returns at once and later commits go on between its statements. One round at a
        time: a round due while one runs starts when it ends. A failure is logged, never raised: the
        steps are already committed and the next round tries again."""
        import threading
        import time

        with self._upkeep_lock:
            self._upkeep_due_at = time.time()  # a round of another writer starting after this covers it
            if self._upkeep_thread is not None and self._upkeep_thread.is_alive():
                self._upkeep_due = True
                return
            self._upkeep_due = False
            self._upkeep_thread = threading.Thread(target=self._upkeep_rounds, name="store-upkeep", daemon=True)
            self._upkeep_thread.start()

    def _upkeep_rounds(self) -> None:
        from workbench.store.maintenance import upkeep

        while True:
            try:
                seconds = upkeep(self, due_at=self._upkeep_due_at, stop=self._upkeep_stop)  # type: ignore[arg-type]
                if seconds is not None:
                    log.debug("store upkeep after %d steps took %.2f s", self._steps_written, seconds)
            except StoreError as exc:
                log.warning("store upkeep failed (steps are safe; it runs again later): %s", exc)
            except Exception as exc:  # noqa: BLE001 - a closed store, say: never kill the process
                log.warning("store upkeep stopped (steps are safe): %s", exc)
            with self._upkeep_lock:
                if not self._upkeep_due or self._lake._closed:
                    self._upkeep_thread = None
                    return
                self._upkeep_due = False

    def wait_upkeep(self, timeout_s: float | None = None) -> None:
        """Wait for a running round of upkeep (if any) to end."""
        thread = self._upkeep_thread
        if thread is not None:
            thread.join(timeout_s)

    def _check_new_steps(self, run_id: str, steps: list[int]) -> None:
        """Refuse steps the run already has. The run's last step is read from the store once per
        process and then tracked here, so the hot path costs no query (a step is written by one engine)."""
        if run_id not in self._last_step:
            frame = self._lake.read("SELECT max(step) AS last FROM steps WHERE run_id = ?", [run_id])
            last = frame["last"][0]
            self._last_step[run_id] = -(2**31) if last is None else int(last)
        older = sorted({s for s in steps if s <= self._last_step[run_id]})
        if older:
            found = self._lake.read("SELECT step FROM steps WHERE run_id = ? AND list_contains(?, step) "
                                    "ORDER BY step LIMIT 1", [run_id, older])
            if found.height:
                raise StoreError(f"step {found['step'][0]} of run {run_id!r} is already in the store "
                                 f"{self._lake.location.describe()}; roll the run back before rewriting it")

    def write_evals(self, run_id: str, step: int, rows: list[dict[str, Any]]) -> None:
        """Evaluation rows taken at `step` (outside a training step's transaction)."""
        data = rows_to_arrow("evals", rows, {"run_id": run_id, "step": int(step)})
        self._lake.write(lambda cur: insert(cur, "evals", data), f"write evals of run {run_id} step {step}")

    def add_prompts(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Register a run's prompts (text, answer, level); prompts already stored are skipped."""
        data = rows_to_arrow("prompts", rows, {"run_id": run_id})
        self._lake.write(lambda cur: _insert_new_prompts(cur, run_id, data), f"add prompts of run {run_id}")

    def add_event(self, run_id: str, level: str, kind: str, message: str, *, step: int | None = None,
                  data: Any = None) -> str:
        """Record an event (warning, error, checkpoint, control outcome); returns its id."""
        row = _event_row(run_id, {"level": level, "kind": kind, "message": message, "data": data}, step)
        table = rows_to_arrow("events", [row], {})
        self._lake.write(lambda cur: insert(cur, "events", table), f"add event to run {run_id}")
        return row["event_id"]

    def rollback_run(self, run_id: str, step: int) -> None:
        """Delete every row of the run past `step` (steps, allocations, rollouts, prompt_stats, evals,
        open alerts on those steps) and mark its later events `rolled_back`, in one transaction (resume
        from a checkpoint). A guard's rollback keeps such rows instead (`archive_attempt`)."""
        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            for table in STEP_TABLES:
                cur.execute(f"DELETE FROM {table} WHERE run_id = ? AND step > ?", [run_id, int(step)])
            cur.execute("UPDATE events SET rolled_back = true WHERE run_id = ? AND step > ? "
                        "AND NOT rolled_back", [run_id, int(step)])
            # open alerts on the steps dropped here: the regenerated steps raise them again
            cur.execute("DELETE FROM alert_rollouts WHERE alert_id IN (SELECT alert_id FROM alerts WHERE "
                        "run_id = ? AND step > ? AND status = 'open' AND steps_run_id = run_id)", [run_id, int(step)])
            cur.execute("DELETE FROM alerts WHERE run_id = ? AND step > ? AND status = 'open' "
                        "AND steps_run_id = run_id", [run_id, int(step)])
            cur.execute("UPDATE runs SET updated_at = ? WHERE run_id = ?", [now_utc(), run_id])

        self._lake.write(tx, f"roll run {run_id} back to step {step}")
        self._last_step.pop(run_id, None)

    # -- controls --------------------------------------------------------------------------
    def add_control(self, run_id: str, command: str, args: dict[str, Any] | None = None, *,
                    who: str = "cli") -> int:
        """Queue a control command for a run; returns its id (1, 2, ... across the store)."""
        holder: dict[str, int] = {}

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("SELECT coalesce(max(control_id), 0) + 1 FROM controls")
            control_id = _changed(cur)
            row = {"control_id": control_id, "run_id": run_id, "created_at": now_utc(), "who": who,
                   "command": command, "args": args or {}, "status": "pending"}
            insert(cur, "controls", rows_to_arrow("controls", [row], {}))
            holder["id"] = control_id

        self._lake.write(tx, f"add control {command!r} for run {run_id}")
        self._signal_controls(run_id)
        return holder["id"]

    def _signal_file(self, run_id: str) -> Path | None:
        root = self._lake.location.lock_dir  # the store directory (or an s3 store's SQLite catalog folder)
        return None if root is None else root / "signals" / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)

    def _signal_controls(self, run_id: str) -> None:
        """After a command commits, put a fresh token in the run's signal file: a running engine
        reads that small file at every boundary and queries `controls` only when it changed."""
        path = self._signal_file(run_id)
        if path is None:
            return
        try:
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
            tmp.write_text(secrets.token_hex(8))
            os.replace(tmp, path)
        except OSError as exc:  # the engine then polls on its own schedule; the command is stored
            log.warning("could not signal controls of run %s at %s: %s", run_id, path, exc)

    def control_signal(self, run_id: str) -> str | None:
        """The token of the run's last queued command ("" when none was queued yet), or None when the
        store has no local directory to signal through (then pending commands must be polled)."""
        path = self._signal_file(run_id)
        if path is None:
            return None
        try:
            return path.read_text()
        except FileNotFoundError:
            return ""
        except OSError:
            return None

    def resolve_control(self, control_id: int, status: str, *, step: int | None = None,
                        reason: str | None = None) -> None:
        """Record a control command's outcome: applied (at `step`) or rejected (with `reason`)."""
        if status not in CONTROL_OUTCOMES:
            raise DataError(f"control status {status!r}: must be one of {CONTROL_OUTCOMES}")

        def tx(cur: duckdb.DuckDBPyConnection) -> None:
            cur.execute("SELECT status FROM controls WHERE control_id = ?", [int(control_id)])
            found = cur.fetchone()
            if found is None:
                raise StoreError(f"unknown control {control_id} in store {self._lake.location.describe()}")
            if found[0] != "pending":
                raise StoreError(f"control {control_id} is already {found[0]}")
            cur.execute("UPDATE controls SET status = ?, applied_step = ?, reason = ?, resolved_at = ? "
                        "WHERE control_id = ?", [status, step, reason, now_utc(), int(control_id)])

        self._lake.write(tx, f"resolve control {control_id}")

    def pending_controls(self, run_id: str) -> list[dict[str, Any]]:
        """The run's pending control commands, oldest first; `args` decoded from JSON."""
        frame = self._lake.read("SELECT * FROM controls WHERE run_id = ? AND status = 'pending' "
                                "ORDER BY control_id", [run_id])
        rows = frame.to_dicts()
        for row in rows:
            row["args"] = json.loads(row["args"]) if row["args"] else {}
        return rows


class _StepBatch:
    """The rows of several StepRecords converted (and so validated) up front, one Arrow table per store
    table, ready to be inserted in one transaction."""

    def __init__(self, records: list[StepRecord]) -> None:
        rollouts, steps, prompts_by_run = [], [], {}
        small: dict[str, list[pa.Table]] = {"allocations": [], "prompt_stats": [], "evals": [], "events": []}
        episodes: dict[str, list[tuple[pa.Table, str, int]]] = {"turns": [], "tool_calls": []}
        for record in records:
            run_id, step = record.run_id, int(record.step)
            fill = {"run_id": run_id, "step": step}
            rollouts.append((rollouts_to_arrow(record.rollouts, run_id, step), run_id, step))
            for table in episodes:
                rows = getattr(record, table)
                if isinstance(rows, pa.Table) or rows:
                    episodes[table].append((rollouts_to_arrow(rows, run_id, step, table), run_id, step))
            if record.step_row:
                steps.append(rows_to_arrow("steps", [step_row(run_id, step, record.metrics)], {}))
            small["allocations"].append(rows_to_arrow("allocations", record.allocations, fill))
            small["prompt_stats"].append(rows_to_arrow("prompt_stats", record.prompt_stats, fill))
            small["evals"].append(rows_to_arrow("evals", record.evals, fill))
            small["events"].append(rows_to_arrow("events", [_event_row(run_id, e, step) for e in record.events], {}))
            prompts_by_run.setdefault(run_id, []).extend(record.prompts)
        self.rollouts, self.rollout_consts = _concat_filled(rollouts)
        self.rollout_rows = self.rollouts.num_rows
        self.outcomes = prompt_summary(self.rollouts)  # the Compare prompts page's read, in the same commit
        self.steps = _concat(steps) if steps else rows_to_arrow("steps", [], {})
        self.small = {table: _concat(parts) for table, parts in small.items()}
        self.episodes = {table: _concat_filled(parts) for table, parts in episodes.items() if parts}
        self.prompts = {}
        for run_id, rows in prompts_by_run.items():
            unique: dict[Any, dict[str, Any]] = {}
            for row in rows:  # a prompt listed by two steps of the batch is stored once (the first)
                key = row.get("prompt_id") if isinstance(row, dict) else id(row)
                unique.setdefault(key, row)
            self.prompts[run_id] = rows_to_arrow("prompts", list(unique.values()), {"run_id": run_id})

    def insert(self, cur: duckdb.DuckDBPyConnection) -> None:
        insert(cur, "rollouts", self.rollouts, self.rollout_consts)
        insert(cur, "prompt_outcomes", self.outcomes, self.rollout_consts)
        for table, data in self.small.items():
            insert(cur, table, data)
        for table, (data, consts) in self.episodes.items():
            insert(cur, table, data, consts)
        for run_id, data in self.prompts.items():
            _insert_new_prompts(cur, run_id, data)
        insert(cur, "steps", self.steps)  # last: a step's row marks it complete for pollers


def _concat(parts: list[pa.Table]) -> pa.Table:
    parts = [p for p in parts if p.num_rows] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="default")


def _concat_filled(parts: list[tuple[pa.Table, str, int]]) -> tuple[pa.Table, dict[str, Any]]:
    """Concatenate the rollouts of several steps. A run_id / step column an input leaves out is
    filled: as one bound constant when the whole batch shares the value (the single-step path, no
    column materialised), else as a column repeated per input."""
    consts: dict[str, Any] = {}
    columns = {"run_id": (pa.string(), 1), "step": (pa.int32(), 2)}
    for name, (kind, pos) in columns.items():
        values = {p[pos] for p in parts}
        lacking = [i for i, p in enumerate(parts) if name not in p[0].column_names]
        if not lacking:
            continue
        if len(lacking) == len(parts) and len(values) == 1:
            consts[name] = next(iter(values))
            continue
        for i in lacking:
            table, run_id, step = parts[i]
            value = (run_id, step)[pos - 1]
            table = table.append_column(pa.field(name, kind), pa.repeat(pa.scalar(value, kind), table.num_rows))
            parts[i] = (table, run_id, step)
    return _concat([p[0] for p in parts]), consts


def _insert_new_prompts(cur: duckdb.DuckDBPyConnection, run_id: str, data: pa.Table) -> None:
    if data.num_rows == 0:
        return
    cur.register("_in_prompts", data)
    try:
        cur.execute("INSERT INTO prompts BY NAME SELECT * FROM _in_prompts WHERE prompt_id NOT IN "
                    "(SELECT prompt_id FROM prompts WHERE run_id = ?)", [run_id])
    finally:
        cur.unregister("_in_prompts")


def _event_row(run_id: str, event: dict[str, Any], step: int | None) -> dict[str, Any]:
    level = event.get("level", "info")
    if level not in EVENT_LEVELS:
        raise DataError(f"event level {level!r}: must be one of {EVENT_LEVELS}")
    for key in ("kind", "message"):
        if not isinstance(event.get(key), str):
            raise DataError(f"event {key!r}: a string is required, got {event.get(key)!r}")
    unknown = set(event) - {"level", "kind", "message", "data", "step", "ts"}
    if unknown:
        raise DataError(f"event: unknown key(s) {sorted(unknown)}")
    return {"event_id": uuid.uuid4().hex, "run_id": run_id, "step": event.get("step", step),
            "ts": event.get("ts") or now_utc(), "level": level, "kind": event["kind"],
            "message": event["message"], "data": event.get("data"), "rolled_back": False}


def _check_status(status: str) -> None:
    if status not in RUN_STATUSES:
        raise DataError(f"run status {status!r}: must be one of {RUN_STATUSES}")
