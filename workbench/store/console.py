"""The SQL console: user-written SQL over the store's tables, and nothing beyond them.

Every route that runs SQL a user typed (`workbench query`, `Store.sql`, the dashboard, notebooks
through `Store.sql`) comes here. Two barriers, each enough on its own for the common cases:

1. A statement check (`check_console_sql`) refuses, with one line naming what it refused, anything
   but one reading statement (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, PIVOT, EXPLAIN
   of those): COPY, ATTACH, DETACH, INSTALL, LOAD, SET, RESET, PRAGMA, CALL, IMPORT, EXPORT, writes,
   table functions that read files or other databases (`read_text`, `read_csv`, `read_parquet`,
   `glob`, `sqlite_scan`, ...) and files named in FROM (`FROM '/etc/passwd'`).
2. The connection the SQL runs on (`console_lake`) attaches the store read-only, then sets DuckDB's
   `allowed_directories` to the store's data path, `enable_external_access = false` and
   `lock_configuration = true`: DuckDB itself then refuses any file outside the store's data files,
   any extension install or load, and any change of setting, whatever the statement looks like.

The statement is parsed on a locked in-memory connection too: DuckDB's parser reads the files an
`IMPORT DATABASE` names while it parses.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import duckdb
import polars as pl

from workbench.errors import StoreError

ALLOWED_FIRST = ("SELECT", "WITH", "FROM", "VALUES", "DESCRIBE", "SHOW", "SUMMARIZE", "TABLE", "PIVOT",
                 "UNPIVOT", "EXPLAIN", "(")
"""Keywords a console statement may start with (EXPLAIN followed by one of the others)."""

REFUSED = {
    "COPY": "COPY reads or writes files",
    "ATTACH": "ATTACH opens another database",
    "DETACH": "DETACH changes the attached databases",
    "INSTALL": "INSTALL fetches extensions",
    "LOAD": "LOAD loads extensions",
    "FORCE": "FORCE INSTALL fetches extensions",
    "SET": "SET changes settings",
    "RESET": "RESET changes settings",
    "PRAGMA": "PRAGMA changes or reads settings",
    "CALL": "CALL runs procedures",
    "IMPORT": "IMPORT DATABASE reads files",
    "EXPORT": "EXPORT DATABASE writes files",
    "USE": "USE changes the default database",
    "CHECKPOINT": "CHECKPOINT writes",
    "VACUUM": "VACUUM writes",
}
"""First keyword -> why the console refuses it."""

FILE_FUNCTIONS = frozenset("""
read_text read_blob read_csv read_csv_auto read_json read_json_auto read_json_objects
read_json_objects_auto read_ndjson read_ndjson_auto read_ndjson_objects read_parquet parquet_scan
parquet_metadata parquet_schema parquet_file_metadata parquet_kv_metadata parquet_bloom_probe glob
sniff_csv read_xlsx read_duckdb sqlite_scan sqlite_query sqlite_attach postgres_scan postgres_query
postgres_attach postgres_execute mysql_query iceberg_scan iceberg_metadata iceberg_snapshots
delta_scan httpfs_get st_read load_aws_credentials duckdb_secrets which_secret
""".split())
"""Table functions that read files, URLs, other databases or credentials: refused by name."""

_READING_KINDS = {"SELECT", "EXPLAIN"}

_STRIP = re.compile(r"""--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|"(?:[^"]|"")*"|\$\$.*?\$\$""", re.S)
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\(")
_FUNCTION_CALL = re.compile(r"\b([A-Za-z_][A-Za-z_0-9]*)\s*\(")
_FILE_IN_FROM = re.compile(r"\b(FROM|JOIN)\s*(\(\s*)?('\?')", re.I)

_PARSER: duckdb.DuckDBPyConnection | None = None
_PARSER_LOCK = threading.Lock()


def _parser() -> duckdb.DuckDBPyConnection:
    """An in-memory connection with no file access, used only to split and classify statements."""
    global _PARSER
    if _PARSER is None:
        con = duckdb.connect(":memory:")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        _PARSER = con
    return _PARSER


def _skeleton(query: str) -> tuple[str, list[str]]:
    """The query with comments blanked and each single-quoted literal replaced by `'?'` (keywords
    and calls stay where they were), and the literals in order; double-quoted identifiers keep their
    text so a quoted function name is still seen."""
    literals: list[str] = []

    def blank(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith('"'):
            return text[1:-1]
        if text.startswith("'"):
            literals.append(text)
            return "'?'"
        return " "
    return _STRIP.sub(blank, query), literals


def refusal(query: str) -> str | None:
    """Why the console refuses `query` (one line), or None when it may run."""
    skeleton, literals = _skeleton(query)
    words = [w.upper() for w in _WORD.findall(skeleton)[:3]]
    first = words[0] if words else ""
    if first == "EXPLAIN":
        rest = [w for w in words[1:] if w != "ANALYZE"]
        first = rest[0] if rest else ""
    if first in REFUSED:  # before parsing: the parser itself reads the files IMPORT DATABASE names
        return f"{first} is refused: {REFUSED[first]}; the SQL console only reads the store's tables"
    with _PARSER_LOCK:
        try:
            statements = _parser().extract_statements(query)
        except duckdb.Error as exc:
            return f"cannot parse query: {console_message(exc)}"
    if len(statements) != 1:
        return f"query must be exactly one statement, got {len(statements)}"
    kind = str(statements[0].type).rsplit(".", 1)[-1]
    if kind not in _READING_KINDS or first not in ALLOWED_FIRST:
        what = first or kind
        return (f"{what} is refused: the SQL console only runs one reading statement "
                f"(SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)")
    for m in _FUNCTION_CALL.finditer(skeleton):
        name = m.group(1).lower()
        if name in FILE_FUNCTIONS:
            return f"{name}() is refused: it reads files or other databases; the SQL console only reads the store's tables"
    m = _FILE_IN_FROM.search(skeleton)
    if m is not None:
        name = literals[skeleton[: m.start(3)].count("'?'")]
        return f"reading the file {name} is refused: the SQL console only reads the store's tables"
    return None


def check_console_sql(query: str) -> None:
    """Raise StoreError (one line) unless `query` is one statement the console may run."""
    if not isinstance(query, str) or not query.strip():
        raise StoreError("query is empty: give one SELECT statement over the store's tables")
    why = refusal(query)
    if why is not None:
        raise StoreError(why)


def console_message(exc: BaseException) -> str:
    """DuckDB's error as one line; a refused file access names the file and says why."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    m = re.search(r'Cannot access (?:file|directory) "([^"]+)"', text)
    if m is not None:
        return f"{m.group(1)} is outside the store: the SQL console only reads the store's tables"
    if "Loading external extensions is disabled" in text or "configuration has been locked" in text:
        return f"refused: {first.split(':', 1)[-1].strip()} (the SQL console cannot change settings or load extensions)"
    return first


def lock_down(con: duckdb.DuckDBPyConnection, data_path: str) -> None:
    """After the store is attached: allow file access only under the store's data path, disable all
    other external access and lock the configuration (nothing can turn them back on)."""
    con.execute("SET allowed_directories = ?", [[data_path]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def console_lake(location: Any, *, threads: int | None = None) -> Any:
    """A read-only Lake on `location` whose connection is locked down for user SQL."""
    from workbench.store.connection import Lake

    lake = Lake(location, read_only=True, threads=threads)
    try:
        lock_down(lake.con, location.data_path)
    except duckdb.Error as exc:
        lake.close()
        raise StoreError(f"cannot lock down the SQL console on {location.describe()}: {console_message(exc)}") from exc
    return lake


def run_console_sql(store: Any, query: str, params: list[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
    """Check `query`, then run it on the store's locked-down console connection (opened once per
    Store, closed with it). Errors are StoreErrors of one line."""
    check_console_sql(query)
    if store._ro is None:
        with store._ro_lock:
            if store._ro is None:
                store._ro = console_lake(store.location, threads=store.threads)
    try:
        return store._ro.read(query, params)
    except StoreError as exc:
        cause = exc.__cause__
        if isinstance(cause, duckdb.Error) and ("Permission Error" in str(cause) or "locked" in str(cause)):
            raise StoreError(console_message(cause)) from cause
        raise
