"""`workbench bench sdk` (a training step with and without logging through the SDK) and `workbench bench
export` (a synthetic run exported in a child process): benchmarks/sdk_bench.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_result


def bench_export_cmd(
    rollouts: Annotated[int, typer.Option("--rollouts", help="Rollouts in the synthetic run exported.")] = 1_000_000,
    kind: Annotated[str, typer.Option("--kind", help="sft | rejection | pairs.")] = "sft",
    fmt: Annotated[str, typer.Option("--format", help="jsonl | parquet | both.")] = "jsonl",
    workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Where the temporary store and set go.")] = None,
    keep_store: Annotated[bool, typer.Option("--keep-store", help="Build the store once in --workdir and reuse it.")] = False,
    no_tokens: Annotated[bool, typer.Option("--no-tokens", help="Export without token ids and log-probs.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build a synthetic run of --rollouts rollouts, export it in a child process, print rollouts/s and the
    child's peak RSS."""
    from benchmarks.sdk_bench import bench_export

    out = bench_export(rollouts, kind=kind, fmt=fmt, workdir=str(workdir) if workdir else None,
                       keep_store=keep_store, tokens=not no_tokens)
    print_result(out, as_json)


def bench_sdk_cmd(
    steps: Annotated[int, typer.Option("--steps", help="Training steps (half of them log, in alternating blocks).")] = 40,
    block: Annotated[int, typer.Option("--block", help="Steps per block; the first of each block is left out.")] = 5,
    rollouts: Annotated[int, typer.Option("--rollouts", help="Rollouts logged per step.")] = 512,
    tokens: Annotated[int, typer.Option("--tokens", help="Mean tokens per rollout.")] = 256,
    hidden: Annotated[int, typer.Option("--hidden", help="Width of the MLP the training step updates.")] = 1024,
    batch: Annotated[int, typer.Option("--batch", help="Rows of the training step's batch (sets its time).")] = 1024,
    device: Annotated[str, typer.Option("--device", help="Torch device of the training step (cpu, cuda).")] = "cpu",
    torch_threads: Annotated[Optional[int], typer.Option("--torch-threads", help="Cap torch's CPU threads.")] = None,
    commit_window: Annotated[float, typer.Option("--commit-window", help="The SDK writer's commit window, seconds.")] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """A plain PyTorch training step with and without logging --rollouts rollouts through the SDK, side by
    side in one process: median step seconds of each, the overhead, the SDK calls' and the writer's cost."""
    from benchmarks.sdk_bench import bench_sdk

    out = bench_sdk(steps=steps, block=block, rollouts=rollouts, tokens=tokens, hidden=hidden, batch=batch,
                    device=device, torch_threads=torch_threads, commit_window_s=commit_window)
    print_result(out, as_json)


def register(bench: typer.Typer) -> None:
    """Add `workbench bench sdk` and `workbench bench export`."""
    bench.command("sdk")(bench_sdk_cmd)
    bench.command("export")(bench_export_cmd)
