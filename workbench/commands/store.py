"""Commands of this part (see workbench/commands/__init__.py)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this part's commands to the top-level app and the `bench` group."""
