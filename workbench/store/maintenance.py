"""Store upkeep: `info` (sizes and row counts per table), `compact` (flush inlined rows, merge small
files, expire old snapshots, delete unreferenced files; query results unchanged) and `export` (one run
or the whole store to a single `.duckdb` file or to Parquet files)."""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from workbench.errors import StoreError
from workbench.store.connection import ALIAS
from workbench.store.extensions import quote_literal
from workbench.store.schema import TABLES
from workbench.store.store import Store

EXPORT_FORMATS = ("duckdb", "parquet")


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def info(store: Store) -> dict[str, Any]:
    """Location, schema version, snapshot count, and per table: rows, data files and bytes."""
    lake = store._lake
    files = {r["table_name"]: r for r in lake.read(f"SELECT * FROM ducklake_table_info('{ALIAS}')").to_dicts()}
    tables = {}
    for table in TABLES:
        rows = int(lake.read(f"SELECT count(*) AS n FROM {table}")["n"][0])
        f = files.get(table, {})
        tables[table] = {"rows": rows, "files": int(f.get("file_count") or 0),
                         "bytes": int(f.get("file_size_bytes") or 0),
                         "delete_files": int(f.get("delete_file_count") or 0)}
    snapshots = lake.read(f"SELECT count(*) AS n, max(snapshot_time) AS last FROM ducklake_snapshots('{ALIAS}')")
    out: dict[str, Any] = {
        "store": store.location.describe(), "catalog": store.location.catalog,
        "data_path": store.location.data_path, "schema_version": store.schema_version,
        "snapshots": int(snapshots["n"][0]), "last_commit": str(snapshots["last"][0]), "tables": tables,
        "data_bytes": sum(t["bytes"] for t in tables.values()),
    }
    root = store.location.root
    if root is not None:
        out["catalog_bytes"] = sum(_file_size(root / n) for n in ("catalog.sqlite", "catalog.sqlite-wal"))
        out["disk_bytes"] = _dir_bytes(root)
    return out


def _file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


UPKEEP_MERGE_BELOW = 16 * 2**20
"""The writer's upkeep merges only files smaller than this (bytes): a step's file (~0.7 MB of
rollouts) is merged, a group commit's (16,384 rollouts, ~23 MB) is big enough and left alone, so
upkeep does not rewrite what group commit already wrote well. `compact` merges up to the 32 MB target."""


def _upkeep(store: Store, older_than_s: float, what: str, *, merge_below: int | None = None,
            pause: bool = False) -> float:
    """Run the maintenance statements, each table's flush and merge as its own short hold of the
    read lock, so readers (and the writer's commits) slip in between them instead of waiting for
    the whole round. `merge_below`: merge only files smaller than this many bytes (default: the
    store's target file size); `pause`: leave the lock free between statements (READER_PAUSE_S).
    Returns the longest single hold in seconds (what a reader may wait)."""
    interval = f"INTERVAL '{float(older_than_s)} seconds'"
    size = "" if merge_below is None else f", max_file_size => {int(merge_below)}"
    statements = []
    for table in TABLES:
        statements.append(f"CALL ducklake_flush_inlined_data('{ALIAS}', table_name => '{table}')")
        statements.append(f"CALL ducklake_merge_adjacent_files('{ALIAS}', '{table}'{size})")
    statements += [
        f"CALL ducklake_expire_snapshots('{ALIAS}', older_than => now() - {interval})",
        f"CALL ducklake_cleanup_old_files('{ALIAS}', older_than => now() - {interval})",
    ]
    if store.location.lock_dir is not None:  # writers queue on its lock: no commit is half-way through
        # (a store directory, or an s3:// store with a SQLite catalog: files a killed writer left behind)
        statements.append(f"CALL ducklake_delete_orphaned_files('{ALIAS}', older_than => now() - {interval})")
    longest = held = 0.0
    for i, statement in enumerate(statements):
        if i and pause:  # let the reads that queued behind the last statement through (see upkeep)
            time.sleep(max(READER_PAUSE_S, held))
        with store._lake.maintaining(what):  # readers of this store wait: see connection.py
            t = time.perf_counter()
            store._lake.write(lambda cur, s=statement: cur.execute(s).arrow(), what, transaction=False)
            held = time.perf_counter() - t
            longest = max(longest, held)
            store.upkeep_held_s += held
    return longest


UPKEEP_DUTY = 0.2
"""The most of the wall time the writers' upkeep rounds may keep readers out of a store, together:
after a round that held the read lock for H seconds (its statements summed), the next round of any
writer of the store starts no sooner than H * (1 / UPKEEP_DUTY - 1) seconds after it ended."""
READER_PAUSE_S = 0.05
"""Between two statements of a writer's upkeep round, the lock is left free at least this long (and
at least as long as the statement before held it): a waiting read is woken when the lock is freed,
but a round that took it again at once would win before the read is scheduled, so reads would wait
for the whole round instead of one statement."""
UPKEEP_STAMP = ".upkeep"
"""In the store's lock folder: the last round's start, end and read-lock seconds (one line), and the
lock that keeps two writers' rounds from running at once."""


def upkeep(store: Store, *, older_than_s: float = 3600.0, due_at: float | None = None,
           stop: threading.Event | None = None) -> float | None:
    """`compact` without its before/after inventory: what the writer runs every `upkeep_every`
    steps, so a long run's store stays a few files per table (readers' scans open every file of a
    table: at 1M rollouts in one file per step, filtered queries took 5-8x longer). Returns seconds.

    A round is store-wide (every table's inlined rows and small files, whoever wrote them), so the
    writers of a store with a lock folder take turns: one round at a time, spaced by UPKEEP_DUTY,
    and a round due at `due_at` (wall clock) that another writer's round started after is covered
    by it: None, nothing run. Three engines committing 10 steps/s each, every one running its own
    round every 100 steps, kept the store in maintenance most of the time and every dashboard read
    waiting on it (dev/LOG.md, 2026-12-03). `stop` set while waiting for a turn: None."""
    folder = store.location.lock_dir
    if folder is None or due_at is None:
        return _round(store, older_than_s)
    path = folder / UPKEEP_STAMP
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another writer's round: wait for it to end
            start, end, held = _read_stamp(fd)
            if start >= due_at:
                return None  # a round that began after ours was due merged what we wrote
            wait = end + held * (1.0 / UPKEEP_DUTY - 1.0) - time.time()
            if wait <= 0:
                _write_stamp(fd, time.time(), time.time(), 0.0)  # started: later-due writers wait for it
                before, t0 = store.upkeep_held_s, time.time()
                try:
                    return _round(store, older_than_s)
                finally:
                    _write_stamp(fd, t0, time.time(), store.upkeep_held_s - before)
        finally:
            os.close(fd)  # releases the lock
        if stop is not None and stop.wait(min(wait, 30.0)):
            return None
        if stop is None:
            time.sleep(min(wait, 30.0))


def _round(store: Store, older_than_s: float) -> float:
    t = time.perf_counter()
    hold = _upkeep(store, older_than_s, "merge the store's small files", merge_below=UPKEEP_MERGE_BELOW,
                   pause=True)
    store.longest_upkeep_hold_s = max(hold, store.longest_upkeep_hold_s or 0.0)
    return time.perf_counter() - t


def _read_stamp(fd: int) -> tuple[float, float, float]:
    """(start, end, held seconds) of the store's last upkeep round; zeros when none or unreadable."""
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        start, end, held = (float(x) for x in os.read(fd, 200).split()[:3])
    except ValueError:
        return 0.0, 0.0, 0.0
    return start, end, held


def _write_stamp(fd: int, start: float, end: float, held: float) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    # exact (repr round-trips a float): a stamp rounded to milliseconds could read as starting before a round
    # that was due within the same millisecond, which then ran again instead of being covered
    os.write(fd, f"{start!r} {end!r} {held!r}\n".encode())


def compact(store: Store, *, older_than_s: float = 3600.0) -> dict[str, Any]:
    """Flush rows kept inline in the catalog to Parquet, merge small adjacent files, expire snapshots
    older than `older_than_s` seconds and delete the files no snapshot references any more (only those
    older than `older_than_s`, so a reader on a recent snapshot or a writer mid-transaction keeps its
    files). Returns file counts and bytes before and after."""
    before = info(store)
    t = time.perf_counter()
    _upkeep(store, older_than_s, "compact the store")
    after = info(store)

    def totals(i: dict[str, Any]) -> dict[str, int]:
        return {"files": sum(t["files"] + t["delete_files"] for t in i["tables"].values()),
                "bytes": i.get("disk_bytes", i["data_bytes"]), "snapshots": i["snapshots"]}

    return {"store": before["store"], "seconds": time.perf_counter() - t,
            "before": totals(before), "after": totals(after)}


def export(store: Store, out: str | os.PathLike[str], *, run_id: str | None = None,
           fmt: str = "duckdb", overwrite: bool = False) -> dict[str, Any]:
    """Export the whole store, or one run, to a single DuckDB file (`fmt="duckdb"`) or to a directory
    of Parquet files, one per table (`fmt="parquet"`). Returns the rows written per table."""
    if fmt not in EXPORT_FORMATS:
        raise StoreError(f"export format {fmt!r}: must be one of {EXPORT_FORMATS}")
    target = Path(out).expanduser().absolute()
    if run_id is not None:
        store.run(run_id)  # StoreError naming the run if it does not exist
    if target.exists() and not overwrite:
        raise StoreError(f"export target {target} already exists (pass overwrite to replace it)")
    if fmt == "duckdb" and target.exists():
        target.unlink()
    made_dir = fmt == "parquet" and not target.exists()
    if fmt == "parquet":
        target.mkdir(parents=True, exist_ok=True)
    elif not target.parent.is_dir():
        raise StoreError(f"export target directory {target.parent} does not exist")
    counts: dict[str, int] = {}
    written: list[Path] = []
    failure: StoreError | None = None
    with store._lake.reading(), store._lake.cursor() as cur:
        try:
            if fmt == "duckdb":
                written.append(target)
                cur.execute(f"ATTACH '{quote_literal(str(target))}' AS export_db")
            for table in TABLES:
                where, params = _run_filter(table, run_id)
                select = f"SELECT * FROM {ALIAS}.{table}{where}"
                if fmt == "duckdb":
                    cur.execute(f"CREATE TABLE export_db.{table} AS {select}", params)
                else:
                    written.append(target / f"{table}.parquet")
                    path = quote_literal(str(written[-1]))
                    cur.execute(f"COPY ({select}) TO '{path}' (FORMAT parquet, COMPRESSION zstd)", params)
                cur.execute(f"SELECT count(*) FROM {ALIAS}.{table}{where}", params)
                counts[table] = int(cur.fetchone()[0])
        except Exception as exc:
            failure = StoreError(f"export of store {store.location.describe()} to {target} failed: {exc}")
            failure.__cause__ = exc
        finally:
            if fmt == "duckdb":
                try:
                    cur.execute("DETACH export_db")
                except Exception:
                    pass
    if failure is not None:
        # leave nothing half-written behind: what this export created goes, what was there stays
        for path in written + [target.with_name(target.name + ".wal")] * (fmt == "duckdb"):
            path.unlink(missing_ok=True)
        if made_dir:
            shutil.rmtree(target, ignore_errors=True)
        raise failure
    return {"target": str(target), "format": fmt, "run_id": run_id, "rows": counts}


def _run_filter(table: str, run_id: str | None) -> tuple[str, list[Any]]:
    if run_id is None or table == "meta":
        return "", []
    return " WHERE run_id = ?", [run_id]
