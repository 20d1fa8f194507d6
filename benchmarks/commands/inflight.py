"""`workbench bench inflight`: what the rollouts-in-flight channel costs a run, and how far behind the
engine the Live page shows it (benchmarks/inflight_bench.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, print_json


def bench_inflight_cmd(
    steps: Annotated[int, typer.Option("--steps", help="Steps per tiny run (the first 2 are not timed).")] = 16,
    rounds: Annotated[int, typer.Option("--rounds", help="Alternations of a run with the channel and one "
                                        "without (0: no runs, batches only).")] = 4,
    rows: Annotated[int, typer.Option("--rows", help="Rows per timed batch.")] = 32,
    tokens: Annotated[int, typer.Option("--tokens", help="max_new_tokens of the timed batches.")] = 8,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed batches per side.")] = 20,
    every: Annotated[float, typer.Option("--every", help="logging.inflight_s of the side with the channel.")] = 0.5,
    model: Annotated[str, typer.Option("--model", help="'organism' (the tiny run's) or 'random' (a random "
                                       "Llama over its tokenizer: long batches, for the lag).")] = "organism",
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden size of --model random.")] = 256,
    as_json: JsonOpt = False,
) -> None:
    """What the rollouts-in-flight channel costs: tiny runs with and without it side by side (median step
    time ratio), the same seeded batches with and without it (ratio, the channel's own time share), and
    the age of what a reader polling every second sees while a batch generates."""
    from workbench.errors import ConfigError

    if model not in ("organism", "random"):
        raise ConfigError(f"--model: {model!r} is not allowed ('organism' or 'random')")
    if steps <= 2 or rounds < 0 or rows < 1 or tokens < 1 or repeats < 1 or hidden < 4 or hidden % 4:
        raise typer.BadParameter(f"--steps {steps} --rounds {rounds} --rows {rows} --tokens {tokens} --repeats "
                                 f"{repeats} --hidden {hidden}: steps > 2, rounds >= 0, rows, tokens, repeats >= 1, "
                                 "hidden a multiple of 4", param_hint="--steps/--rounds/--rows/--tokens/--repeats")
    if not 0.01 <= every <= 60:
        raise ConfigError(f"--every: {every} is not allowed (seconds in [0.01, 60])")
    from benchmarks.inflight_bench import bench_inflight

    out = bench_inflight(steps=steps, rounds=rounds, rows=rows, tokens=tokens, repeats=repeats, every_s=every,
                         model=model, hidden=hidden, runs=rounds > 0)
    if as_json:
        print_json(out)
        return
    if "run_step_ratio_on_vs_off" in out:
        typer.echo(f"run step time x{out['run_step_ratio_on_vs_off']:.4f} with the channel "
                   f"({out['run']['median_step_on_s'] * 1000:.1f} vs {out['run']['median_step_off_s'] * 1000:.1f} ms)")
    b, lag = out["batch"], out["lag"]
    typer.echo(f"batch time x{b['ratio_on_vs_off']:.4f}; the channel's own time {100 * b['channel_share']:.3f}% "
               f"({b['channel_ms_per_write']:.3f} ms per write); same tokens: {b['same_tokens']}")
    typer.echo(f"lag: max age read while generating {lag['max_age_s']} s ({lag['reads_while_generating']} reads)")


def register(bench: typer.Typer) -> None:
    """Add `bench inflight`."""
    bench.command("inflight")(bench_inflight_cmd)
