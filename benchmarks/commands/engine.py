"""The engine's benchmarks: `workbench bench engine`, `bench async`, `bench async-allocators` and
`bench learn`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, int_list, print_json
from workbench.commands.engine import SetOpt


def bench_engine(
    json_: JsonOpt = False,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps per side.")] = 12,
    trl: Annotated[bool, typer.Option("--trl/--no-trl", help="Measure TRL's GRPOTrainer too.")] = True,
    backend: Annotated[str, typer.Option("--backend", help="'ray' also times Ray rollout workers "
                                         "side by side with the in-process run.")] = "hf",
    workers: Annotated[str, typer.Option("--workers", help="Ray worker counts to time, e.g. 1,2.")] = "1,2",
    rounds: Annotated[int, typer.Option("--rounds", help="Alternations of the logging-on and logging-off "
                                        "runs (each --steps timed steps).")] = 2,
    set_: SetOpt = None,
) -> None:
    """Engine speed: steps/s, rollouts/s, phase shares, logging overhead, rollout vs bare, ratio vs TRL
    (and Ray workers vs in-process with --backend ray)."""
    from workbench.errors import ConfigError
    from benchmarks.engine_bench import bench_engine as run_bench

    if backend not in ("hf", "ray"):
        raise ConfigError(f"--backend: {backend!r} is not allowed ('hf' or 'ray')")
    counts = int_list("--workers", workers)
    if backend == "ray" and (not counts or min(counts) < 1):
        raise ConfigError(f"--workers: {workers!r} needs worker counts >= 1")
    if backend == "ray":
        from workbench.rollout import require

        require("ray")
    if rounds < 1:
        raise ConfigError(f"--rounds: {rounds} is not allowed (an integer >= 1)")
    out = run_bench(steps=steps, with_trl=trl, overrides=list(set_ or []), backend=backend, workers=counts,
                    rounds=rounds)
    if out.get("trl_missing"):
        typer.echo(f"bench engine: TRL's GRPOTrainer (the peer) was not measured: {out['trl_missing']}", err=True)
    if json_:
        print_json(out)
    else:
        for k, v in out.items():
            typer.echo(f"{k}: {v}")


def bench_async(
    json_: JsonOpt = False,
    steps: Annotated[int, typer.Option("--steps", help="Steps per run (the first 2 and the last are not timed).")] = 10,
    seeds: Annotated[int, typer.Option("--seeds", help="Runs per setting, seeds 0..N-1.")] = 1,
    etas: Annotated[str, typer.Option("--etas", help="Staleness bounds to run, e.g. 1,2.")] = "1,2",
    profiles: Annotated[str, typer.Option("--profiles", help="Workload profiles: default,long.")] = "default,long",
    small: Annotated[bool, typer.Option("--small", help="On the small test organism (a quick look).")] = False,
    ray_workers: Annotated[int, typer.Option("--ray-workers", help="Also run with this many Ray workers "
                                             "(synchronous and at each eta); 0: not.")] = 0,
    thread: Annotated[bool, typer.Option("--thread", help="Also run each eta with the generator as a "
                                         "thread of the trainer's process (pipeline.generator=thread).")] = False,
    partial: Annotated[bool, typer.Option(help="Also run each eta with partial rollouts on.")] = True,
    store: StoreOpt = None,
    set_: SetOpt = None,
) -> None:
    """The asynchronous pipeline vs the synchronous loop: rollouts/s, speedup, idle shares, the bound
    max(t_gen, t_train) and efficiency, held-out pass@1 (docs/async.md)."""
    from workbench.errors import ConfigError
    from benchmarks.async_bench import PROFILES, bench_async as run_bench, markdown

    eta_list = int_list("--etas", etas)
    if not eta_list or min(eta_list) < 1:
        raise ConfigError(f"--etas: {etas!r} needs staleness bounds >= 1 (the synchronous runs are always made)")
    names = [p.strip() for p in profiles.split(",") if p.strip()]
    for p in names:
        if p not in PROFILES:
            raise ConfigError(f"--profiles: {p!r} is not allowed (one of {', '.join(PROFILES)})")
    if ray_workers < 0:
        raise ConfigError(f"--ray-workers: {ray_workers} is not allowed (an integer >= 0)")
    if ray_workers:
        from workbench.rollout import require

        require("ray")
    if small and names != ["default"]:
        raise ConfigError("--profiles: only 'default' with --small (the small organism knows no other profile)")
    out = run_bench(steps=steps, seeds=seeds, etas=eta_list, profiles=names, overrides=list(set_ or []),
                    small=small, cache=store or "store", ray_workers=ray_workers, thread=thread,
                    partial=partial)
    if json_:
        print_json(out)
    else:
        typer.echo(markdown(out))


def bench_async_allocators(
    json_: JsonOpt = False,
    profile: Annotated[str, typer.Option("--profile", help="Workload profile whose measured warm start "
                                         "the simulator starts from.")] = "skewed",
    allocators: Annotated[str, typer.Option("--allocators", help="Comma-separated names (uniform is "
                                            "always run: the reference).")] = "uniform,value_tracker,selective,dynamic_sampling",
    etas: Annotated[str, typer.Option("--etas", help="Staleness values, e.g. 0,1,2.")] = "0,1,2",
    seeds: Annotated[int, typer.Option("--seeds", help="Simulated runs per allocator and eta.")] = 20,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps per run (default: the profile's).")] = None,
) -> None:
    """Does adaptive allocation still pay when its statistics and the sampling policy are eta
    versions stale? The allocation simulator's answer on a profile's warm start (docs/bench/async.md)."""
    from workbench.errors import ConfigError
    from benchmarks.stale_allocators import bench_stale_allocators

    eta_list = tuple(int_list("--etas", etas))
    if not eta_list or min(eta_list) < 0:
        raise ConfigError(f"--etas: {etas!r} needs staleness values >= 0")
    names = tuple(a.strip() for a in allocators.split(",") if a.strip())
    out = bench_stale_allocators(profile=profile, allocators=names, etas=eta_list, seeds=seeds, steps=steps)
    if json_:
        print_json(out)
        return
    for eta, rows in out["by_eta"].items():
        for name, row in rows.items():
            saving = "" if name == "uniform" else (
                f", saving {row['saving']:.2f} [{row['saving_ci90'][0]:.2f}, {row['saving_ci90'][1]:.2f}]")
            typer.echo(f"eta {eta} {name}: final pass {row['final_pass']:.3f}{saving}")


def bench_learn(
    json_: JsonOpt = False,
    seeds: Annotated[int, typer.Option("--seeds", help="Runs with seeds 0..N-1.")] = 3,
    store: StoreOpt = None,
    set_: SetOpt = None,
    model: Annotated[str, typer.Option("--model", help='"organism" (the default experiment) or "smollm2" '
                                       "(configs/smollm2.toml: about a minute per step on 2 CPU cores).")]
    = "organism",
) -> None:
    """Does the default experiment learn? Held-out pass@1 (T=1) gain over the warm start, per seed."""
    from workbench.errors import ConfigError
    from benchmarks.engine_bench import bench_learn as run_bench

    if model not in ("organism", "smollm2"):
        raise ConfigError(f"--model: {model!r} is not allowed ('organism' or 'smollm2')")
    out = run_bench(seeds=seeds, store=store, overrides=list(set_ or []), model=model)
    if json_:
        print_json(out)
    else:
        for k, v in out.items():
            typer.echo(f"{k}: {v}")


def register(bench: typer.Typer) -> None:
    """Add `bench engine`, `bench async`, `bench async-allocators` and `bench learn`."""
    bench.command("engine")(bench_engine)
    bench.command("async")(bench_async)
    bench.command("async-allocators")(bench_async_allocators)
    bench.command("learn")(bench_learn)
