"""`Store`: the engine's writer and everyone's reader over one DuckLake, and `open_store`."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from workbench.errors import StoreError
from workbench.store import schema
from workbench.store.connection import Lake, Location, hide_password, local_location
from workbench.store.objectstore import catalog_url, is_object_url, object_url
from workbench.store.alerts import AlertsMixin
from workbench.store.episode_reader import EpisodeReaderMixin
from workbench.store.handle import StoreHandle
from workbench.store.prompt_reader import PromptReaderMixin
from workbench.store.reader import ReaderMixin
from workbench.store.writer import WriterMixin

# Statement types `Store.sql` runs; anything else (INSERT, COPY, ATTACH, SET, CALL, ...) is refused.
READ_STATEMENTS = {"SELECT", "EXPLAIN"}

# Steps written through one Store between two rounds of file merging (`open_store(upkeep_every=...)`).
UPKEEP_EVERY = 100

# Parquet settings of the store's data files (see docs/store.md and dev/LOG.md for the measurements).
# Small row groups and files of ~32 MB after compaction keep a filtered page of rollouts cheap: the
# catalog prunes files by step, Parquet statistics prune row groups, so a page decompresses a few
# thousand rows instead of a 122,880-row group (6-9 s per page on a 1M-rollout store compacted with
# DuckDB's defaults, see dev/LOG.md).
# Parquet 2 encodings (BYTE_STREAM_SPLIT for the entropy floats, DELTA for token ids, strings and the
# row ids DuckLake keeps in merged files): 4.6% fewer bytes than Parquet 1 with the same zstd level, and
# 13% faster to write, on a merged file of the 10M-rollout bench store (dev/LOG.md, 2026-12-01).
PARQUET_OPTIONS = {"parquet_compression": "zstd", "parquet_compression_level": "1", "parquet_version": "2",
                   "parquet_row_group_size": "2048", "target_file_size": "32MB"}


class Store(WriterMixin, ReaderMixin, PromptReaderMixin, EpisodeReaderMixin, AlertsMixin):
    """A workbench store: DuckLake catalog + Parquet files, one connection, safe to share between
    threads (each call takes its own cursor). Use `open_store` to get one."""

    def __init__(self, location: Location, *, read_only: bool = False, threads: int | None = None,
                 upkeep_every: int = 0) -> None:
        self.location = location
        self.handle = StoreHandle.of_location(location)
        """Where this store is (`workbench.store.handle`): its spec, catalog and local folder; `StoreHandle.open`
        sets the handle it opened."""
        self.read_only = read_only
        self.threads = threads
        self.upkeep_every = upkeep_every
        self._steps_written = 0
        self._upkeep_lock = threading.Lock()
        self._upkeep_thread: threading.Thread | None = None
        self._upkeep_due = False
        self.longest_upkeep_hold_s: float | None = None
        """Longest single hold of the read lock by this Store's upkeep so far (seconds a read waited at most)."""
        self.upkeep_held_s = 0.0
        """Seconds this Store's upkeep has held the read lock, all statements summed."""
        self._upkeep_due_at = 0.0
        self._upkeep_stop = threading.Event()
        self._lake = Lake(location, read_only=read_only, threads=threads)
        self._ro: Lake | None = None
        self._last_step: dict[str, int] = {}
        self._ro_lock = threading.Lock()
        try:
            self.schema_version = _ensure_schema(self._lake)
        except BaseException:
            self._lake.close()
            raise

    def close(self) -> None:
        """Close the store's connections (idempotent), after a running round of upkeep ends (a round
        still waiting for its turn behind another writer's is dropped: the next round merges it)."""
        self._upkeep_stop.set()
        self.wait_upkeep()
        self._lake.close()
        if self._ro is not None:
            self._ro.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.location.describe()!r}{', read_only' if self.read_only else ''})"

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Run one read-only SQL statement (SELECT, WITH, DESCRIBE, SHOW, EXPLAIN, ...) against the
        store's tables and return a DataFrame. Statements that write are refused, and the query runs on
        a read-only attachment of the store locked down by `console.py` (no files outside the store,
        no extensions, no settings), so nothing a SELECT calls can write or reach out either."""
        from workbench.store.console import run_console_sql

        return run_console_sql(self, query, params)


def check_read_only_sql(query: str) -> None:
    """Raise StoreError unless `query` is exactly one statement the SQL console may run (one line
    naming what is refused; see `workbench/store/console.py`)."""
    from workbench.store.console import check_console_sql

    check_console_sql(query)


def open_store(path: str | os.PathLike[str] | None = None, *, catalog: str | None = None,
               data_path: str | None = None, read_only: bool = False, create: bool = True,
               threads: int | None = None, upkeep_every: int | None = None) -> Store:
    """Open (and create, unless `read_only` or not `create`) a store.

    `upkeep_every`: after every this many steps written through this Store, merge small files (flush
    inlined rows, merge adjacent files, drop what no snapshot of the last hour needs; see
    `maintenance.upkeep`). Each step adds one file per table; left alone, a 1M-rollout store took
    5-8x longer per filtered query (dev/LOG.md). 0 turns it off. Default: `UPKEEP_EVERY` for a store
    directory and for an s3:// store with a SQLite catalog (its lock files sit beside the catalog); 0
    for a shared catalog, whose readers on other machines cannot take the read lock that keeps them
    away from maintenance (see `connection.py`): run `compact` there when none read.

    `threads` caps DuckDB's worker threads for this store's connections (default: one per core). The
    engine opens its store with `threads=1`: on a small machine DuckDB's ingest threads fight torch's
    for the cores, and a default organism step took 0.98 s with them against 0.86 s with one.

    - `open_store("store")`: a directory holding `catalog.sqlite` (the DuckLake catalog) and `data/`.
    - `open_store(catalog="postgres:dbname=x host=...", data_path="dir or URL")`: a shared catalog in
      PostgreSQL; `catalog="sqlite:/file"` with any data path works the same way.
    - `open_store("s3://bucket/prefix", catalog=...)`: data in object storage, the catalog from
      `catalog` or $WORKBENCH_CATALOG (see `objectstore.py` and docs/object-storage.md).
    """
    if path is not None and is_object_url(path):
        data_path, path = object_url(path), None
        catalog = catalog_url(catalog)
    if catalog is not None:
        if path is not None:
            raise StoreError("open_store: give a store directory or catalog + data_path, not both")
        if not data_path:
            raise StoreError(f"open_store: catalog {hide_password(catalog)!r} needs a data_path")
        kind = catalog.split(":", 1)[0]
        if kind not in ("sqlite", "postgres"):
            raise StoreError(f"catalog {hide_password(catalog)!r}: must start with 'sqlite:' or 'postgres:'")
        if is_object_url(data_path):
            data_path = object_url(data_path)
        if not data_path.endswith(("/", os.sep)):
            data_path += "/"
        location = Location(catalog, data_path, None)
        if location.lock_dir is not None and not read_only:
            location.lock_dir.mkdir(parents=True, exist_ok=True)
    else:
        if path is None:
            raise StoreError("open_store: a store directory (or catalog + data_path) is required")
        location = local_location(path, create=create and not read_only)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise StoreError(f"open_store: threads must be an integer >= 1, got {threads!r}")
    if upkeep_every is None:
        upkeep_every = UPKEEP_EVERY if location.lock_dir is not None else 0
    if isinstance(upkeep_every, bool) or not isinstance(upkeep_every, int) or upkeep_every < 0:
        raise StoreError(f"open_store: upkeep_every must be an integer >= 0, got {upkeep_every!r}")
    return Store(location, read_only=read_only, threads=threads, upkeep_every=upkeep_every)


def _ensure_schema(lake: Lake) -> int:
    """Create the tables of a new store, migrate an older one, refuse a newer one; the version."""
    found = _schema_version(lake)
    if found == schema.SCHEMA_VERSION:
        return found
    if found is not None and found > schema.SCHEMA_VERSION:
        raise StoreError(f"store {lake.location.describe()} has schema version {found}, newer than this "
                         f"workbench understands ({schema.SCHEMA_VERSION}); upgrade workbench to open it")
    if lake.read_only:
        if found is None:
            raise StoreError(f"store {lake.location.describe()} holds no workbench tables (not created yet?)")
        raise StoreError(f"store {lake.location.describe()} has schema version {found} and needs a "
                         f"migration to {schema.SCHEMA_VERSION}; open it once read-write")
    if found is None:
        lake.write(_create, "create the store's tables")
        lake.write(_configure, "configure the store")
    else:
        try:
            path = schema.migration_path(found)
        except KeyError as exc:
            raise StoreError(f"store {lake.location.describe()}: no migration from schema version "
                             f"{exc.args[0]}") from None
        for version, _description, statements in path:
            lake.write(lambda cur, v=version, s=statements: _migrate(cur, v, s),
                       f"migrate schema {version} -> {version + 1}")
        lake.write(_inline_options, "inline the small tables a migration added")
    return _schema_version(lake) or schema.SCHEMA_VERSION


def _schema_version(lake: Lake) -> int | None:
    tables = lake.read("SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'")
    if "meta" not in tables["table_name"].to_list():
        return None
    frame = lake.read("SELECT value FROM meta WHERE key = 'schema_version'")
    if frame.height == 0:
        return None
    value = frame["value"][0]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise StoreError(f"store {lake.location.describe()}: meta.schema_version is {value!r}, "
                         "not an integer") from None


def _create(cur: duckdb.DuckDBPyConnection) -> None:
    cur.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake' AND table_name = 'meta'")
    if cur.fetchone()[0]:
        cur.execute("SELECT count(*) FROM meta WHERE key = 'schema_version'")
        if cur.fetchone()[0]:
            return  # another process created it while we waited for the lock
    for statement in schema.create_statements():
        cur.execute(statement)


def _configure(cur: duckdb.DuckDBPyConnection) -> None:
    """Set the store's Parquet and inlining options, then record the schema version (the marker that
    creation finished: a crash before it makes the next open redo both steps)."""
    cur.execute("SELECT count(*) FROM meta WHERE key = 'schema_version'")
    if cur.fetchone()[0]:
        return
    for key, value in PARQUET_OPTIONS.items():
        cur.execute(f"CALL lake.set_option('{key}', '{value}')")
    _inline_options(cur)
    for statement in schema.layout_statements():
        cur.execute(statement)
    cur.execute("INSERT INTO meta VALUES ('schema_version', ?), ('created_by', 'workbench')",
                [str(schema.SCHEMA_VERSION)])


def _inline_options(cur: duckdb.DuckDBPyConnection) -> None:
    """Keep the small tables' rows in the catalog (`INLINE_ROW_LIMIT`); after migrations too, since
    DuckLake sets no option on a table created in the same transaction (a migration's new table)."""
    for table, limit in schema.INLINE_ROW_LIMIT.items():
        cur.execute(f"CALL lake.set_option('data_inlining_row_limit', {int(limit)}, table_name => '{table}')")


def _migrate(cur: duckdb.DuckDBPyConnection, version: int, statements: list[str]) -> None:
    cur.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    if int(cur.fetchone()[0]) != version:
        return  # another process migrated it while we waited for the lock
    for statement in statements:
        cur.execute(statement)
    cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version + 1)])


def default_store_path() -> Path:
    """The store directory when none is given: $WORKBENCH_STORE, else ./store (the CLI's, the
    dashboard's and the experiments' default). An `s3://` URL there comes back as the URL string
    (a Path would fold it to `s3:/bucket/prefix`, which `open_store` also reads as the URL)."""
    found = os.environ.get("WORKBENCH_STORE") or "store"
    if is_object_url(found):
        return re.sub(r"^s3:/+", "s3://", found, flags=re.I)  # type: ignore[return-value]
    return Path(found)
