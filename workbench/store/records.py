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

import pyarrow as pa

from workbench.errors import DataError
from workbench.metrics import STEP_COLUMNS, TEXT_COLUMNS
from workbench.store.schema import TABLES, arrow_schema, json_columns


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


def rows_to_arrow(table: str, rows: list[dict[str, Any]], fill: dict[str, Any]) -> pa.Table:
    """Rows (dicts) of `table` as an Arrow table with the store's types; `fill` supplies columns a
    row leaves out (e.g. run_id, step). Unknown keys and uncastable values raise DataError naming the
    table, row and key."""
    schema = arrow_schema(table)
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
    """Raise DataError when `names` holds a column `table` does not have."""
    unknown = set(names) - {name for name, _ in TABLES[table]}
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
