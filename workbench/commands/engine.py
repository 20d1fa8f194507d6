"""Commands of the engine: run, resume, demo, config (see workbench/commands/__init__.py)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this part's commands to the top-level app and the `bench` group."""

    @app.command()
    def demo() -> None:
        """The main job: the default experiment on the model organism, then the dashboard on it."""
        from workbench import __version__

        typer.echo(f"workbench {__version__}: the project frame is in place; the engine lands next.")
