"""Commands of live control: `workbench ctl RUN <command>`, `workbench runs` (see
workbench/commands/__init__.py). Each parses, calls one function of `workbench.control`, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path

WaitOpt = Annotated[
    float,
    typer.Option("--wait", help="Wait up to this many seconds for the outcome (0: return at once)."),
]

ctl = typer.Typer(
    help="Steer a live run: `workbench ctl RUN <command>`. Each command is validated, queued in the "
    "store, and applied by the run at its next step boundary (temperature: next stage).",
    no_args_is_help=True,
)


def _open(store: Path | None):
    """Open an existing store (a missing directory is an error here, never created)."""
    from workbench.store import open_store

    return open_store(store_path(store), create=False)


def _send(ctx: typer.Context, store: Path | None, as_json: bool, wait_s: float, command: str, **kw: Any) -> None:
    """Issue one command through the API, optionally wait for its outcome, print it."""
    from workbench.control import api

    run_id = ctx.obj["run"]
    with _open(store) as st:
        cid = getattr(api, command)(st, run_id, who="cli", **kw)
        row = api.wait(st, run_id, cid, timeout_s=wait_s) if wait_s > 0 else api.outcome(st, run_id, cid)
    if as_json:
        print_json(row)
        return
    status = row["status"]
    if status == "applied":
        detail = f"applied at step {row.get('applied_step')}"
    elif status == "rejected":
        detail = f"rejected: {row.get('reason')}"
    else:
        detail = "pending (applied at the run's next step boundary)"
    typer.echo(f"run {run_id}: control {cid} {command} {detail}")


@ctl.callback()
def _ctl(ctx: typer.Context, run: str = typer.Argument(..., help="The run id.")) -> None:
    """Steer a live run."""
    ctx.obj = {"run": run}


def _plain_command(command: str, doc: str) -> None:
    """Add `workbench ctl RUN <command>` for a command without arguments."""

    def send(ctx: typer.Context, store: StoreOpt = None, as_json: JsonOpt = False, wait: WaitOpt = 0) -> None:
        _send(ctx, store, as_json, wait, command)

    send.__doc__ = doc
    ctl.command(command)(send)


_plain_command("pause", "Pause at the next step boundary (the process keeps its state and waits for resume).")
_plain_command("resume", "Resume a paused run (a stopped or crashed run restarts with `workbench resume RUN`).")
_plain_command("stop", "Checkpoint, then exit cleanly (status stopped).")
_plain_command("checkpoint", "Write a checkpoint at the end of the current step.")


@ctl.command()
def budget(
    ctx: typer.Context,
    amount: int = typer.Argument(..., help="Rollouts (or generated tokens) per step."),
    kind: str = typer.Option("rollouts", "--kind", help="rollouts or tokens."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Set the budget per step, from the next step on."""
    _send(ctx, store, as_json, wait, "set_budget", amount=amount, kind=kind)


@ctl.command()
def allocator(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Allocator name (`workbench allocators list`)."),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="name=value (repeatable)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Switch the allocator (parameters checked by its config) from the next step on."""
    from workbench.control.commands import parse_params

    _send(ctx, store, as_json, wait, "set_allocator", name=name, params=parse_params(param or []))


@ctl.command()
def params(
    ctx: typer.Context,
    values: list[str] = typer.Argument(..., help="name=value pairs for the allocator in force."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Change parameters of the allocator in force, from the next step on."""
    from workbench.control.commands import parse_params

    _send(ctx, store, as_json, wait, "set_allocator_params", params=parse_params(values))


@ctl.command()
def temperature(
    ctx: typer.Context,
    value: float = typer.Argument(..., help="Sampling temperature (> 0)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Set the sampling temperature from the next stage on."""
    _send(ctx, store, as_json, wait, "set_temperature", temperature=value)


@ctl.command()
def lr(
    ctx: typer.Context,
    value: float = typer.Argument(..., help="Learning rate (> 0; the run's schedule still scales it)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Set the learning rate (optim.lr) from the next step on."""
    _send(ctx, store, as_json, wait, "set_lr", lr=value)


@ctl.command("eval-interval")
def eval_interval(
    ctx: typer.Context,
    every: int = typer.Argument(..., help="Evaluate every N steps (0: off)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Set how often the run evaluates on the held-out split."""
    _send(ctx, store, as_json, wait, "set_eval_interval", every=every)


@ctl.command()
def staleness(
    ctx: typer.Context,
    eta: int = typer.Argument(..., help="Versions a batch may lag the trainer (0: synchronous)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    wait: WaitOpt = 0,
) -> None:
    """Set the asynchronous pipeline's staleness bound (within the run's pipeline.max_staleness_bound)."""
    _send(ctx, store, as_json, wait, "set_staleness", eta=eta)


@ctl.command()
def history(ctx: typer.Context, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The run's commands with their outcomes."""
    with _open(store) as st:
        rows = st.controls(ctx.obj["run"]).to_dicts()
    if as_json:
        print_json(rows)
        return
    for r in rows:
        where = f"step {r['applied_step']}" if r["status"] == "applied" else (r.get("reason") or "")
        typer.echo(f"{r['control_id']:>5}  {r['command']:<21} {r['status']:<9} {where}  {r.get('args')}")


def _runs_in_outage(home: Path, exc: Exception, as_json: bool) -> None:
    """The store cannot be read: print what the runs of this machine say about it (their status files
    in the store's local folder) before the error's one line."""
    from workbench.store.outage import read_statuses

    said = read_statuses(home)
    if as_json:
        print_json([{"run_id": rid, "status": row["state"], "store_status": row["message"], **row}
                    for rid, row in said.items()])
        return
    for rid, row in said.items():
        typer.echo(f"{rid}  {row['state']:<9} {row['message']}")


def register(app: typer.Typer) -> None:
    """Add `workbench ctl` and `workbench runs` to the top-level app."""

    app.add_typer(ctl, name="ctl")

    @app.command()
    def runs(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """List runs with their status (crashed runs detected: stale heartbeat and process gone)."""
        from workbench.commands.common import store_handle
        from workbench.control import runs_with_status
        from workbench.errors import StoreUnreachable

        home = store_handle(store).home
        try:
            with _open(store) as st:
                frame = runs_with_status(st, status_dir=home)
        except StoreUnreachable as exc:
            _runs_in_outage(home, exc, as_json)
            raise
        rows = frame.to_dicts()
        if as_json:
            print_json(rows)
            return
        if not rows:
            typer.echo("no runs")
        for r in rows:
            name = str(r.get("name") or "")
            line = f"{r['run_id']}  {r['status']:<9} {name:<24} step {r.get('last_step') or 0}"
            if r.get("store_status"):
                line += f"  {r['store_status']}"
            elif r["status"] in ("created", "running", "paused", "stopping"):
                line += f"  heartbeat {r.get('heartbeat_age_s')} s ago"
            elif r.get("error"):
                line += f"  {r['error']}"
            typer.echo(line)

