"""`workbench bench shapes`: the rollout shapes' rollout phase against independent sampling."""

from __future__ import annotations

from typing import Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json


def register(bench: typer.Typer) -> None:
    """Add this part's commands to the `bench` group."""

    @bench.command("shapes")
    def bench_shapes(
        steps: int = typer.Option(12, "--steps", help="Training steps per shape (medians over steps 2..)."),
        train_size: int = typer.Option(16, "--train-size", help="Training prompts (a prompt comes back every "
                                       "train_size / prompts_per_step steps: the drafts' epoch)."),
        organism: str = typer.Option("small", "--organism", help="small (the tiny run), default, or smollm2 "
                                     "(the real model, configs/smollm2.toml: about a minute a step on 2 CPU cores)."),
        group: Optional[int] = typer.Option(None, "--group", help="Rollouts per prompt (with --prompts-per-step; "
                                            "default: the config's)."),
        prompts_per_step: Optional[int] = typer.Option(None, "--prompts-per-step",
                                                       help="Prompts a step (with --group)."),
        max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Response length cap "
                                                     "(default: the config's)."),
        allocator: Optional[str] = typer.Option(None, "--allocator", help="uniform or value_tracker, for every "
                                                "shape (default: the config's)."),
        seed: int = typer.Option(0, "--seed", help="The runs' seed."),
        rounds: int = typer.Option(1, "--rounds", help="Run every shape this many times, the shapes alternating "
                                   "(medians over rounds; each round's ratio against its own independent run)."),
        shape: Optional[list[str]] = typer.Option(None, "--shape", help="These shapes only (repeatable; "
                                                  "independent always runs)."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Rollout time and tokens per rollout, reuse, acceptance and zero-signal share of each shape."""
        from benchmarks.shapes_bench import SHAPES, run_bench

        result = run_bench(store, organism=organism, steps=steps, train_size=train_size, seed=seed,
                           shapes=tuple(shape or SHAPES), group=group, prompts_per_step=prompts_per_step,
                           max_new_tokens=max_new_tokens, allocator=allocator, rounds=rounds)
        if as_json:
            print_json(result)
        else:
            for name, row in result["shapes"].items():
                typer.echo(f"{name}: {row}")
