"""Guards from the command line: `workbench ctl RUN guard add|set|remove|list`, `workbench alerts`,
`workbench metrics` (what a rule may read).
Each parses, calls one library function, prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path

if TYPE_CHECKING:
    from workbench.store import Store

guard_app = typer.Typer(help="Add, change, remove or list the run's guards (recorded as control commands).",
                        no_args_is_help=True)
alerts_app = typer.Typer(help="Alerts raised by guards: list them, acknowledge one.", no_args_is_help=True)


def _open(store: Path | None) -> Store:
    from workbench.store import open_store

    return open_store(store_path(store), create=False)


def _settings(items: list[str] | None) -> dict[str, Any]:
    from workbench.control.commands import parse_params

    return parse_params(items or [])


def _issue(ctx: typer.Context, store: Path | None, as_json: bool, args: dict[str, Any]) -> None:
    from workbench.control import api
    from workbench.control.guards import issue_guard

    run_id = ctx.obj["run"]
    with _open(store) as st:
        cid = issue_guard(st, run_id, args, who="cli")
        row = api.outcome(st, run_id, cid)
    if as_json:
        print_json(row)
    else:
        typer.echo(f"run {run_id}: control {cid} guard {args['op']} {row['status']} "
                   "(applied at the run's next step boundary)")


@guard_app.command("add")
def add(ctx: typer.Context, name: str = typer.Argument(..., help="The guard's name."),
        rule: str = typer.Option("", "--rule", help="One-line condition (docs/guards.md)."),
        preset: str = typer.Option("", "--preset", help="Start from a preset (its rule, window, action)."),
        window: Optional[int] = typer.Option(None, "--window", help="Steps in a row the rule must hold (>= 1)."),
        action: str = typer.Option("", "--action", help="alert, pause, rollback or stop."),
        setting: Optional[list[str]] = typer.Option(None, "--setting", help="Rollback: name=value (temperature, budget, lr)."),
        store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Add a guard to a live run."""
    spec: dict[str, Any] = {"name": name}
    for key, value in (("rule", rule), ("preset", preset), ("action", action), ("settings", _settings(setting))):
        if value:
            spec[key] = value
    if window is not None:
        spec["window"] = window
    _issue(ctx, store, as_json, {"op": "add", "guard": spec})


@guard_app.command("set")
def set_(ctx: typer.Context, name: str = typer.Argument(..., help="The guard's name."),
         rule: str = typer.Option("", "--rule"), window: Optional[int] = typer.Option(None, "--window"),
         action: str = typer.Option("", "--action"),
         setting: Optional[list[str]] = typer.Option(None, "--setting", help="Rollback: name=value."),
         store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Change fields of a guard in force."""
    changes: dict[str, Any] = {k: v for k, v in (("rule", rule), ("action", action)) if v}
    if window is not None:
        changes["window"] = window
    if setting:
        changes["settings"] = _settings(setting)
    _issue(ctx, store, as_json, {"op": "set", "name": name, "changes": changes})


@guard_app.command("remove")
def remove(ctx: typer.Context, name: str = typer.Argument(..., help="The guard's name."),
           store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Remove a guard from a live run (a default preset too)."""
    _issue(ctx, store, as_json, {"op": "remove", "name": name})


@guard_app.command("list")
def list_(ctx: typer.Context, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The guards in force: the config's (with the defaults) and every applied guard command."""
    from workbench.control.guards import guards_in_force

    with _open(store) as st:
        guards = guards_in_force(st, ctx.obj["run"])
    if as_json:
        print_json([g.to_dict() for g in guards.values()])
        return
    for g in guards.values():
        extra = f"  then {g.settings}" if g.settings else ""
        typer.echo(f"{g.name:<18} {g.action:<8} window {g.window}  {g.rule}{extra}")


@alerts_app.command("list")
def alerts_list(run: Optional[str] = typer.Argument(None, help="A run id (default: every run)."),
                status: Optional[str] = typer.Option(None, "--status", help="open, acknowledged or acted."),
                store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Alerts, newest first."""
    with _open(store) as st:
        rows = st.alerts(run, status=status).to_dicts()
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no alerts")
    for r in rows:
        typer.echo(f"{r['alert_id']}  {r['status']:<12} {r['run_id']}  {r['message']}"
                   + (f"  -> {r['outcome']}" if r.get("outcome") else ""))


@alerts_app.command("ack")
def alerts_ack(alert_id: str = typer.Argument(..., help="The alert's id."), store: StoreOpt = None) -> None:
    """Acknowledge an alert (a person has seen it)."""
    with _open(store) as st:
        st.set_alert_status(alert_id, "acknowledged")
    typer.echo(f"alert {alert_id} acknowledged")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the top-level app and `ctl`."""
    from workbench.commands.control import ctl

    ctl.add_typer(guard_app, name="guard")
    app.add_typer(alerts_app, name="alerts")

    @app.command("metrics")
    def metrics_cmd(
        markdown: bool = typer.Option(False, "--markdown", help="The catalogue as docs/metrics.md."),
        as_json: JsonOpt = False,
    ) -> None:
        """Every step metric a run records: name, meaning, unit, who records it, when it is present
        (the catalogue in workbench/metrics.py that guards' rules, the store and the dashboard read)."""
        import dataclasses

        from workbench.metrics import CATALOGUE, PRESENT, metrics_markdown

        if markdown:
            typer.echo(metrics_markdown(), nl=False)
        elif as_json:
            print_json([dataclasses.asdict(m) for m in CATALOGUE])
        else:
            for m in CATALOGUE:
                typer.echo(f"{m.name:<34} {m.unit:<12} {PRESENT[m.present]:<24.24} {m.meaning}")

