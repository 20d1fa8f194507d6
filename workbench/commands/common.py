"""Options shared by the commands (one spelling everywhere) and output helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

StoreOpt = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="Store directory (DuckLake: SQLite catalog + Parquet files). "
        "Default: $WORKBENCH_STORE, else ./store.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object (for scripts).")]


def store_path(store: Path | None) -> Path:
    """The store directory in force: --store, else $WORKBENCH_STORE, else ./store."""
    from workbench.store.store import default_store_path  # here: the store loads duckdb, `--help` should not

    return store if store is not None else default_store_path()


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def int_list(option: str, text: str) -> list[int]:
    """`"1,2"` -> `[1, 2]` for a comma-separated option; one line naming `option` when it is not that."""
    from workbench.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not a comma-separated list of integers") from None
