"""`workbench bench control` (a live organism run steered with every kind of command) and `workbench
bench priority` (what the defaults for runs the workbench starts cost and give)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, print_result


def bench_control(
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Steer a live organism run with every kind of command (invalid ones too); time the outcomes.

    Runs in a temporary store unless --store is given."""
    from benchmarks.control_bench import run_bench

    result = run_bench(store)
    print_result(result, as_json)

def bench_priority_cmd(
    threads: Annotated[int, typer.Option("--threads", help="Torch threads of the training loop.")] = 2,
    iters: Annotated[int, typer.Option("--iters", help="Training iterations per timed loop.")] = 300,
    busy: Annotated[int, typer.Option("--busy", help="Busy single-threaded processes beside it.")] = 1,
    repeats: Annotated[int, typer.Option("--repeats", help="Interleaved repeats (medians reported).")] = 3,
    as_json: JsonOpt = False,
) -> None:
    """What the defaults for runs the workbench starts cost and give: OMP_WAIT_POLICY=PASSIVE against
    ACTIVE alone and beside busy processes, niceness 10 against 0 beside them (wall s, busy CPU share)."""
    from benchmarks.priority_bench import bench_priority

    result = bench_priority(threads=threads, iters=iters, busy=busy, repeats=repeats)
    if as_json:
        print_json(result)
    else:
        typer.echo(json.dumps(result, indent=2))


def register(bench: typer.Typer) -> None:
    """Add `bench control` and `bench priority`."""
    bench.command("control")(bench_control)
    bench.command("priority")(bench_priority_cmd)
