"""Copy a whole store to another place: a store directory to object storage (`s3://bucket/prefix`
with a SQLite catalog beside it), back to a directory, or between two folders or buckets.

    copy_store("store", "s3://team-bucket/runs", dst_catalog="team/catalog.sqlite")

A file-level copy, not a re-encoding: DuckLake keeps every data and delete file's path relative to
its table's path, the table's to its schema's and the schema's to the catalog's `data_path` (checked
for every row here; an absolute path is refused). So the copy is the source's data files as they are
(each one byte for byte, sizes checked against the catalog, whose footer sizes the readers use), plus
a copy of the SQLite catalog (SQLite's backup, consistent even while readers read) whose `data_path`
names the destination. Every snapshot, the inlined rows (they live in the catalog), the delete files,
row ids and time travel come across unchanged; files only scheduled for deletion are left behind. The
source's write lock is held for the whole copy, so no commit or compaction changes it meanwhile; a copy
is refused when that lock is held, when the destination holds anything, when the catalog on either side
is PostgreSQL, and when a bucket has no credentials. Credentials are read as the store reads them
(`objectstore.configure_s3`) and written nowhere: the catalog gets the data path only.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import StoreError
from workbench.store.connection import CATALOG_FILE, DATA_DIR, LOCK_FILE, Location, hide_password
from workbench.store.extensions import load_extension, quote_literal
from workbench.store.objectstore import catalog_url, configure_s3, is_object_url, object_url, redact, s3_settings

COPY_THREADS = 4
"""Files in flight at once (each one a GET/PUT or a local read/write)."""


def store_location(spec: str | os.PathLike[str], catalog: str | None = None) -> Location:
    """Where a store spec points, without creating anything: a directory (its `catalog.sqlite` and
    `data/`) or `s3://bucket/prefix` with `catalog` (else $WORKBENCH_CATALOG)."""
    if is_object_url(spec):
        return Location(catalog_url(catalog), object_url(spec), None)
    root = Path(spec).expanduser().absolute()
    return Location(f"sqlite:{root / CATALOG_FILE}", str(root / DATA_DIR) + os.sep, root)


def copy_store(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, src_catalog: str | None = None,
               dst_catalog: str | None = None, threads: int = COPY_THREADS,
               check_runs: Callable[[list[dict[str, Any]]], None] | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Copy the store at `src` to the empty place `dst` (see the module's docstring); returns the
    files, bytes, seconds and each table's rows, read through DuckLake on both sides (equal, else
    StoreError). `check_runs(rows)` sees the source's runs first and may refuse (a live run)."""
    t0 = time.perf_counter()
    source, target = store_location(src, src_catalog), store_location(dst, dst_catalog)
    for side, loc in (("source", source), ("destination", target)):
        if loc.kind != "sqlite":
            raise StoreError(f"store copy: the {side}'s catalog {hide_password(loc.catalog)} is PostgreSQL; "
                             "copy supports SQLite catalogs (a store directory, or --catalog FILE.sqlite)")
    src_file, dst_file = (Path(loc.catalog.split(":", 1)[1]) for loc in (source, target))
    if not src_file.is_file():
        raise StoreError(f"store copy: {source.describe()} is not a store (no catalog {src_file})")
    if src_file.absolute() == dst_file.absolute() or source.data_path == target.data_path:
        raise StoreError(f"store copy: the destination {target.describe()} is the source itself")
    con = _connection(source, target)
    try:
        _attach(con, "src", source)
        if check_runs is not None:
            check_runs(con.execute("SELECT * FROM src.runs").pl().to_dicts())
        _check_empty(con, target, dst_file)
        with _write_lock(source):  # held until the rows are compared: no commit lands in between
            out = _copy(con, source, target, src_file, dst_file, threads, progress)
            _attach(con, "dst", target)
            out["rows"] = _compare_rows(con)
    finally:
        con.close()
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _attach(con: duckdb.DuckDBPyConnection, alias: str, loc: Location) -> None:
    """The store at `loc` attached read-only as `alias` (a store directory's data is always its
    `data/`, wherever the catalog last saw it, as `connection.Lake` reads it)."""
    options = ["READ_ONLY"]
    if loc.root is not None:
        options += [f"DATA_PATH '{quote_literal(loc.data_path)}'", "OVERRIDE_DATA_PATH true"]
    try:
        con.execute(f"ATTACH 'ducklake:{quote_literal(loc.catalog)}' AS {alias} ({', '.join(options)})")
    except duckdb.Error as exc:
        raise StoreError(f"store copy: cannot open {loc.describe()}: {_line(exc)}") from exc


def _connection(*locations: Location) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that reaches the buckets of `locations` (one scoped secret each)."""
    con = duckdb.connect(":memory:")
    load_extension(con, "sqlite")
    load_extension(con, "ducklake")
    buckets = {loc.data_path.split("/")[2]: loc.data_path for loc in locations if loc.on_object_storage}
    try:
        settings = s3_settings() if buckets else None
        for i, (bucket, url) in enumerate(sorted(buckets.items())):
            configure_s3(con, url, settings, name=f"workbench_copy_{i}")
            if settings is not None and settings.key_id is None and not con.execute(
                    "SELECT name FROM which_secret(?, 's3')", [url]).fetchall():
                raise StoreError(f"store copy: no credentials for s3://{bucket}: set AWS_ACCESS_KEY_ID and "
                                 "AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for a server other than AWS), "
                                 "or create a DuckDB secret for the bucket (docs/object-storage.md)")
    except BaseException:
        con.close()
        raise
    return con


def _check_empty(con: duckdb.DuckDBPyConnection, target: Location, dst_file: Path) -> None:
    """Refuse a destination whose catalog exists or whose data path holds any file."""
    if dst_file.exists():
        raise StoreError(f"store copy: the destination's catalog {dst_file} already exists; "
                         "copy into an empty place")
    if target.root is not None:
        if target.root.exists() and (not target.root.is_dir() or any(target.root.iterdir())):
            raise StoreError(f"store copy: the destination {target.root} is not an empty directory")
        return
    try:
        found = con.execute("SELECT count(*) FROM glob(?)", [target.data_path + "**"]).fetchone()[0]
    except duckdb.Error as exc:
        raise StoreError(f"store copy: cannot list {target.data_path}: {_line(exc)}") from exc
    if found:
        raise StoreError(f"store copy: the destination {target.data_path} already holds {found} file(s); "
                         "copy into an empty prefix")


class _write_lock:
    """The source's write lock, taken without waiting (refused while a commit or compaction holds
    it) and held for the whole copy, so the source's files and catalog do not change meanwhile."""

    def __init__(self, source: Location) -> None:
        self.path = source.lock_dir / LOCK_FILE if source.lock_dir is not None else None
        self.fd: int | None = None

    def __enter__(self) -> None:
        if self.path is None:
            return
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"store copy: the source is being written (its write lock {self.path} is held); "
                             "copy it when no run or maintenance writes to it") from None
        except OSError as exc:
            raise StoreError(f"store copy: cannot take the source's write lock {self.path}: {exc.strerror}") from exc

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _copy(con: duckdb.DuckDBPyConnection, source: Location, target: Location, src_file: Path, dst_file: Path,
          threads: int, progress: Callable[[int, int], None] | None) -> dict[str, Any]:
    dst_file.parent.mkdir(parents=True, exist_ok=True)
    staging = dst_file.with_name(dst_file.name + ".copying")
    staging.unlink(missing_ok=True)
    _backup(src_file, staging)
    try:
        files = _data_files(staging, source)
        _copy_files(con, files, source.data_path, target, threads, progress)
        _check_sizes(con, files, source.data_path, target.data_path)
        cat = sqlite3.connect(staging)
        try:
            cat.execute("UPDATE ducklake_metadata SET value = ? WHERE key = 'data_path' AND scope IS NULL",
                        [target.data_path])
            cat.execute("DELETE FROM ducklake_files_scheduled_for_deletion")  # not copied: nothing names them
            cat.commit()
        finally:
            cat.close()
        os.replace(staging, dst_file)
    except BaseException as exc:
        staging.unlink(missing_ok=True)
        if target.root is not None:  # it was empty or absent: leave it so
            for child in target.root.iterdir() if target.root.is_dir() else []:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        elif isinstance(exc, StoreError):
            raise StoreError(f"{exc} (the files copied so far stay under {target.data_path}: remove them "
                             "before copying there again)") from exc
        raise
    return {"source": source.describe(), "destination": target.describe(), "files": len(files),
            "bytes": sum(size for _, size in files)}


def _backup(src_file: Path, dst_file: Path) -> None:
    """A consistent copy of the SQLite catalog (its WAL included) through SQLite's backup."""
    try:
        src = sqlite3.connect(f"file:{src_file}?mode=ro", uri=True, timeout=60)
        dst = sqlite3.connect(dst_file)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
    except sqlite3.Error as exc:
        raise StoreError(f"store copy: cannot copy the catalog {src_file}: {exc}") from exc


def _data_files(catalog: Path, source: Location) -> list[tuple[str, int]]:
    """Every data and delete file the catalog names (all snapshots), as (path under the data path,
    size in bytes); StoreError for a path that is not relative to the data path."""
    cat = sqlite3.connect(catalog)
    try:
        schemas = _paths(cat, "SELECT DISTINCT schema_id, path, path_is_relative FROM ducklake_schema", "schema")
        tables = {}
        for table_id, schema_id, path, rel in cat.execute(
                "SELECT DISTINCT table_id, schema_id, path, path_is_relative FROM ducklake_table"):
            _relative(rel, f"table {table_id}'s path {path}")
            if tables.get(table_id, (schema_id, path)) != (schema_id, path):
                raise StoreError(f"store copy: table {table_id} has two paths in the catalog; cannot copy")
            tables[table_id] = (schema_id, path)
        out = []
        for kind in ("data", "delete"):
            for table_id, path, rel, size in cat.execute(
                    f"SELECT table_id, path, path_is_relative, file_size_bytes FROM ducklake_{kind}_file"):
                _relative(rel, f"{kind} file {path}")
                schema_id, table_path = tables[table_id]
                out.append((schemas[schema_id] + table_path + path, int(size)))
    except sqlite3.Error as exc:
        raise StoreError(f"store copy: {source.describe()} is not a DuckLake catalog: {exc}") from exc
    finally:
        cat.close()
    return sorted(set(out))


def _paths(cat: sqlite3.Connection, query: str, what: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for key, path, rel in cat.execute(query):
        _relative(rel, f"{what} {key}'s path {path}")
        out[key] = path
    return out


def _relative(flag: object, what: str) -> None:
    if not flag:
        raise StoreError(f"store copy: the catalog's {what} is absolute (not under the data path); cannot copy")


def _copy_files(con: duckdb.DuckDBPyConnection, files: list[tuple[str, int]], src_root: str, target: Location,
                threads: int, progress: Callable[[int, int], None] | None) -> None:
    """Each file byte for byte (DuckDB's blob reader and writer: local disk or the bucket, either side)."""
    if target.root is not None:
        for folder in sorted({str(Path(target.data_path, rel).parent) for rel, _ in files}):
            Path(folder).mkdir(parents=True, exist_ok=True)
    done, lock = [0], threading.Lock()
    local = threading.local()

    def one(rel: str) -> None:
        cur = getattr(local, "cur", None)
        if cur is None:
            cur = local.cur = con.cursor()
        src, dst = src_root + rel, target.data_path + rel
        try:
            cur.execute(f"COPY (SELECT content FROM read_blob('{quote_literal(src)}')) "
                        f"TO '{quote_literal(dst)}' (FORMAT blob)")
        except duckdb.Error as exc:
            raise StoreError(f"store copy: copying {src} to {dst} failed: {_line(exc)}") from exc
        with lock:
            done[0] += 1
            if progress is not None:
                progress(done[0], len(files))

    with ThreadPoolExecutor(max(1, threads)) as pool:
        list(pool.map(one, [rel for rel, _ in files]))


def _check_sizes(con: duckdb.DuckDBPyConnection, files: list[tuple[str, int]], src_root: str, dst_root: str) -> None:
    """Every copied file has the size the catalog records (readers seek its footer by that size)."""
    if not files:
        return
    names = [dst_root + rel for rel, _ in files]
    try:
        sizes = dict(con.execute("SELECT filename, size FROM read_blob(?)", [names]).fetchall())
    except duckdb.Error as exc:
        raise StoreError(f"store copy: cannot read back the copied files: {_line(exc)}") from exc
    for (rel, size), name in zip(files, names):
        if sizes.get(name) != size:
            raise StoreError(f"store copy: {name} has {sizes.get(name)} bytes, the catalog says {size} "
                             f"(source {src_root + rel})")


def _compare_rows(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Each table's row count in `src` and `dst`; StoreError naming the tables that differ."""
    from workbench.store.schema import TABLES

    counts = {t: [int(con.execute(f"SELECT count(*) FROM {side}.{t}").fetchone()[0]) for side in ("src", "dst")]
              for t in TABLES}
    differ = {t: tuple(n) for t, n in counts.items() if n[0] != n[1]}
    if differ:
        raise StoreError(f"store copy: rows differ after the copy (source, copy): {differ}")
    return {t: n[0] for t, n in counts.items()}


def _line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return redact(" ".join(lines[:2])) if lines else type(exc).__name__
