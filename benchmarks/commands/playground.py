"""`workbench bench playground`: the Playground's answer time on SmolLM2-135M, idle and beside a training
run, with that run's steps/s and the checkpoint's load time (benchmarks/playground_bench.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import StoreOpt, print_json


def bench_playground(
    store: StoreOpt = None,
    requests: Annotated[int, typer.Option("--requests", help="Timed requests, idle and beside the run.")] = 10,
    samples: Annotated[int, typer.Option("--samples", help="Samples per request.")] = 8,
    tokens: Annotated[int, typer.Option("--tokens", help="New tokens per sample.")] = 24,
    beside: Annotated[bool, typer.Option("--beside/--idle-only", help="Also time the requests while a SmolLM2 "
                                         "run trains beside them (launched, then stopped).")] = True,
    quiet_steps: Annotated[int, typer.Option("--quiet-steps", help="Steps of the run beside timed with no "
                                             "request, before the requests and again after them.")] = 4,
) -> None:
    """Time 8 samples of 24 tokens from a SmolLM2 checkpoint through the Playground's worker process: the
    checkpoint's load time, a first request, then --requests requests idle and again while a SmolLM2 run
    trains beside them (its steps/s during the requests against its steps/s without them, medians);
    median, p95 and max seconds. One JSON object."""
    from benchmarks.playground_bench import bench_playground as run_bench

    if requests < 1 or samples < 1 or tokens < 1 or quiet_steps < 1:
        raise typer.BadParameter("--requests, --samples, --tokens and --quiet-steps must be >= 1",
                                 param_hint="--requests")
    path = Path(store) if store else Path("store") / "bench-playground"
    print_json(run_bench(path.resolve(), requests=requests, samples=samples, tokens=tokens, beside=beside,
                         quiet_steps=quiet_steps))


def register(bench: typer.Typer) -> None:
    """Add `bench playground`."""
    bench.command("playground")(bench_playground)
