"""`workbench bench episodes-smollm2`: SmolLM2 with a calculator at step 0, with and without it
(benchmarks/episodes_smollm2.py); `workbench bench episodes-speed`: decode throughput inside episodes
against single-turn decoding (benchmarks/episodes_speed.py); `workbench bench episodes-trl`: the engine's episodes
against TRL's GRPOTrainer(tools=[...]) (benchmarks/episodes_trl.py). docs/episodes-smollm2.md has their figures."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_result, store_path
from workbench.commands.engine import SetOpt


def _at_least_one(command: str, **values: int) -> None:
    from workbench.errors import ConfigError

    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"bench {command}: --{name} must be >= 1, got {value}")


def register(bench: typer.Typer) -> None:
    """Add this part's commands to the `bench` group."""

    @bench.command("episodes-smollm2")
    def bench_episodes_smollm2(
        config: Annotated[str, typer.Option("--config", help="The run config (episodes with [tools]).")]
        = "configs/smollm2-tools.toml",
        samples: Annotated[int, typer.Option("--samples", help="Samples per held-out question (pass@k's k).")] = 8,
        prompts: Annotated[int, typer.Option("--prompts", help="Held-out questions, spread over levels (0: all).")] = 0,
        seed: Annotated[int, typer.Option("--seed", help="Sampling seed (the same in both arms).")] = 0,
        arms: Annotated[str, typer.Option("--arms", help="tool, plain or tool,plain.")] = "tool,plain",
        curve: Annotated[str, typer.Option("--curve", help="Instead: a finished run's curve (held-out pass@1 per "
                                           "evaluation, call and tool error rates per step) from the store.")] = "",
        store: StoreOpt = None,
        set_: SetOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """SmolLM2's step-0 pass@1 / pass@k on its calculator task with the tool (episodes, Hermes calls)
        and without it (the question asked plainly, one turn), 90% intervals, call and error rates."""
        from benchmarks.episodes_smollm2 import bench_episodes_smollm2 as run_bench
        from benchmarks.episodes_smollm2 import run_curve
        from workbench.errors import ConfigError

        if curve:
            print_result(run_curve(str(store_path(store)), curve), as_json)
            return
        _at_least_one("episodes-smollm2", samples=samples, prompts=prompts + 1)
        chosen = tuple(a.strip() for a in arms.split(",") if a.strip())
        if not chosen or any(a not in ("tool", "plain") for a in chosen):
            raise ConfigError(f"bench episodes-smollm2: --arms must name tool and/or plain, got {arms!r}")
        print_result(run_bench(str(store_path(store)), config=config, overrides=list(set_ or []), samples=samples,
                               prompts=prompts, seed=seed, arms=chosen), as_json)

    @bench.command("episodes-speed")
    def bench_episodes_speed(
        config: Annotated[str, typer.Option("--config", help="The run config (episodes with [tools]).")]
        = "configs/organism-tools.toml",
        prompts: Annotated[int, typer.Option("--prompts", help="Held-out prompts, spread over levels.")] = 64,
        samples: Annotated[int, typer.Option("--samples", help="Rows per prompt.")] = 8,
        rounds: Annotated[int, typer.Option("--rounds", help="Alternated rounds (the medians are over them).")] = 5,
        threads: Annotated[int, typer.Option("--threads", help="torch threads.")] = 1,
        store: StoreOpt = None,
        set_: SetOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The model's decode throughput inside episodes (tool time excluded) against single-turn
        decoding of the same prompts and seeds: the same tokens per row (issue #40's baseline) and
        turn-capped; rotated rounds, medians, both ratios, and the ms each calculator call adds."""
        from benchmarks.episodes_speed import bench_episodes_speed as run_bench

        _at_least_one("episodes-speed", prompts=prompts, samples=samples, rounds=rounds, threads=threads)
        print_result(run_bench(str(store_path(store)), config=config, overrides=list(set_ or []), prompts=prompts,
                               samples=samples, rounds=rounds, threads=threads), as_json)

    @bench.command("episodes-trl")
    def bench_episodes_trl(
        config: Annotated[str, typer.Option("--config", help="The run config (episodes, model.chat_tools).")]
        = "configs/smollm2-tools-warm.toml",
        rounds: Annotated[int, typer.Option("--rounds", help="Rounds, each side once a round, order alternated.")] = 2,
        steps: Annotated[int, typer.Option("--steps", help="Timed GRPO steps a side a round (after 1 warm-up).")] = 2,
        prompts: Annotated[int, typer.Option("--prompts", help="Questions per step.")] = 2,
        episodes: Annotated[int, typer.Option("--episodes", help="Episodes per question (the group).")] = 4,
        threads: Annotated[int, typer.Option("--threads", help="torch threads, both sides.")] = 2,
        store: StoreOpt = None,
        set_: SetOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The engine's episodes against TRL 1.16's GRPOTrainer with the calculator as a tool, on the same model, prompt
        tokens, tool and limits: episodes/s per side (whole GRPO steps, medians), their ratio, tool calls and
        model tokens per episode on each side (a WARNING key when a side made no call), the load."""
        from benchmarks.episodes_trl import bench_episodes_trl as run_bench

        _at_least_one("episodes-trl", rounds=rounds, steps=steps, prompts=prompts, episodes=episodes, threads=threads)
        print_result(run_bench(str(store_path(store)), config=config, rounds=rounds, steps=steps, prompts=prompts,
                               episodes=episodes, threads=threads, overrides=list(set_ or [])), as_json)
