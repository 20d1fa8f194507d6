"""Options shared by the commands (one spelling everywhere) and output helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from workbench.store.handle import StoreHandle

StoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="Store directory (DuckLake: SQLite catalog + Parquet files), or s3://bucket/prefix for a store on "
        "object storage (with `workbench --catalog ...`). Default: $WORKBENCH_STORE, else ./store.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (for scripts).")]


def store_path(store: Path | None) -> Path:
    """The store directory in force: --store, else $WORKBENCH_STORE, else ./store. An s3:// URL comes
    back as a Path (`s3:/bucket/prefix`): `open_store` reads it as the URL, `store_handle` gives its
    local folder."""
    from workbench.store.store import default_store_path  # here: the store loads duckdb, `--help` should not

    return store if store is not None else default_store_path()


def store_handle(store: Path | None) -> StoreHandle:
    """The store in force (`store_path`) as one value, built once per command: its spec for another
    process, its catalog (object storage) and its local folder (run logs, checkpoints, models)."""
    from workbench.store.handle import StoreHandle

    return StoreHandle.at(store_path(store))


def store_spec(store: Path) -> str:
    """The store as a command line or another process should be given it: the directory, or the
    `s3://` URL of a store on object storage."""
    from workbench.store.objectstore import is_object_url, object_url

    return object_url(store) if is_object_url(store) else str(store)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_result(result: dict[str, Any], as_json: bool) -> None:
    """A command's result: the JSON with `--json`, else one `key: value` line per entry."""
    if as_json:
        print_json(result)
        return
    for key, value in result.items():
        sys.stdout.write(f"{key}: {value}\n")


def int_list(option: str, text: str) -> list[int]:
    """`"1,2"` -> `[1, 2]` for a comma-separated option; one line naming `option` when it is not that."""
    from workbench.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not a comma-separated list of integers") from None
