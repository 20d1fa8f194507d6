"""Commands of the allocators part: `workbench allocators list|show` and `workbench bench allocators`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def _names(allocators: str | None) -> list[str] | None:
    return [a.strip() for a in allocators.split(",") if a.strip()] if allocators else None


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this part's commands to the top-level app and the `bench` group."""
    group = typer.Typer(help="Rollout allocators: list them, with their parameters and papers.", no_args_is_help=True)
    app.add_typer(group, name="allocators")

    @group.command("list")
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

    @group.command("show")
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

    @bench.command("allocators")
    def bench_allocators(
        simulate: Annotated[bool, typer.Option("--simulate", help="Offline simulator: synthetic prompts, no model (seconds).")] = False,
        allocators: Annotated[Optional[str], typer.Option("--allocators", help="Comma-separated names (default: all).")] = None,
        seeds: Annotated[int, typer.Option("--seeds", help="Seeds per allocator (metrics are means).")] = 3,
        steps: Annotated[int, typer.Option("--steps", help="Simulated steps per run.")] = 60,
        budget_factor: Annotated[float, typer.Option("--budget-factor", help="Budget per step as a multiple of uniform's B x n.")] = 1.5,
        budget_kind: Annotated[str, typer.Option("--budget-kind", help="rollouts or tokens.")] = "rollouts",
        json_out: JsonOpt = False,
    ) -> None:
        """Compare allocators: zero-signal fraction, informative groups per 1k rollouts, budget used."""
        names = _names(allocators)
        if not simulate:
            from workbench.allocators.compare import compare

            result = compare(names, seeds=seeds)
            print_json(result)
            return
        from workbench.allocators.simulate import SimConfig, simulate as run_sim

        rows = run_sim(names, SimConfig(steps=steps, budget_factor=budget_factor, budget_kind=budget_kind), seeds=seeds)
        if json_out:
            print_json(rows)
            return
        from rich.console import Console
        from rich.table import Table

        cols = ["zero_signal_frac", "informative_per_1k", "budget_used_frac", "rollouts_per_step", "pass_gain"]
        table = Table("allocator", *cols, title=f"offline simulator, {steps} steps x {seeds} seeds")
        for r in rows:
            table.add_row(r["allocator"], *(f"{r[c]:.3f}" for c in cols))
        Console().print(table)
