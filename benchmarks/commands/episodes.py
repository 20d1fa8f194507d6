"""`workbench bench episodes`: the organism's tool task at its warm start, with and without the calculator
(benchmarks/episodes_bench.py); `workbench bench episodes-learning`: RL on it with and without the tool,
over seeds (benchmarks/episodes_learning.py); `workbench bench episode-allocation`: GRPO-RoC and ARPO branching
against uniform episodes at the same budget (benchmarks/episode_allocation.py); `workbench bench
episode-decision-bytes`: what their decision rows add to the store's bytes per episode
(benchmarks/episode_decision_bytes.py)."""

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

    @bench.command("episodes-learning")
    def bench_episodes_learning(
        seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated run seeds (each arm runs each)."),
        steps: int = typer.Option(60, "--steps", help="Training steps per run."),
        budget: int = typer.Option(2560, "--budget", help="Model tokens per step, both arms."),
        no_tool_budget: int = typer.Option(0, "--no-tool-budget",
                                           help="Model tokens per step of the arm without the tool (0: --budget)."),
        threads: int = typer.Option(1, "--threads", help="torch threads per run."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """RL on the tools organism with the calculator (episodes) and without it (single-turn), at the same
        model-token budget: held-out pass@1's rise and the end-of-run difference with 90% t-intervals over
        seeds, and the tool-call and tool error rates per step."""
        from benchmarks.episodes_learning import bench_episodes_learning as run_bench
        from workbench.errors import ConfigError

        try:
            seed_list = tuple(int(x) for x in seeds.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"bench episodes-learning: --seeds must be integers separated by commas, got {seeds!r}")
        for name, value in (("--steps", steps), ("--budget", budget), ("--threads", threads), ("seeds", len(seed_list)),
                            ("--no-tool-budget", no_tool_budget or 1)):
            if value < 1:
                raise ConfigError(f"bench episodes-learning: {name} must be >= 1, got {value}")
        result = run_bench(str(store_path(store)), seeds=seed_list, steps=steps, budget=budget,
                           no_tool_budget=no_tool_budget or None, threads=threads)
        print_result(result, as_json)

    @bench.command("episodes-page")
    def bench_episodes_page(
        episodes: int = typer.Option(1000, "--episodes", help="Rollouts in each run (episodes of 6 turns, or single-turn)."),
        repeats: int = typer.Option(5, "--repeats", help="Timed rounds (a cold and a cached run each)."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The Rollouts page's first view on a run of N episodes of 6 turns, beside the same page on N
        single-turn rollouts (two stores under --store, built once), timed alternately."""
        from benchmarks.episodes_page import bench_episodes_page as run_bench
        from workbench.errors import ConfigError

        for name, value in (("--episodes", episodes), ("--repeats", repeats)):
            if value < 1:
                raise ConfigError(f"bench episodes-page: {name} must be >= 1, got {value}")
        print_result(run_bench(str(store_path(store)), episodes=episodes, repeats=repeats), as_json)

    @bench.command("episode-allocation")
    def bench_episode_allocation(
        seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated run seeds (each arm runs each)."),
        steps: int = typer.Option(40, "--steps", help="Training steps per run."),
        budget: int = typer.Option(1024, "--budget", help="Model tokens per step, every arm."),
        threads: int = typer.Option(1, "--threads", help="torch threads per run."),
        arms: str = typer.Option("uniform,roc,arpo,aepo", "--arms",
                                 help="Comma-separated arms: uniform, roc, arpo, arpo_hard, aepo "
                                 "(uniform always runs)."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Uniform episodes, GRPO-RoC, ARPO branching (soft or hard) and AEPO on the tools organism at the same
        model-token budget: held-out pass@1 with 90% t-intervals over seeds, RoC's trained correct episodes' tool
        error rate against uniform's, the entropy after tool results against the first turn's, and the store
        bytes the decision columns add."""
        from benchmarks.episode_allocation import bench_episode_allocation as run_bench
        from workbench.errors import ConfigError

        try:
            seed_list = tuple(int(x) for x in seeds.split(",") if x.strip())
        except ValueError:
            raise ConfigError(f"bench episode-allocation: --seeds must be integers separated by commas, got {seeds!r}")
        for name, value in (("--steps", steps), ("--budget", budget), ("--threads", threads), ("seeds", len(seed_list))):
            if value < 1:
                raise ConfigError(f"bench episode-allocation: {name} must be >= 1, got {value}")
        print_result(run_bench(str(store_path(store)), seeds=seed_list, steps=steps, budget=budget, threads=threads,
                               arms=tuple(a.strip() for a in arms.split(",") if a.strip())),
                     as_json)

    @bench.command("episode-decision-bytes")
    def bench_episode_decision_bytes(
        steps: int = typer.Option(4, "--steps", help="Training steps per run."),
        seed: int = typer.Option(0, "--seed", help="Run seed (every arm)."),
        budget: int = typer.Option(1024, "--budget", help="Model tokens per step, every arm."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Uniform, GRPO-RoC, ARPO, AEPO and RoC beside each on the tools organism: the store bytes per episode
        and what the decision columns (and RoC's reason text) add, in percent, as committed and compacted (the
        bound: 5%)."""
        from benchmarks.episode_decision_bytes import bench_episode_decision_bytes as run_bench
        from workbench.errors import ConfigError

        for name, value in (("--steps", steps), ("--budget", budget)):
            if value < 1:
                raise ConfigError(f"bench episode-decision-bytes: {name} must be >= 1, got {value}")
        print_result(run_bench(str(store_path(store)), steps=steps, seed=seed, budget=budget), as_json)
