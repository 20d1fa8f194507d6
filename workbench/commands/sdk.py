"""`workbench export` (a run's rollouts out as SFT, rejection-sampling and preference sets) and the SDK's
benchmarks (`workbench bench sdk`, `workbench bench export`). Thin: parse, call one library function, print."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def bench_sdk_cmd(
    steps: Annotated[int, typer.Option("--steps", help="Training steps (half of them log, in alternating blocks).")] = 40,
    block: Annotated[int, typer.Option("--block", help="Steps per block; the first of each block is left out.")] = 5,
    rollouts: Annotated[int, typer.Option("--rollouts", help="Rollouts logged per step.")] = 512,
    tokens: Annotated[int, typer.Option("--tokens", help="Mean tokens per rollout.")] = 256,
    hidden: Annotated[int, typer.Option("--hidden", help="Width of the MLP the training step updates.")] = 1024,
    batch: Annotated[int, typer.Option("--batch", help="Rows of the training step's batch (sets its time).")] = 1024,
    device: Annotated[str, typer.Option("--device", help="Torch device of the training step (cpu, cuda).")] = "cpu",
    torch_threads: Annotated[Optional[int], typer.Option("--torch-threads", help="Cap torch's CPU threads.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A plain PyTorch training step with and without logging --rollouts rollouts through the SDK, side by
    side in one process: median step seconds of each, the overhead, the SDK calls' and the writer's cost."""
    from workbench.experiments.sdk_bench import bench_sdk

    out = bench_sdk(steps=steps, block=block, rollouts=rollouts, tokens=tokens, hidden=hidden, batch=batch,
                    device=device, torch_threads=torch_threads)
    if as_json:
        print_json(out)
        return
    for k, v in out.items():
        sys.stdout.write(f"{k}: {v}\n")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add `workbench bench sdk`."""
    bench.command("sdk")(bench_sdk_cmd)
