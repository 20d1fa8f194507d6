"""Commands of the store: `workbench query`, `workbench store info|compact|export|copy` (see
workbench/commands/__init__.py). Thin: parse, call one workbench.store function, print."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path


class QueryFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class ExportFormat(str, Enum):
    duckdb = "duckdb"
    parquet = "parquet"


def _print_frame(frame, fmt: QueryFormat, max_rows: int) -> None:  # noqa: ANN001 (polars, lazily imported)
    import polars as pl

    if fmt is QueryFormat.json:
        sys.stdout.write(frame.write_json() + "\n")
    elif fmt is QueryFormat.csv:
        # CSV has no lists or maps: nested values are written as JSON text.
        nested = [c for c, t in frame.schema.items() if t.is_nested()]
        flat = frame.with_columns([pl.struct(c).struct.json_encode().str.slice(len(c) + 4).str.head(-1).alias(c)
                                   for c in nested])
        sys.stdout.write(flat.write_csv())
    else:
        with pl.Config(tbl_rows=max_rows, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
            sys.stdout.write(f"{frame}\n")


def query(
    sql: Annotated[str, typer.Argument(help="One read-only SQL statement over the store's tables "
                                            "(runs, steps, rollouts, ...; see docs/store.md).")],
    store: StoreOpt = None,
    fmt: Annotated[QueryFormat, typer.Option("--format", help="Output format.")] = QueryFormat.table,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows shown by the table format.")] = 50,
) -> None:
    """Run a read-only SQL query against the store; statements that write are refused."""
    from workbench.store import open_store

    with open_store(store_path(store), read_only=True) as s:
        frame = s.sql(sql)
    _print_frame(frame, fmt, max_rows)


def info_cmd(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Sizes, file counts and row counts per table, schema version, snapshots."""
    from workbench.store import open_store
    from workbench.store.maintenance import info

    with open_store(store_path(store), read_only=True) as s:
        out = info(s)
    if as_json:
        print_json(out)
        return
    typer.echo(f"store {out['store']}  schema v{out['schema_version']}  snapshots {out['snapshots']}  "
               f"last commit {out['last_commit']}")
    typer.echo(f"{'table':<14}{'rows':>12}{'files':>8}{'MB':>10}")
    for name, t in out["tables"].items():
        typer.echo(f"{name:<14}{t['rows']:>12,}{t['files']:>8}{t['bytes'] / 1e6:>10.2f}")
    if "disk_bytes" in out:
        typer.echo(f"on disk: {out['disk_bytes'] / 1e6:.2f} MB (catalog {out['catalog_bytes'] / 1e6:.2f} MB)")


def compact_cmd(
    store: StoreOpt = None,
    older_than_s: Annotated[float, typer.Option("--older-than-s", help="Expire snapshots (and delete "
                                                "unreferenced files) older than this many seconds.")] = 3600.0,
    as_json: JsonOpt = False,
) -> None:
    """Merge small files, flush inlined rows, expire old snapshots; query results stay identical."""
    from workbench.store import open_store
    from workbench.store.maintenance import compact

    with open_store(store_path(store), create=False) as s:
        out = compact(s, older_than_s=older_than_s)
    if as_json:
        print_json(out)
    else:
        b, a = out["before"], out["after"]
        typer.echo(f"compacted {out['store']} in {out['seconds']:.1f} s: files {b['files']} -> {a['files']}, "
                   f"{b['bytes'] / 1e6:.2f} -> {a['bytes'] / 1e6:.2f} MB, snapshots {b['snapshots']} -> {a['snapshots']}")


def export_cmd(
    to: Annotated[Path, typer.Option("--to", help="Target: a .duckdb file, or a directory for Parquet.")],
    run: Annotated[str | None, typer.Option("--run", help="Export only this run (default: everything).")] = None,
    fmt: Annotated[ExportFormat, typer.Option("--format", help="duckdb (one file) or parquet (one file per table).")] = ExportFormat.duckdb,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing target.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Export one run or the whole store to a single .duckdb file or to Parquet files."""
    from workbench.store import open_store
    from workbench.store.maintenance import export

    with open_store(store_path(store), read_only=True) as s:
        out = export(s, to, run_id=run, fmt=fmt.value, overwrite=overwrite)
    if as_json:
        print_json(out)
    else:
        rows = ", ".join(f"{k} {v:,}" for k, v in out["rows"].items() if v)
        typer.echo(f"exported {'run ' + run if run else 'the store'} to {out['target']} ({out['format']}): {rows}")


def copy_cmd(
    src: Annotated[str, typer.Argument(help="The store to copy: a directory, or s3://bucket/prefix with its catalog "
                                       "from `workbench --catalog ...` or $WORKBENCH_CATALOG.")],
    dst: Annotated[str, typer.Argument(help="Where to: an empty (or new) directory, or an empty s3://bucket/prefix.")],
    catalog: Annotated[Optional[str], typer.Option("--catalog", help="The destination's catalog when DST is "
                                                   "s3://...: a .sqlite file to create (default: "
                                                   "$WORKBENCH_CATALOG).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy a whole store, every snapshot of it, to an empty place: a store directory to a bucket (for
    readers on other machines) or back. Its data files are copied as they are, with a copy of the
    catalog that names the new place; refused while the store is being written."""
    from workbench.store.copy import copy_store

    step = [0]

    def progress(done: int, total: int) -> None:
        if done * 10 // total > step[0] or done == total:
            step[0] = done * 10 // total
            typer.echo(f"  {done}/{total} files", err=True)

    out = copy_store(src, dst, dst_catalog=catalog, check_runs=_refuse_live_runs, progress=progress)
    if as_json:
        print_json(out)
    else:
        typer.echo(f"copied {out['source']} to {out['destination']}: {out['files']} files, "
                   f"{out['bytes'] / 1e6:.1f} MB in {out['seconds']:.1f} s; rows equal in every table "
                   f"(rollouts {out['rows']['rollouts']:,})")


def _refuse_live_runs(runs: list[dict]) -> None:
    """One line when a run of the source is alive (a live status and a fresh heartbeat): the copy
    holds the store's write lock and would stall its commits."""
    from workbench.control.liveness import LIVE_STATUSES, STALE_S, heartbeat_age_s
    from workbench.errors import StoreError

    for run in runs:
        age = heartbeat_age_s(run)
        if run.get("status") in LIVE_STATUSES and age is not None and age < STALE_S:
            raise StoreError(f"store copy: run {run['run_id']} is {run['status']} (heartbeat {age:.0f} s ago); "
                             "copy the store when it has stopped")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the top-level app."""
    store_app = typer.Typer(help="The run store (DuckLake: SQLite catalog + Parquet files): sizes, "
                                 "compaction, export.", no_args_is_help=True)
    app.add_typer(store_app, name="store")
    app.command()(query)
    store_app.command("info")(info_cmd)
    store_app.command("compact")(compact_cmd)
    store_app.command("export")(export_cmd)
    store_app.command("copy")(copy_cmd)
