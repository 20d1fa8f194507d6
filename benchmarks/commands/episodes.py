"""`workbench bench episodes`: the organism's tool task at its warm start, with and without the calculator
(benchmarks/episodes_bench.py)."""

from __future__ import annotations

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_result, store_path


def register(bench: typer.Typer) -> None:
    """Add this part's commands to the `bench` group."""

    @bench.command("episodes")
    def bench_episodes(
        samples: int = typer.Option(8, "--samples", help="Episodes per held-out prompt in each arm (pass@k's k)."),
        seed: int = typer.Option(0, "--seed", help="The sampling seed (the same in both arms)."),
        threads: int = typer.Option(1, "--threads", help="torch threads while sampling."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The tools organism's step-0 pass@1 / pass@k with and without the calculator, its call and error
        rates and the entropy after tool results (builds the organism of task.profile "tools" first)."""
        from benchmarks.episodes_bench import bench_episodes as run_bench
        from workbench.errors import ConfigError

        for name, value in (("--samples", samples), ("--threads", threads)):
            if value < 1:
                raise ConfigError(f"bench episodes: {name} must be >= 1, got {value}")
        result = run_bench(str(store_path(store)), samples=samples, seed=seed, threads=threads)
        print_result(result, as_json)
