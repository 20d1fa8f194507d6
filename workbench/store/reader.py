"""The read path (dashboard, notebooks, CLI): small query functions, every filter value a bound
parameter, Polars DataFrames out, a stable order on every query that pages."""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from workbench.errors import DataError, StoreError
from workbench.store.connection import ALIAS, Lake
from workbench.store.records import check_columns
from workbench.store.schema import DECISION_FIELDS, decision_select

ROLLOUT_ORDER = "step, stage, prompt_id, idx"

# one entry of DuckLake's `changes_made` ("inlined_insert:9,deleted_from_table:3,created_table:"main"."t"")
_CHANGE = re.compile(r'(\w+):("(?:[^"]|"")*"(?:\."(?:[^"]|"")*")*|[^,]*)')
_INSERTS = {"inserted_into_table", "inlined_insert"}

# keyword -> (SQL condition with one ? per value)
_ROLLOUT_FILTERS = {
    "step_min": "step >= ?", "step_max": "step <= ?", "prompt_id": "prompt_id = ?",
    "reward_min": "reward >= ?", "reward_max": "reward <= ?", "verdict": "verdict = ?",
    "length_min": "length >= ?", "length_max": "length <= ?",
    "entropy_min": "entropy_mean >= ?", "entropy_max": "entropy_mean <= ?",
    "stage": "stage = ?", "finish_reason": "finish_reason = ?",
    "staleness_min": "staleness >= ?", "staleness_max": "staleness <= ?",
    # episodes (multi-turn rollouts; single-turn rows have no counts and never match these)
    "tool_calls_min": "tool_calls >= ?", "tool_calls_max": "tool_calls <= ?",
    "tool_errors_min": "tool_errors >= ?", "tool_errors_max": "tool_errors <= ?",
    # a rollout with a tool call that failed with this kind (workbench.episodes.TOOL_ERRORS)
    "tool_error": "EXISTS (SELECT 1 FROM tool_calls c WHERE c.error = ? AND c.run_id = rollouts.run_id "
                  "AND c.step = rollouts.step AND c.stage = rollouts.stage AND c.prompt_id = rollouts.prompt_id "
                  "AND c.idx = rollouts.idx)",
    "alert_id": "EXISTS (SELECT 1 FROM alert_rollouts a WHERE a.alert_id = ? AND a.run_id = rollouts.run_id "
                "AND a.step = rollouts.step AND a.stage = rollouts.stage AND a.prompt_id = rollouts.prompt_id "
                "AND a.idx = rollouts.idx)",
}
# a reward term (`reward_terms`, by name): rows that have it, within optional bounds
_TERM_FILTERS = {"term": "reward_terms[?] IS NOT NULL", "term_min": "reward_terms[?] >= ?",
                 "term_max": "reward_terms[?] <= ?"}


def rollout_where(run_id: str, filters: dict[str, Any]) -> tuple[str, list[Any]]:
    """WHERE clause and parameters for the rollout filters (None means no filter)."""
    unknown = set(filters) - set(_ROLLOUT_FILTERS) - set(_TERM_FILTERS)
    if unknown:
        raise DataError(f"rollouts: unknown filter(s) {sorted(unknown)}; filters are "
                        f"{sorted([*_ROLLOUT_FILTERS, *_TERM_FILTERS])}")
    clauses, params = ["run_id = ?"], [run_id]
    for key, condition in _ROLLOUT_FILTERS.items():
        value = filters.get(key)
        if value is not None:
            clauses.append(condition)
            params.append(value)
    term = filters.get("term")
    if term is None and any(filters.get(k) is not None for k in ("term_min", "term_max")):
        raise DataError("rollouts: term_min and term_max need term (the reward term's name)")
    for key, condition in _TERM_FILTERS.items() if term is not None else ():
        if filters.get(key) is not None:
            clauses.append(condition)
            params += [term] if key == "term" else [term, filters[key]]
    # No stored id or label holds a NUL byte, and DuckLake's file pruning fails on a bound value that does:
    # such a filter matches nothing, so say so in SQL without binding it.
    if any(isinstance(v, str) and "\x00" in v for v in params):
        return "false", []
    return " AND ".join(clauses), params


def _run_ids(run_ids: str | list[str]) -> list[str]:
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not ids:
        raise DataError("run_ids: at least one run id is required")
    return ids


class ReaderMixin:
    """Read methods of `Store` (see workbench/store/store.py); `self._lake` is the attached store."""

    _lake: Lake

    def snapshot_id(self) -> int:
        """The store's latest committed snapshot (one per commit: a step, a heartbeat, a control). A
        cache keyed on it answers until something new is committed (the dashboard's live frames)."""
        return int(self._lake.read("SELECT id FROM lake.current_snapshot()")["id"][0])

    def changes_since(self, snapshot_id: int | None) -> tuple[int, dict[str, str] | None]:
        """The latest snapshot id, and which tables the snapshots after `snapshot_id` changed and how:
        {table: "insert"} for a table that only got new rows, {table: "change"} for one whose rows were
        deleted or rewritten (a rollback, compaction) or whose columns changed. None where that cannot be
        told, so that a caller treats every table as changed: a first look (`snapshot_id` None), snapshots
        since expired, a store whose history no longer reaches `snapshot_id`, a table created or dropped.
        Read from DuckLake's own record of each commit (`ducklake_snapshot_changes`): one catalog query,
        what lets the dashboard key a frame on the tables it reads rather than on every commit."""
        meta = f"__ducklake_metadata_{ALIAS}"
        rows = self._lake.read(
            f"SELECT snapshot_id, changes_made FROM {meta}.ducklake_snapshot_changes WHERE snapshot_id > ? "
            f"UNION ALL SELECT max(snapshot_id), NULL FROM {meta}.ducklake_snapshot ORDER BY snapshot_id",
            [-1 if snapshot_id is None else int(snapshot_id)])
        ids, made = rows["snapshot_id"].to_list(), rows["changes_made"].to_list()
        latest = max((i for i in ids if i is not None), default=-1)
        changes = [(i, m) for i, m in zip(ids, made) if m is not None]
        if snapshot_id is None or latest < snapshot_id or [i for i, _ in changes] != list(range(snapshot_id + 1, latest + 1)):
            return latest, None  # a first look, a gap (expired snapshots) or a store that went back
        out: dict[str, str] = {}
        for _, entry in changes:
            for kind, value in _CHANGE.findall(entry):
                name = self._table_name(int(value)) if value.isdigit() else None
                if name is None:  # a table created or dropped, a schema: no per-table answer
                    return latest, None
                out[name] = "insert" if kind in _INSERTS and out.get(name) != "change" else "change"
        return latest, out

    def _table_name(self, table_id: int) -> str | None:
        names = getattr(self, "_table_names", None)
        if names is None or table_id not in names:
            frame = self._lake.read(f"SELECT table_id, table_name FROM __ducklake_metadata_{ALIAS}.ducklake_table")
            names = self._table_names = dict(zip(frame["table_id"].to_list(), frame["table_name"].to_list()))
        return names.get(table_id)

    def list_runs(self, *, attempts: bool = False) -> pl.DataFrame:
        """Every run, newest first, with its last step and number of steps; the abandoned attempts
        of rolled-back runs only with `attempts` (see `Store.attempts`)."""
        where = "" if attempts else "WHERE r.status IS DISTINCT FROM 'abandoned' "
        return self._lake.read(
            "SELECT r.*, s.last_step, coalesce(s.steps, 0) AS steps FROM runs r LEFT JOIN "
            "(SELECT run_id, max(step) AS last_step, count(*) AS steps FROM steps GROUP BY run_id) s "
            f"USING (run_id) {where}ORDER BY r.created_at DESC, r.run_id")

    def runs_from(self, source: str, name: str) -> pl.DataFrame:
        """The id and config of the runs of one source and name, newest first (an importer finding the
        run an earlier import created, without `list_runs`' join over every step)."""
        return self._lake.read("SELECT run_id, config FROM runs WHERE source = ? AND name = ? "
                               "ORDER BY created_at DESC, run_id", [source, name])

    def last_logged_step(self, run_id: str, *, worker: str | None = None) -> int | None:
        """The run's last stored step (None: none); with `worker`, the last step holding a rollout of that
        worker (a data-parallel rank logging through the SDK, `rank-<r>`)."""
        if worker is None:
            frame = self._lake.read("SELECT max(step) AS last FROM steps WHERE run_id = ?", [run_id])
        else:
            frame = self._lake.read("SELECT max(step) AS last FROM rollouts WHERE run_id = ? AND worker = ?",
                                    [run_id, worker])
        last = frame["last"][0]
        return None if last is None else int(last)

    def run(self, run_id: str) -> dict[str, Any]:
        """One run's row as a dict (`config` decoded from JSON); StoreError if there is no such run."""
        frame = self._lake.read("SELECT * FROM runs WHERE run_id = ?", [run_id])
        if frame.height == 0:
            raise StoreError(f"unknown run {run_id!r} in store {self._lake.location.describe()}")
        row = frame.row(0, named=True)
        row["config"] = json.loads(row["config"]) if row["config"] else {}
        return row

    def run_steps(self, run_ids: str | list[str], *, after: dict[str, int] | None = None) -> pl.DataFrame:
        """Step metrics of one or several runs, ordered by run then step; with `after` ({run_id: step}),
        only each run's steps past the one given (the dashboard's incremental read of a live run)."""
        ids = _run_ids(run_ids)
        if after is not None:
            where = " OR ".join("(run_id = ? AND step > ?)" for _ in ids)
            params = [x for r in ids for x in (r, int(after.get(r, -1)))]
            return self._lake.read(f"SELECT * FROM steps WHERE {where} ORDER BY run_id, step", params)
        marks = ", ".join("?" for _ in ids)
        return self._lake.read(f"SELECT * FROM steps WHERE run_id IN ({marks}) ORDER BY run_id, step", ids)

    def rollouts(self, run_id: str, *, limit: int = 50, offset: int = 0,
                 columns: list[str] | None = None, **filters: Any) -> pl.DataFrame:
        """A page of a run's rollouts in the stable order (step, stage, prompt_id, idx).

        Filters (all optional, bound parameters): step_min, step_max, prompt_id, reward_min,
        reward_max, verdict, length_min, length_max, entropy_min, entropy_max (on entropy_mean),
        stage, finish_reason, staleness_min, staleness_max (versions behind the trainer when consumed,
        the asynchronous pipeline), tool_calls_min/_max and tool_errors_min/_max (episodes), alert_id (the rollouts behind an alert); term (a reward term's name: rows
        that have it) with term_min, term_max (bounds on its value). `columns` picks columns (default: all, with
        the decisions of allocation inside episodes read out of `decision` as their named fields, `DECISION_FIELDS`)."""
        where, params = rollout_where(run_id, filters)
        if columns is not None:
            check_columns("rollouts", list(columns))
            keys = ["step", "stage", "prompt_id", "idx"]
            stored = [c for c in dict.fromkeys(list(columns) + keys) if c not in DECISION_FIELDS]
            named = [c for c in dict.fromkeys(columns) if c in DECISION_FIELDS]
            select = ", ".join(stored + ([decision_select(named)] if named else []))
        else:
            select = f"*, {decision_select()}"
        if int(limit) < 0 or int(offset) < 0:
            raise DataError(f"rollouts: limit ({limit}) and offset ({offset}) must be >= 0")
        query = f"SELECT {select} FROM rollouts WHERE {where}{{window}} ORDER BY {ROLLOUT_ORDER} LIMIT ? OFFSET ?"
        page = [int(limit), int(offset)]
        for step_max in self._page_windows(run_id, filters, int(limit)):
            # Rows are ordered by step first: when the rows up to `step_max` fill the page, the page
            # of the whole run is that page (every later row sorts after them). Files and row groups
            # outside the window are skipped by their step statistics.
            frame = self._lake.read(query.format(window=" AND step <= ?"), [*params, step_max, *page])
            if frame.height == int(limit):
                break
        else:
            frame = self._lake.read(query.format(window=""), [*params, *page])
        return frame.select(list(columns)) if columns is not None else frame

    def _page_windows(self, run_id: str, filters: dict[str, Any], limit: int) -> list[int]:
        """Growing windows of steps (their last step) to try a page in before the whole run: the
        first pages of a 10M-rollout run then read a few steps' rows, not the whole run's sort keys."""
        if limit <= 0:
            return []
        bounds = self._lake.read("SELECT min(step) AS lo, max(step) AS hi FROM steps WHERE run_id = ?", [run_id])
        lo, hi = bounds["lo"][0], bounds["hi"][0]
        if lo is None:
            return []
        if filters.get("step_min") is not None:
            lo = max(int(lo), int(filters["step_min"]))
        if filters.get("step_max") is not None:
            hi = min(int(hi), int(filters["step_max"]))
        windows, width = [], 2
        while lo + width - 1 < hi and len(windows) < 3:
            windows.append(int(lo) + width - 1)
            width *= 8
        return windows

    def count_rollouts(self, run_id: str, **filters: Any) -> int:
        """How many of a run's rollouts match the filters (same keywords as `rollouts`)."""
        where, params = rollout_where(run_id, filters)
        return int(self._lake.read(f"SELECT count(*) AS n FROM rollouts WHERE {where}", params)["n"][0])

    def staleness_counts(self, run_id: str) -> pl.DataFrame:
        """How many of a run's generated rollouts (reused responses left out) the trainer consumed at each
        staleness (columns staleness, rollouts; by staleness). Empty for runs that recorded none."""
        return self._lake.read(
            "SELECT staleness::BIGINT AS staleness, count(*)::BIGINT AS rollouts FROM rollouts WHERE run_id = ? "
            "AND staleness IS NOT NULL AND off_policy IS DISTINCT FROM true GROUP BY staleness ORDER BY staleness",
            [run_id])

    def prompt_history(self, run_id: str, prompt_id: str) -> pl.DataFrame:
        """One prompt across the run's steps: its allocation (asked, granted, stages, reasons,
        predicted pass rate) beside its statistics after the step (prompt_stats columns)."""
        return self._lake.read(
            "WITH s AS (SELECT * FROM prompt_stats WHERE run_id = ? AND prompt_id = ?), "
            "a AS (SELECT step, sum(asked)::BIGINT AS asked, sum(granted)::BIGINT AS granted, "
            "count(*)::INTEGER AS stages, string_agg(reason, ' | ' ORDER BY stage) AS reasons, "
            "arg_min(predicted_pass, stage) AS predicted_pass, arg_min(allocator, stage) AS allocator "
            "FROM allocations WHERE run_id = ? AND prompt_id = ? GROUP BY step) "
            "SELECT coalesce(s.step, a.step) AS step, a.allocator, a.asked, a.granted, a.stages, "
            "a.reasons, a.predicted_pass, s.* EXCLUDE (run_id, step, prompt_id) "
            "FROM s FULL OUTER JOIN a ON s.step = a.step ORDER BY 1",
            [run_id, prompt_id, run_id, prompt_id])

    def allocations(self, run_id: str, step: int | None = None, prompt_id: str | None = None) -> pl.DataFrame:
        """Allocation decisions of a run (optionally one step / one prompt), by step, stage, prompt."""
        clauses, params = ["run_id = ?"], [run_id]
        if step is not None:
            clauses.append("step = ?")
            params.append(int(step))
        if prompt_id is not None:
            clauses.append("prompt_id = ?")
            params.append(prompt_id)
        return self._lake.read(f"SELECT * FROM allocations WHERE {' AND '.join(clauses)} "
                               "ORDER BY step, stage, prompt_id", params)

    def prompt_stats(self, run_id: str, step: int | None = None) -> pl.DataFrame:
        """Per-prompt statistics of a run (optionally after one step), by step then prompt."""
        if step is None:
            return self._lake.read("SELECT * FROM prompt_stats WHERE run_id = ? ORDER BY step, prompt_id",
                                   [run_id])
        return self._lake.read("SELECT * FROM prompt_stats WHERE run_id = ? AND step = ? "
                               "ORDER BY prompt_id", [run_id, int(step)])

    def evals(self, run_id: str) -> pl.DataFrame:
        """Evaluation rows of a run, by step then prompt."""
        return self._lake.read("SELECT * FROM evals WHERE run_id = ? ORDER BY step, prompt_id", [run_id])

    def controls(self, run_id: str) -> pl.DataFrame:
        """Control commands of a run with their outcomes, oldest first."""
        return self._lake.read_sparse("controls", "SELECT * FROM controls WHERE run_id = ? ORDER BY control_id",
                                      [run_id])

    def events(self, run_id: str) -> pl.DataFrame:
        """Events of a run in time order (rolled-back ones included, marked `rolled_back`)."""
        return self._lake.read_sparse("events", "SELECT * FROM events WHERE run_id = ? ORDER BY ts, event_id",
                                      [run_id])

    def prompts(self, run_id: str) -> pl.DataFrame:
        """Prompts a run used (text, answer, level), by prompt id."""
        return self._lake.read("SELECT * FROM prompts WHERE run_id = ? ORDER BY prompt_id", [run_id])
