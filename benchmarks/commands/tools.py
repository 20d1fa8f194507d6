"""`workbench bench tools`: per-call latency of the tool sandbox (benchmarks/tools_bench.py)."""

from __future__ import annotations

import typer

from workbench.commands.common import JsonOpt, print_result


def register(bench: typer.Typer) -> None:
    """Add this part's commands to the `bench` group."""

    @bench.command("tools")
    def bench_tools(
        calls: int = typer.Option(300, "--calls", help="Calculator calls one after another (the python tool "
                                  "gets a third as many)."),
        batch: int = typer.Option(32, "--batch", help="Calls in each batch run at once."),
        rounds: int = typer.Option(10, "--rounds", help="Batches."),
        fresh: int = typer.Option(10, "--fresh", help="Calls in a fresh interpreter each, for comparison (0: none)."),
        parallel: int = typer.Option(8, "--parallel", help="Calls the sandbox runs at once."),
        as_json: JsonOpt = False,
    ) -> None:
        """Tool-call latency p50/p95 (calculator on warm workers and forked per call, python, batches, a fresh
        interpreter per call)."""
        from workbench.errors import WorkbenchError
        from benchmarks.tools_bench import run_bench

        for name, value, lo in (("--calls", calls, 1), ("--batch", batch, 1), ("--rounds", rounds, 1),
                                ("--fresh", fresh, 0), ("--parallel", parallel, 1)):
            if value < lo:
                raise WorkbenchError(f"bench tools: {name} must be >= {lo}, got {value}")
        result = run_bench(calls=calls, batch=batch, rounds=rounds, fresh=fresh, parallel=parallel)
        print_result(result, as_json)
