"""`workbench bench import`: a generated verl dump imported into a fresh store (see docs/import.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_result


def bench_import_cmd(
    rollouts: Annotated[int, typer.Option("--rollouts", help="Responses in the generated verl dump.")] = 1_000_000,
    prompts_per_step: Annotated[int, typer.Option("--prompts-per-step")] = 512,
    group: Annotated[int, typer.Option("--group", help="Responses per prompt.")] = 8,
    response_chars: Annotated[int, typer.Option("--response-chars", help="Mean response length.")] = 1200,
    workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Where the temporary dump and store "
                                                    "go (default: the system's temp folder).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Generate a verl dump of --rollouts responses, import it into a fresh store, print rollouts,
    rollouts_per_s, bytes_per_rollout and the parse/write split."""
    from benchmarks.import_bench import bench_import

    out = bench_import(rollouts, prompts_per_step=prompts_per_step, group=group, response_chars=response_chars,
                       workdir=str(workdir) if workdir else None)
    print_result(out, as_json)


def register(bench: typer.Typer) -> None:
    """Add `bench import`."""
    bench.command("import")(bench_import_cmd)
