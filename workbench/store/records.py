"""What the writer accepts, and its conversion to Arrow tables with the store's column types.

The engine hands a training step over as one `StepRecord`: rollouts as a pyarrow Table (built from
tensors, no per-row Python) or a list of dicts, and the small tables as lists of dicts. Rows are
checked against the schema here, so a misspelt column fails at once with the table, row and key named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa

from workbench.errors import DataError
from workbench.metrics import STEP_COLUMNS, TEXT_COLUMNS
from workbench.store.schema import DECISION_FIELDS, FILTER_REASONS, TABLES, arrow_schema, json_columns


@dataclass
class StepRecord:
    """Everything one training step writes; `Store.write_step` commits it in ONE transaction."""

    run_id: str
    """The run this step belongs to (from `Store.create_run`)."""
    step: int
    """Step number, 0-based or 1-based as the engine counts; unique within the run."""
    metrics: dict[str, Any]
    """Step metrics. Keys naming a `steps` column (or a namespaced alias, see `STEP_METRIC_KEYS`) fill
    that column; every numeric value also lands in `steps.metrics` under its own key."""
    rollouts: pa.Table | list[dict[str, Any]]
    """One row per sampled response, columns of the `rollouts` table (run_id and step may be omitted)."""
    allocations: list[dict[str, Any]] = field(default_factory=list)
    """One row per (stage, prompt) allocation decision."""
    prompt_stats: list[dict[str, Any]] = field(default_factory=list)
    """One row per prompt whose statistics changed this step."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Evaluation rows taken at this step, if any."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Events (keys: level, kind, message, data) raised during this step."""
    prompts: list[dict[str, Any]] = field(default_factory=list)
    """Prompts first seen this step (text and answer are stored once per run)."""
    turns: pa.Table | list[dict[str, Any]] = field(default_factory=list)
    """Episodes: one row per turn of a multi-turn rollout (`workbench.episodes.episode_rows`), keyed by the
    rollout's stage, prompt_id and idx; single-turn rollouts have none."""
    tool_calls: pa.Table | list[dict[str, Any]] = field(default_factory=list)
    """Episodes: one row per tool call, keyed as `turns`."""
    step_row: bool = True
    """False: a share of a step whose `steps` row another process writes (a data-parallel rank of a run
    logged through `workbench.sdk`): its rows go in, no `steps` row, no already-stored-step check."""


STEP_METRIC_KEYS: dict[str, tuple[str, ...]] = {column: tuple(dict.fromkeys((column, name)))
                                                   for column, name in STEP_COLUMNS.items()}
"""steps column -> metric keys that fill it (first present wins): the column's own name, then the metric
the catalogue (`workbench/metrics.py`) says fills it."""


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def _jsonable(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: value is not JSON-serialisable: {exc}") from exc


def _reason_codes(values: Any, where: str, first_row: int = 0) -> np.ndarray:
    """GRPO-RoC's reasons (`FILTER_REASONS` names, None: none) as float codes, NaN for none."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is None:
            continue
        if v not in FILTER_REASONS:
            raise DataError(f"{where} row {first_row + i}: filter_reason {v!r} is not one of {list(FILTER_REASONS)}")
        out[i] = FILTER_REASONS.index(v)
    return out


def decision_array(fields: dict[str, Any], n: int, where: str = "rollouts", first_row: int = 0) -> pa.MapArray:
    """rollouts.decision for `n` rows from named decision fields (`DECISION_FIELDS`: filter_penalty, branch_draw,
    ...), each n values (None or NaN: not decided), in one pass over columns: a row's map holds the keys it has
    values for; a row with none is null."""
    names = [name for name in DECISION_FIELDS if name in fields]
    values = np.full((n, len(names)), np.nan)
    for j, name in enumerate(names):
        col = fields[name]
        if name == "filter_reason":
            arrow = isinstance(col, (pa.Array, pa.ChunkedArray))
            values[:, j] = _reason_codes(col.to_pylist() if arrow else col, where, first_row)
            continue
        if isinstance(col, (pa.Array, pa.ChunkedArray)):
            col = col.to_numpy(zero_copy_only=False)
        try:
            values[:, j] = np.asarray([np.nan if v is None else v for v in col] if isinstance(col, list) else col,
                                      dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{where} column {name!r}: not numbers: {exc}") from exc
    present = ~np.isnan(values)
    counts = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    keys = np.array([DECISION_FIELDS[name][0] for name in names] or [""], dtype=object)
    rows, cols = np.nonzero(present)  # row-major: each row's keys in DECISION_FIELDS order
    return pa.MapArray.from_arrays(pa.array(offsets), pa.array(keys[cols], pa.string()),
                                   pa.array(values[rows, cols].astype(np.float32), pa.float32()),
                                   type=pa.map_(pa.string(), pa.float32()), mask=pa.array(counts == 0))


def _pack_decision_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rollout rows naming decision fields (`filter_penalty=...`) with those packed into `decision`."""
    if not any(k in DECISION_FIELDS for row in rows if isinstance(row, dict) for k in row):
        return rows
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not any(k in DECISION_FIELDS for k in row):
            out.append(row)
            continue
        named = {k: row[k] for k in row if k in DECISION_FIELDS}
        rest = {k: v for k, v in row.items() if k not in DECISION_FIELDS}
        if rest.get("decision") is not None:
            raise DataError(f"rollouts row {i}: gives both decision and {sorted(named)}; give one")
        packed = decision_array({k: [v] for k, v in named.items()}, 1, "rollouts", first_row=i).to_pylist()[0]
        out.append({**rest, "decision": packed})
    return out


def rows_to_arrow(table: str, rows: list[dict[str, Any]], fill: dict[str, Any]) -> pa.Table:
    """Rows (dicts) of `table` as an Arrow table with the store's types; `fill` supplies columns a
    row leaves out (e.g. run_id, step). Unknown keys and uncastable values raise DataError naming the
    table, row and key. Rollout rows may name their decisions as fields (`DECISION_FIELDS`): they are
    packed into `decision`."""
    schema = arrow_schema(table)
    if table == "rollouts":
        rows = _pack_decision_rows(rows)
    known = set(schema.names)
    jsons = json_columns(table)
    present: set[str] = set(fill)
    prepared = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{table} row {i}: expected a dict, got {type(row).__name__}")
        unknown = set(row) - known
        if unknown:
            raise DataError(f"{table} row {i}: unknown column(s) {sorted(unknown)}; "
                            f"columns are {schema.names}")
        out = {**fill, **row}
        for col in jsons:
            if col in out:
                out[col] = _jsonable(out[col], f"{table} row {i} column {col!r}")
        present.update(row)
        prepared.append(out)
    sub = pa.schema([schema.field(name) for name in schema.names if name in present])
    try:
        return pa.Table.from_pylist(prepared, schema=sub)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise DataError(f"{table}: a row does not fit the column types {sub}: {exc}") from exc


def rollouts_to_arrow(rollouts: pa.Table | list[dict[str, Any]], run_id: str, step: int,
                      table: str = "rollouts") -> pa.Table:
    """The step's rollouts (or the rows of another per-rollout `table`: turns, tool_calls) as an Arrow
    table with the store's column types. An Arrow input is cast column by column (no per-row Python);
    its missing run_id / step are filled in by the writer."""
    if not isinstance(rollouts, pa.Table):
        return rows_to_arrow(table, list(rollouts), {"run_id": run_id, "step": step})
    schema = arrow_schema(table)
    named = [name for name in rollouts.column_names if name in DECISION_FIELDS] if table == "rollouts" else []
    if named:  # decisions given as named columns: packed into the map
        if "decision" in rollouts.column_names:
            raise DataError(f"rollouts: gives both decision and {named}; give one")
        packed = decision_array({name: rollouts.column(name) for name in named}, rollouts.num_rows)
        rollouts = rollouts.drop_columns(named).append_column("decision", packed)
    unknown = set(rollouts.column_names) - set(schema.names)
    if unknown:
        raise DataError(f"{table}: unknown column(s) {sorted(unknown)}; columns are {schema.names}")
    columns, fields = [], []
    for f in schema:
        if f.name in rollouts.column_names:
            col = rollouts.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise DataError(f"{table} column {f.name!r}: cannot cast {col.type} to {f.type}: {exc}") from exc
            columns.append(col)
            fields.append(f)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def step_row(run_id: str, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The `steps` row for a step's metrics: named columns filled from their keys or aliases; every
    numeric metric also kept in the `metrics` map."""
    row: dict[str, Any] = {"run_id": run_id, "step": step, "created_at": now_utc()}
    used: set[str] = set()
    for column, keys in STEP_METRIC_KEYS.items():
        for key in keys:
            if key in metrics and metrics[key] is not None:
                row[column] = metrics[key]
                used.add(key)
                break
    numeric: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or isinstance(value, (int, float)):
            numeric[str(key)] = float(value)
        elif key not in used and value is not None:
            raise DataError(f"steps metric {key!r}: value {value!r} is not a number; only "
                            f"{sorted(TEXT_COLUMNS)} (or their aliases) may hold text or JSON")
    for column in TEXT_COLUMNS - {"allocator_params"}:
        if column in row and not isinstance(row[column], str):
            row[column] = str(row[column])
    row["metrics"] = list(numeric.items())
    for column in ("policy_version", "rollouts", "prompts", "tokens_generated", "budget"):
        if column in row:
            row[column] = int(row[column])
    return row


def check_columns(table: str, names: list[str]) -> None:
    """Raise DataError when `names` holds a column `table` does not have (a rollout's decision fields,
    `DECISION_FIELDS`, count as rollouts columns: readers return them)."""
    known = {name for name, _ in TABLES[table]} | (set(DECISION_FIELDS) if table == "rollouts" else set())
    unknown = set(names) - known
    if unknown:
        raise DataError(f"{table}: unknown column(s) {sorted(unknown)}")


_SUMMARISED = {"correct": pa.bool_(), "reward": pa.float32(), "length": pa.int32(), "entropy_mean": pa.float32()}


def prompt_summary(rollouts: pa.Table) -> pa.Table:
    """The `prompt_outcomes` rows of converted rollouts (`rollouts_to_arrow`): one per (run_id, step,
    prompt_id) present, with the count of rollouts, of stored verdicts (`judged`) and of correct ones,
    the reward's sum and the mean length and entropy (null where no row has a value). run_id and step
    are grouped on where the table has them (a batch of one step leaves them to the writer's constants);
    the same as `schema.PROMPT_OUTCOMES_SELECT` over the stored rows."""
    import pyarrow.compute as pc

    keys = [c for c in ("run_id", "step") if c in rollouts.column_names] + ["prompt_id"]
    n = rollouts.num_rows
    cols = {c: rollouts.column(c) if c in rollouts.column_names else pa.nulls(n, pa.string()) for c in keys}
    got = {c: rollouts.column(c) if c in rollouts.column_names else pa.nulls(n, t) for c, t in _SUMMARISED.items()}
    cols["one"] = pa.repeat(pa.scalar(1, pa.int32()), n)
    cols["judged"] = pc.cast(pc.is_valid(got["correct"]), pa.int32())
    cols["ok"] = pc.cast(pc.fill_null(got["correct"], False), pa.int32())
    cols["reward"] = pc.cast(got["reward"], pa.float64())
    cols["length"] = pc.cast(got["length"], pa.float64())
    cols["entropy_mean"] = pc.cast(got["entropy_mean"], pa.float64())
    out = pa.table(cols).group_by(keys, use_threads=False).aggregate([
        ("one", "sum"), ("judged", "sum"), ("ok", "sum"), ("reward", "sum"), ("length", "mean"),
        ("entropy_mean", "mean")])
    names = {"one_sum": "rollouts", "judged_sum": "judged", "ok_sum": "correct", "reward_sum": "reward_sum",
             "length_mean": "length_mean", "entropy_mean_mean": "entropy_mean"}
    out = out.rename_columns([names.get(c, c) for c in out.column_names])
    schema = arrow_schema("prompt_outcomes")
    return pa.Table.from_arrays([out.column(f.name).cast(f.type) for f in schema if f.name in out.column_names],
                                schema=pa.schema([f for f in schema if f.name in out.column_names]))
