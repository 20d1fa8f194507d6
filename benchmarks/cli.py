"""The `workbench bench` command group. The `workbench` command adds it through the entry point
`bench = "benchmarks.cli:app"` (group `workbench.commands` in pyproject.toml); run it as
`workbench bench --help`."""

from __future__ import annotations

import importlib

import typer

from benchmarks.commands import MODULES

app = typer.Typer(
    help="Benchmarks. Each prints one JSON object (or list) with ratios measured side by side and medians.",
    no_args_is_help=True,
)

for _name in MODULES:
    importlib.import_module(f"benchmarks.commands.{_name}").register(app)
