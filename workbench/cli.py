"""The `workbench` command. Thin commands over the library; domain errors become one line on
stderr and exit code 1."""

from __future__ import annotations

import importlib
import sys

import typer

from workbench import __version__
from workbench.commands import MODULES, plugins
from workbench.errors import WorkbenchError

app = typer.Typer(
    name="workbench",
    help="Rollout Workbench: GRPO-family RL with pluggable rollout allocators, a DuckLake store of every "
    "rollout, and a dashboard to watch and steer runs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"workbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    catalog: str = typer.Option(
        None, "--catalog", help="The DuckLake catalog of a store on object storage (--store s3://bucket/prefix): "
        "postgres:<libpq string> or postgresql://... for several nodes, a .sqlite file for one. "
        "Default: $WORKBENCH_CATALOG. Sets it for this command and the runs it starts.", show_default=False,
    ),
) -> None:
    """Rollout Workbench."""
    if catalog:
        import os

        os.environ["WORKBENCH_CATALOG"] = catalog  # read by workbench.store.objectstore, inherited by children


# Commands from other installed packages (`workbench bench`: the benchmarks beside the library), found
# by their entry points: the library never imports them by name (workbench/commands/plugins.py).
_plugins = plugins.load()
plugins.add_groups(app, _plugins)
for _name in MODULES:
    importlib.import_module(f"workbench.commands.{_name}").register(app)
plugins.add_commands(app, _plugins)


def main() -> None:
    import os

    from workbench.control.priority import QUIET_WAITING

    for key, value in QUIET_WAITING.items():  # before anything imports torch (workbench.control.priority)
        os.environ.setdefault(key, value)
    try:
        app()
    except WorkbenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
