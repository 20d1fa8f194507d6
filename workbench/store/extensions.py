"""Loading DuckDB's DuckLake, SQLite, PostgreSQL and httpfs (S3) extensions without a network.

DuckDB verifies extension signatures, so the extensions come from pinned Python packages
(`duckdb-extension-ducklake`, `-sqlite`, `-postgres`, `-httpfs`) whose version matches DuckDB's. `INSTALL '<file>'`
copies the file into DuckDB's extension directory and `LOAD <name>` loads it (a bare `LOAD '<file>'`
of the SQLite one fails on its entry-point name). Where no package is installed, DuckDB's own
`INSTALL <name>` (network) is tried.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import duckdb

from workbench.errors import StoreError

# DuckDB name -> Python package holding the extension file.
PACKAGES = {
    "sqlite": "duckdb_extension_sqlite",
    "ducklake": "duckdb_extension_ducklake",
    "postgres": "duckdb_extension_postgres",
    "httpfs": "duckdb_extension_httpfs",  # s3:// data paths (workbench/store/objectstore.py)
}


def extension_file(name: str) -> Path | None:
    """The `.duckdb_extension` file for `name` shipped by its Python package, or None."""
    spec = importlib.util.find_spec(PACKAGES[name])
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "extensions"
    wanted = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if wanted.is_file():
        return wanted
    found = sorted(root.glob(f"*/{name}.duckdb_extension"))
    return found[-1] if found else None


def _already_loaded(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    aliases = {"sqlite": ("sqlite", "sqlite_scanner"), "postgres": ("postgres", "postgres_scanner")}
    names = aliases.get(name, (name,))
    rows = con.execute(
        "SELECT extension_name FROM duckdb_extensions() WHERE loaded AND extension_name IN "
        f"({', '.join('?' for _ in names)})",
        list(names),
    ).fetchall()
    return bool(rows)


def load_extension(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Load extension `name` into `con`: from its Python package if present, else by DuckDB's INSTALL.

    If the default extension directory (under the home directory) is not writable, a directory under
    the system temp dir is used instead.
    """
    if _already_loaded(con, name):
        return
    path = extension_file(name)
    errors: list[str] = []
    for attempt in ("default", "tempdir"):
        if attempt == "tempdir":
            ext_dir = Path(tempfile.gettempdir()) / f"workbench-duckdb-ext-{os.getuid()}"
            ext_dir.mkdir(parents=True, exist_ok=True)
            con.execute(f"SET extension_directory = '{quote_literal(str(ext_dir))}'")
        try:
            if path is not None:
                con.execute(f"INSTALL '{quote_literal(str(path))}'")
            else:
                con.execute(f"INSTALL {name}")
            con.execute(f"LOAD {name}")
            return
        except duckdb.Error as exc:
            errors.append(f"{attempt}: {exc}")
    source = str(path) if path else f"package {PACKAGES[name]} not installed; network INSTALL"
    raise StoreError(f"cannot load DuckDB extension {name!r} ({source}): {' | '.join(errors)}")


def quote_literal(text: str) -> str:
    """Escape a string for a single-quoted SQL literal (only for paths and URLs we build ourselves)."""
    return text.replace("'", "''")
