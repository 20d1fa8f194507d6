"""One DuckDB connection with the DuckLake attached, and the two ways through it: reads (a cursor per
call, so threads can share a store) and write transactions (one at a time per store, retried when a
commit loses the catalog lock).

Local stores keep the catalog in SQLite in WAL mode (readers never block the writer) and serialise
writers across processes with an advisory lock file, so concurrent writers queue instead of failing
their commits and rewriting Parquet files. A commit that still loses the catalog (another machine on
a shared catalog, a PostgreSQL serialisation failure) is retried with exponential backoff and jitter;
the whole transaction is replayed, so no row is lost.

File maintenance (flushing inlined rows, merging files) is not safe for DuckLake readers running at
the same moment: a reader whose snapshot predates the maintenance commit, but which lists its files
after it, can see a table's rows vanish (measured: whole tables empty for one read). So maintenance
runs under an exclusive lock that every read of a local store takes shared; it takes the lock in a
gap between reads when one comes within MAINTENANCE_POLITE_S, else it closes a gate file (writer
preference), so that readers polling without pause cannot starve it.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import polars as pl

from workbench.errors import StoreError, StoreUnreachable
from workbench.store.extensions import quote_literal, load_extension
from workbench.store.objectstore import configure_s3, is_object_url, redact, s3_threads

T = TypeVar("T")

CATALOG_FILE = "catalog.sqlite"
DATA_DIR = "data"
LOCK_FILE = ".write.lock"
READ_LOCK_FILE = ".read.lock"  # shared by reads, exclusive during maintenance
GATE_FILE = ".read.gate"  # held exclusive by maintenance waiting for readers: new reads queue behind it
ALIAS = "lake"
MAINTENANCE_POLITE_S = 1.0
"""How long maintenance tries to take the read lock in a gap between reads before it closes the gate
(new reads then queue behind it until it has run): while reads leave gaps, none of them waits for
more than the maintenance statement itself."""

_RETRYABLE = ("database is locked", "conflict", "busy", "could not serialize", "deadlock",
              "could not obtain lock", "current transaction is aborted")
_RETRYABLE_REMOTE = ("could not connect", "connection", "timed out", "timeout", "could not establish",
                     "unable to connect", "slow down", "service unavailable", "internal error", "network",
                     "http 500", "http 502", "http 503", "http 504")
"""Also retried on object storage and on a PostgreSQL catalog: a server that stops answering for a
while or answers 5xx (the transaction failed before its catalog commit, so replaying it neither loses
nor doubles a row). A 403 or 404 is not retried: refused credentials or a missing bucket fail at once.
An error with one of these markers that outlasts the retries is raised as `StoreUnreachable`."""
_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)|(://[^:/@\s]+:)([^@\s]+)(@)", re.I)
_PARQUET_PATH = re.compile(r"""["']?([^"'\s]+\.parquet)["']?""")


@dataclass(frozen=True)
class Location:
    """Where a store lives: a DuckLake catalog (`sqlite:<file>` or `postgres:<libpq string>`) and the
    directory or URL holding its Parquet files. `root` is the local store directory, if any."""

    catalog: str
    data_path: str
    root: Path | None = None

    @property
    def kind(self) -> str:
        return self.catalog.split(":", 1)[0]

    def describe(self) -> str:
        if self.root is not None:
            return str(self.root)
        return f"{hide_password(self.catalog)} (data {self.data_path})"

    @property
    def on_object_storage(self) -> bool:
        return is_object_url(self.data_path)

    @property
    def remote(self) -> bool:
        """Whether a server stands between the store and its data (object storage, a PostgreSQL
        catalog), so that it can be unreachable for a while."""
        return self.on_object_storage or self.kind == "postgres"

    @property
    def lock_dir(self) -> Path | None:
        """Where the write, read and gate lock files live: the store directory; for a store on object
        storage with a SQLite catalog (one machine), the catalog's folder; else none (a shared catalog:
        other machines could not take a lock file anyway)."""
        if self.root is not None:
            return self.root
        if self.kind == "sqlite" and self.on_object_storage:
            return Path(self.catalog.split(":", 1)[1]).parent
        return None


def local_location(path: str | os.PathLike[str], *, create: bool) -> Location:
    """The Location of a store directory; checks the path is a usable directory (created if missing
    and `create`), naming the path in the error when it is not."""
    root = Path(path).expanduser().absolute()
    if root.exists() and not root.is_dir():
        raise StoreError(f"store path {root} is a regular file, not a store directory")
    if not root.exists():
        if not create:
            raise StoreError(f"store directory {root} does not exist")
        try:
            root.mkdir(parents=True)
        except OSError as exc:
            raise StoreError(f"cannot create store directory {root}: {exc.strerror}") from exc
    catalog = root / CATALOG_FILE
    if catalog.exists() and not catalog.is_file():
        raise StoreError(f"store catalog {catalog} is not a regular file")
    return Location(f"sqlite:{catalog}", str(root / DATA_DIR) + os.sep, root)


def _check_writable(root: Path) -> None:
    """Probe that the store directory and its data directory accept new files (root bypasses mode
    bits, so a probe file is the honest test)."""
    for folder in (root, root / DATA_DIR):
        try:
            folder.mkdir(exist_ok=True)
            probe = folder / f".probe-{os.getpid()}-{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"store directory {folder} is not writable: {exc.strerror}") from exc


_OPEN_CATALOGS: dict[str, int] = {}
"""SQLite catalog files this process has open through a Lake, with how many Lakes hold each."""
_OPEN_LOCK = threading.Lock()


def _prepare_sqlite(catalog_file: Path) -> None:
    """Put the SQLite catalog in WAL mode (persistent in the file), so readers never block a commit.

    Only when no Lake of this process has the file open: closing any descriptor of a file drops every
    POSIX lock the process holds on it, and DuckDB's bundled SQLite (a different copy from Python's)
    would lose its catalog locks — seen as "disk I/O error" on that store's next read or commit.
    The caller holds `_OPEN_LOCK` until its own Lake is connected and counted."""
    if _OPEN_CATALOGS.get(str(catalog_file.absolute()), 0):
        return
    try:
        con = sqlite3.connect(catalog_file, timeout=30)
        try:
            if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"store catalog {catalog_file} is not a usable SQLite database: {exc}") from exc


class Lake:
    """A DuckDB connection with the store's DuckLake attached as `lake` (and made the default schema)."""

    def __init__(self, location: Location, *, read_only: bool = False, threads: int | None = None) -> None:
        self.location = location
        self.read_only = read_only
        self.threads = threads
        self._thread_lock = threading.RLock()
        self._local = threading.local()
        self._closed = False
        self._empty: dict[str, pl.DataFrame] = {}  # read_sparse: query -> its empty frame
        if location.root is not None and not read_only:
            _check_writable(location.root)
        if location.kind == "sqlite":
            catalog_file = Path(location.catalog.split(":", 1)[1])
            if read_only and not catalog_file.exists():
                raise StoreError(f"store catalog {catalog_file} does not exist")
            self._catalog_key: str | None = str(catalog_file.absolute())
            with _OPEN_LOCK:  # no other Lake of this process opens the file between check and count
                if not read_only:
                    _prepare_sqlite(catalog_file)
                self.con = self._connect()
                _OPEN_CATALOGS[self._catalog_key] = _OPEN_CATALOGS.get(self._catalog_key, 0) + 1
        else:
            self._catalog_key = None
            self.con = self._connect()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(":memory:")
        try:
            load_extension(con, "sqlite" if self.location.kind == "sqlite" else self.location.kind)
            load_extension(con, "ducklake")
            if self.location.on_object_storage:
                configure_s3(con, self.location.data_path)
                # list the prefix once: a missing bucket or refused credentials fail here, in one line,
                # not at the first commit that writes a file
                con.execute("SELECT count(*) FROM glob(?)", [self.location.data_path + "*"])
            options = [f"DATA_PATH '{quote_literal(self.location.data_path)}'"]
            if self.location.root is not None:  # a store directory may have been moved or copied:
                options.append("OVERRIDE_DATA_PATH true")  # its data is always <root>/data
            if self.read_only:
                options.append("READ_ONLY")
            con.execute(f"ATTACH 'ducklake:{quote_literal(self.location.catalog)}' AS {ALIAS} ({', '.join(options)})")
            con.execute(f"USE {ALIAS}")
            # commits that lose a race on a shared catalog are replayed by DuckLake (ducklake #233, #376,
            # #1094: the default of 10 failed with "Exceeded the maximum retry count" at engine rates)
            con.execute("SET ducklake_max_retry_count = 100")
            threads = self.threads
            if threads is None and self.location.on_object_storage:  # WORKBENCH_S3_THREADS, if set
                threads = s3_threads()
            if threads is not None:
                con.execute(f"SET threads = {int(threads)}")
        except duckdb.Error as exc:
            con.close()
            if self.location.remote and _unreachable(exc):
                raise StoreUnreachable(f"cannot open store {self.location.describe()}: its server is unreachable "
                                       f"({_first_line(exc)})") from exc
            raise StoreError(f"cannot open store {self.location.describe()}: {_first_line(exc)}") from exc
        return con

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.con.close()
            if self._catalog_key is not None:
                with _OPEN_LOCK:
                    left = _OPEN_CATALOGS.get(self._catalog_key, 1) - 1
                    if left > 0:
                        _OPEN_CATALOGS[self._catalog_key] = left
                    else:
                        _OPEN_CATALOGS.pop(self._catalog_key, None)

    # -- reads -------------------------------------------------------------------------------
    @contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """This thread's cursor on the store (its own transaction context, so threads can share a
        store). Cursors are kept per thread: `USE lake` on a fresh cursor costs a catalog lookup."""
        if self._closed:
            raise StoreError(f"store {self.location.describe()} is closed")
        cur = getattr(self._local, "cursor", None)
        if cur is None or getattr(self._local, "busy", False):
            fresh = self.con.cursor()
            fresh.execute(f"USE {ALIAS}")
            if cur is None:
                self._local.cursor = fresh
            else:  # re-entrant use on one thread: a throw-away cursor
                try:
                    yield fresh
                finally:
                    fresh.close()
                return
            cur = fresh
        self._local.busy = True
        try:
            yield cur
        finally:
            self._local.busy = False

    def read(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
        """Run one read query with bound parameters; a Polars DataFrame. Retries a busy catalog (a
        store whose server does not answer: `StoreUnreachable` after the retries, ~5 s)."""
        for attempt in range(8):
            try:
                with self.reading(), self.cursor() as cur:
                    return cur.execute(query, params or []).pl()
            except duckdb.Error as exc:
                if not _retryable(exc, self.location.remote) or attempt == 7:
                    raise self.error(exc, "read") from exc
                time.sleep(0.02 * 2**attempt * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def read_sparse(self, table: str, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        """`read` of a query over `table` alone (no join, no aggregate) for a table that is often
        empty (controls, alerts, events). DuckLake plans a query on a table without statistics (one
        that never had a row) at one catalog query per column referenced, on every query (ducklake
        PR #1313, not in the DuckLake of DuckDB 1.5.5): `SELECT *` of the 17 columns of an empty
        `alerts` took ~150 ms of CPU against ~25 ms for a probe that references none. So once a query
        has come back empty, the table is probed first and, while it holds no row, the query's empty
        frame (same columns and types) is answered without planning the query."""
        empty = self._empty.get(query)
        if empty is not None:
            if self.read(f"SELECT 1 AS one FROM {table} LIMIT 1").is_empty():
                return empty.clone()
            self._empty.pop(query, None)
        frame = self.read(query, params)
        if frame.is_empty():
            self._empty[query] = frame.clear()
        return frame

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the store's read lock (shared) for one read, so maintenance never runs under it. Waits
        while maintenance runs or waits. A store without a local directory, or whose lock files cannot
        be created (a read-only copy), reads unguarded; so does a thread already holding maintenance."""
        locks = self.location.lock_dir
        if locks is None or getattr(self._local, "maintaining", False):
            yield
            return
        fds = [_open_lock(locks / name) for name in (GATE_FILE, READ_LOCK_FILE)]
        if None in fds:
            for fd in fds:
                if fd is not None:
                    os.close(fd)
            yield
            return
        gate, lock = fds
        try:
            fcntl.flock(gate, fcntl.LOCK_SH)  # queue behind maintenance that is waiting or running
            fcntl.flock(lock, fcntl.LOCK_SH)
        except BaseException:
            os.close(lock)
            raise
        finally:
            os.close(gate)
        try:
            yield
        finally:
            os.close(lock)

    @contextmanager
    def maintaining(self, what: str, timeout_s: float = 120.0) -> Iterator[None]:
        """Hold the read lock exclusively: no read of this store, from any process going through a
        Lake, runs until the block ends. New reads wait from the moment this starts waiting."""
        if self.location.lock_dir is None:
            yield
            return
        deadline = time.monotonic() + timeout_s
        fds: list[int] = []
        try:
            read = self.location.lock_dir / READ_LOCK_FILE
            fd = _open_lock(read)
            if fd is None:
                raise StoreError(f"cannot open the store's read lock {read} to {what}")
            fds.append(fd)
            # First take the lock in a gap between reads, the gate left open (reads go on meanwhile);
            # only when none comes within MAINTENANCE_POLITE_S, close the gate: new reads queue behind it.
            polite = min(deadline, time.monotonic() + MAINTENANCE_POLITE_S)
            if not _flock_until(fd, polite, None):
                gate = self.location.lock_dir / GATE_FILE
                gfd = _open_lock(gate)
                if gfd is None:
                    raise StoreError(f"cannot open the store's read gate {gate} to {what}")
                fds.append(gfd)
                _flock_until(gfd, deadline, f"timed out waiting for other maintenance ({gate}) to {what}")
                _flock_until(fd, deadline, f"timed out waiting for readers to finish ({read}) to {what}")
            self._local.maintaining = True
            yield
        finally:
            self._local.maintaining = False
            for fd in reversed(fds):
                os.close(fd)

    # -- writes ------------------------------------------------------------------------------
    def write(self, fn: Callable[[duckdb.DuckDBPyConnection], T], what: str, *,
              timeout_s: float = 120.0, transaction: bool = True,
              on_retry: Callable[[StoreError], None] | None = None) -> T:
        """Run `fn(cursor)` inside one transaction and commit it. Writers of one store queue on a lock
        (a thread lock, and a lock file for local stores); a commit that still loses the catalog is
        rolled back and the whole transaction replayed, with exponential backoff (at most 1 s apart),
        until `timeout_s` (`math.inf`: until it commits). `on_retry(error)` is called before each
        replay that follows a failure to reach the store (`StoreUnreachable`), so a caller can say so
        while it waits."""
        if self.read_only:
            raise StoreError(f"store {self.location.describe()} is open read-only; cannot {what}")
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        attempt = 0
        while True:
            attempt += 1
            with self._thread_lock, self._file_lock(deadline, what):
                try:
                    if not transaction:  # maintenance calls that manage their own transactions
                        with self.cursor() as cur:
                            return fn(cur)
                    return self._transaction(fn)
                except duckdb.Error as exc:
                    remote = self.location.remote
                    if not _retryable(exc, remote) or time.monotonic() + delay > deadline:
                        raise self.error(exc, f"{what} (attempt {attempt})") from exc
                    if on_retry is not None and remote and _unreachable(exc):
                        on_retry(self.error(exc, f"{what} (attempt {attempt})"))
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 1.0)

    def _transaction(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        with self.cursor() as cur:
            cur.execute("BEGIN TRANSACTION")
            try:
                result = fn(cur)
                cur.execute("COMMIT")
            except BaseException:
                try:
                    cur.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            return result

    @contextmanager
    def _file_lock(self, deadline: float, what: str) -> Iterator[None]:
        if self.location.lock_dir is None:
            yield
            return
        path = self.location.lock_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise StoreError(f"cannot open write lock {path}: {exc.strerror}") from exc
        try:
            _flock_until(fd, deadline, f"timed out waiting for the write lock {path} to {what}")
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # -- errors ------------------------------------------------------------------------------
    def error(self, exc: Exception, what: str) -> StoreError:
        """A StoreError naming the store and, when DuckDB names one, the data file at fault."""
        message = _first_line(exc)
        match = _PARQUET_PATH.search(str(exc))
        where = self.location.describe()
        if self.location.remote and _unreachable(exc):
            return StoreUnreachable(f"store {where} is unreachable ({what}): {message}")
        if match and ("No files found" in str(exc) or "IO Error" in str(exc) or "Invalid" in str(exc)
                      or "parquet" in message.lower()):
            return StoreError(f"store {where}: data file {match.group(1)} is missing or corrupt "
                              f"({what}): {message}")
        return StoreError(f"store {where}: {what} failed: {message}")


def _open_lock(path: Path) -> int | None:
    """A descriptor on a lock file (created if missing; read-only where only that is allowed: flock
    works on either), or None where it cannot be opened."""
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            return os.open(path, flags, 0o666)
        except OSError:
            continue
    return None


def _flock_until(fd: int, deadline: float, message: str | None) -> bool:
    """Take an exclusive flock on `fd`, polling until `deadline`; after it StoreError(message), or
    False when `message` is None. True once taken."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                if message is None:
                    return False
                raise StoreError(message) from None
            time.sleep(0.002)


def _retryable(exc: Exception, remote: bool = False) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in _RETRYABLE + (_RETRYABLE_REMOTE if remote else ()))


def _unreachable(exc: Exception) -> bool:
    """Whether an error says the store's server was not reached (not a lost race or a refusal)."""
    text = str(exc).lower()
    return any(marker in text for marker in _RETRYABLE_REMOTE)


def hide_password(catalog: str) -> str:
    """A catalog string fit to print: `password=...` and `user:password@` replaced by `***`."""
    return _PASSWORD.sub(lambda m: f"{m.group(1)}***" if m.group(1) else f"{m.group(3)}***{m.group(5)}", catalog)


def _first_line(exc: Exception) -> str:
    """The first two lines of a DuckDB error, with any credential scrubbed (see objectstore.redact)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return redact(" ".join(lines[:2])) if lines else type(exc).__name__
