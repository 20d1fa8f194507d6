"""Commands of the allocators part: `workbench allocators list|show` (`allocators profile` and `workbench
bench allocators` are in benchmarks/commands/allocators.py)."""

from __future__ import annotations

import typer

from workbench.commands.common import JsonOpt, print_json


def list_cmd(json_out: JsonOpt = False) -> None:
    """Every registered allocator with its parameters (name, type, default)."""
    from workbench.allocators import available_allocators, describe_allocator

    rows = [describe_allocator(n) for n in available_allocators()]
    if json_out:
        print_json([{k: r[k] for k in ("name", "summary", "params")} for r in rows])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("allocator", "rule", "parameters (default)")
    for r in rows:
        params = ", ".join(f"{p['name']}={p['default']}" for p in r["params"])
        table.add_row(r["name"], r["summary"].split(" — ", 1)[-1], params)
    Console().print(table)

def show_cmd(name: str, json_out: JsonOpt = False) -> None:
    """One allocator: its paper, rule and every parameter with its meaning."""
    from workbench.allocators import describe_allocator

    info = describe_allocator(name)
    if json_out:
        print_json(info)
        return
    typer.echo(info["doc"] + "\n\nParameters:")
    for p in info["params"]:
        typer.echo(f"  {p['name']} ({p['type']}, default {p['default']}): {p['doc']}")

def register(app: typer.Typer) -> None:
    """Add the `allocators` group to the top-level app."""
    group = typer.Typer(help="Rollout allocators: list them, with their parameters and papers.", no_args_is_help=True)
    app.add_typer(group, name="allocators")
    group.command("list")(list_cmd)
    group.command("show")(show_cmd)
