"""Commands that other installed packages add to `workbench`: the entry point group `workbench.commands`
(pyproject.toml). The library never imports those packages by name; it finds them here.

An entry point's name says where its object goes: `bench = "benchmarks.cli:app"` adds a Typer group
as `workbench bench`; a dotted name, `"allocators.profile" = "module:function"`, adds a command to a
group the library already has (`workbench allocators profile`). A name in `EXPECTED` whose package is
missing (or not installed again since its entry points changed) still answers, with one line that says
so and exit code 1.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import typer

from workbench.errors import WorkbenchError

GROUP = "workbench.commands"
EXPECTED = {
    "bench": ("benchmarks", "Benchmarks. Each prints one JSON object (or list) with ratios measured side by "
              "side and medians."),
    "allocators.profile": ("benchmarks", "A workload profile at its warm start: build its organism, measure "
                           "the pass-rate histogram, predict each allocator's token saving with the simulator."),
}
"""Entry points this repository's own packages provide: name -> (package, help when it is missing)."""


def load() -> dict[str, Any]:
    """Every entry point of `GROUP` loaded (name -> object); a name of `EXPECTED` whose package cannot be
    imported, or that has no entry point, maps to a placeholder command that says so. An error inside
    a package that is there is not hidden."""
    found: dict[str, Any] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        package = ep.value.split(":", 1)[0].split(".", 1)[0]
        try:
            found[ep.name] = ep.load()
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".", 1)[0] != package:
                raise
            found[ep.name] = _missing(ep.name, package, EXPECTED.get(ep.name, ("", ""))[1])
    for name, (package, help_text) in EXPECTED.items():
        found.setdefault(name, _missing(name, package, help_text))
    return found


def add_groups(app: typer.Typer, plugins: dict[str, Any]) -> None:
    """The top-level names: a Typer group is added under its name, a function as a command."""
    for name, obj in plugins.items():
        if "." not in name:
            _add(app, name, obj)


def add_commands(app: typer.Typer, plugins: dict[str, Any]) -> None:
    """The dotted names: each into the group of `app` its first part names (after the library's own
    commands are registered)."""
    groups = {info.name: info.typer_instance for info in app.registered_groups}
    for name, obj in plugins.items():
        if "." in name:
            parent, _, leaf = name.partition(".")
            if parent not in groups:
                raise WorkbenchError(f"entry point {GROUP} {name!r}: `workbench {parent}` is not a command group")
            _add(groups[parent], leaf, obj)


def _add(app: typer.Typer, name: str, obj: Any) -> None:
    if isinstance(obj, typer.Typer):
        app.add_typer(obj, name=name)
    else:
        app.command(name, context_settings=getattr(obj, "context_settings", None))(obj)


def _missing(name: str, package: str, help_text: str) -> Any:
    """A command that takes any arguments and fails with one line naming the missing package."""
    words = name.replace(".", " ")

    def command(ctx: typer.Context) -> None:
        raise WorkbenchError(f"`workbench {words}` comes with the {package} package, which is not installed "
                             f"(pip install -e . in the repository installs it with the workbench)")

    command.__doc__ = f"{help_text} (Not installed: the {package} package.)"
    command.context_settings = {"allow_extra_args": True, "ignore_unknown_options": True}  # type: ignore[attr-defined]
    return command
