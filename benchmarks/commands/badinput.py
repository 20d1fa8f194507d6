"""`workbench bench badinput`: the whole corpus of bad inputs against the real commands (see
benchmarks/badinput.py and docs/reliability.md, section R3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def bench_badinput_cmd(
    as_json: JsonOpt = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the per-case table of docs/reliability.md.")] = False,
    jobs: Annotated[int, typer.Option("--jobs", help="Cases run at the same time.")] = 2,
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Run only this case id or category (repeatable).")] = None,
    cases: Annotated[Optional[Path], typer.Option("--cases", help="The manifest (default: tests/bad_inputs/cases.toml).")] = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="Keep a paused organism run live through the corpus and check it keeps going.")] = True,
    fork: Annotated[bool, typer.Option("--fork/--spawn", help="Fork each case from a process that imported the workbench once (fast), or spawn a fresh interpreter per case.")] = True,
) -> None:
    """Feed every bad input of the corpus to the real `workbench` commands (subprocesses): each must fail
    with one clear line naming the field, row or path, exit non-zero, never hang, write nothing, and
    leave a live run running. Prints cases, clear_errors, crashes, hangs and one entry per case."""
    from benchmarks.badinput import markdown_table, run_corpus

    def progress(r) -> None:  # noqa: ANN001
        if not as_json and not markdown:
            typer.echo(f"  {r.status:<8} {r.seconds:6.1f} s  {r.id}: {r.message[:110]}", err=True)

    out = run_corpus(cases, jobs=jobs, only=list(only or []) or None, live=live, fork=fork, progress=progress)
    if markdown:
        typer.echo(markdown_table(out), nl=False)
    elif as_json:
        print_json(out)
    else:
        summary = {k: v for k, v in out.items() if k != "results"}  # the per-case list: --json
        for k, v in summary.items():
            typer.echo(f"{k}: {v}")
    if not out["passed"]:
        raise typer.Exit(1)


def register(bench: typer.Typer) -> None:
    """Add `bench badinput`."""
    bench.command("badinput")(bench_badinput_cmd)
