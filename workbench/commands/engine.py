"""Commands of the engine: run, resume, demo, config show, bench engine, bench learn
(see workbench/commands/__init__.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, int_list, print_json, store_handle, store_path, store_spec

if TYPE_CHECKING:
    from workbench.store.handle import StoreHandle

ConfigArg = Annotated[
    Optional[Path],
    typer.Argument(help="Run config (TOML). Default: the default experiment on the model organism.",
                   show_default=False),
]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config field: --set optim.lr=5e-5 (repeatable; value read as TOML)."),
]


def _planned_steps(root: Path, run_id: str) -> int:
    """The training steps in `run_id`'s config; a store or run that does not exist raises StoreError."""
    from workbench.store import open_store

    with open_store(root, read_only=True) as st:
        return int(st.run(run_id)["config"].get("steps") or 0)


def _progress(total: int, title: str):
    """A rich progress bar and the on_step callback that advances it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"), transient=False,
    )
    task = progress.add_task(title, total=total, info="")

    def on_step(step: int, m: dict) -> None:
        if step == 0:
            progress.update(task, info=f"warm start: eval pass@1 {m.get('eval/pass1', 0):.3f}")
            return
        info = (f"reward {m.get('rollout/reward_mean', 0):.3f}  entropy {m.get('rollout/entropy_mean', 0):.3f}  "
                f"tokens {m.get('rollout/tokens_generated', 0)}  {m.get('perf/rollouts_per_s', 0):.0f} rollouts/s")
        if "eval/pass1" in m:
            info += f"  eval pass@1 {m['eval/pass1']:.3f}"
        progress.update(task, completed=step, info=info)

    return progress, on_step


def _run_foreground(cfg, store: StoreHandle, run_id: Optional[str], quiet: bool = False) -> str:
    from workbench.engine import run

    if quiet:
        return run(cfg, store=store, run_id=run_id)
    _announce_organism_build(cfg, store.folder())
    progress, on_step = _progress(cfg.steps, cfg.name)
    with progress:
        return run(cfg, store=store, run_id=run_id, on_step=on_step)


def _announce_organism_build(cfg, store: Path) -> None:
    """Say so before the organism is built (or SmolLM2 converted): minutes with no progress bar otherwise."""
    if cfg.model.path == "smollm2":
        from workbench.models.sources import META_FILE as CONVERTED, smollm2_dir

        if not (smollm2_dir(store) / CONVERTED).is_file():
            typer.echo(f"Converting SmolLM2-135M-Instruct (4-bit GGUF -> safetensors) into {smollm2_dir(store)} "
                       "first (about a minute on 2 CPU cores; cached for later runs).", err=True)
        return
    if cfg.model.path != "organism":
        return
    from workbench.engine.setup import organism_recipe
    from workbench.models.organism import META_FILE, organism_dir

    target = organism_dir(store, organism_recipe(cfg))
    if not (target / META_FILE).is_file():
        typer.echo(f"Building the model organism into {target} first (about 3 minutes on 2 CPU cores; "
                   f"cached for later runs).", err=True)


def _summary(store: Path, run_id: str) -> None:
    from workbench.store import open_store

    with open_store(str(store)) as st:
        info = st.run(run_id)
        steps = st.run_steps(run_id)
        evals = st.evals(run_id)
    typer.echo(f"run {run_id} ({info.get('name')}): {info.get('status')}, {steps.height} steps in {store_spec(store)}")
    if evals.height:
        import polars as pl

        by_step = evals.group_by("step").agg((pl.col("correct").sum() / pl.col("samples").sum()).alias("pass1"))
        by_step = by_step.sort("step")
        first, last = by_step.row(0, named=True), by_step.row(-1, named=True)
        typer.echo(f"held-out pass@1: {first['pass1']:.3f} at step {first['step']} -> "
                   f"{last['pass1']:.3f} at step {last['step']}")


def run_cmd(
    config: ConfigArg = None,
    store: StoreOpt = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps (overrides the config).")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of the run.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Run name.")] = None,
    set_: SetOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="Start as a background process; print the run id.")] = False,
    run_id: Annotated[Optional[str], typer.Option("--run-id", help="Adopt this run row (created by a launcher).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Train: GRPO-family RL with the configured allocator, every rollout logged to the store."""
    from workbench.config import load_config

    overrides = list(set_ or [])
    overrides += [f"steps={steps}"] if steps is not None else []
    overrides += [f"seed={seed}"] if seed is not None else []
    overrides += [f'name="{name}"'] if name else []
    cfg = load_config(config, overrides)  # every bad value rejected before anything starts
    root = store_path(store)
    if not detach:
        from workbench.control.priority import apply_run_priority

        apply_run_priority()  # a detached run's launcher asked for a lower priority
    if detach:
        from workbench.control.launch import launch

        rid = launch(str(config) if config else None, store=store_spec(root), overrides=overrides, name=name)
        typer.echo(rid)
        return
    rid = _run_foreground(cfg, store_handle(root), run_id, quiet=quiet)
    _summary(root, rid)

def resume_cmd(
    run: Annotated[str, typer.Argument(help="Run id to continue.")],
    store: StoreOpt = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Train up to this step instead.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Continue a stopped or crashed run from its last checkpoint (the store is rolled back to it)."""
    from workbench.control.priority import apply_run_priority
    from workbench.engine import resume

    apply_run_priority()  # started by the dashboard's Resume: below the dashboard
    root = store_path(store)
    planned = _planned_steps(root, run)  # an unknown run or store is refused before any bar is drawn
    handle = store_handle(root)
    if quiet:
        resume(handle, run, steps=steps)
    else:
        progress, on_step = _progress(steps or planned, f"resume {run}")
        with progress:
            resume(handle, run, steps=steps, on_step=on_step)
    _summary(root, run)


def config_show(
    config: ConfigArg = None,
    set_: SetOpt = None,
    json_: JsonOpt = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Every field as a Markdown reference.")] = False,
) -> None:
    """Print the config in force (defaults, then CONFIG, then --set) as commented TOML."""
    from workbench.config import load_config
    from workbench.config_docs import to_toml
    from workbench.config_docs import config_markdown

    if markdown:
        typer.echo(config_markdown(), nl=False)
        return
    cfg = load_config(config, list(set_ or []))
    if json_:
        print_json(cfg.to_dict())
    else:
        typer.echo(to_toml(cfg), nl=False)

def demo(
    store: StoreOpt = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps.")] = None,
    no_app: Annotated[bool, typer.Option("--no-app", help="Do not start the dashboard afterwards.")] = False,
    model: Annotated[str, typer.Option("--model", help='"organism" (the default experiment) or "smollm2" '
                                       "(SmolLM2-135M-Instruct on one-digit additions in words, "
                                       "configs/smollm2.toml).")] = "organism",
) -> None:
    """The main job: the default experiment on the model organism (or a real model), then the
    dashboard on it."""
    from workbench.config import load_config
    from workbench.errors import ConfigError

    root = store_path(store)
    over = [f"steps={steps}"] if steps else []
    if model == "organism":
        default = Path("configs/organism.toml")
        cfg = load_config(default if default.is_file() else None, over)
        what = "the organism is built first if missing"
    elif model == "smollm2":
        from workbench.experiments.real_model import smollm2_config

        cfg = smollm2_config(over)
        what = "SmolLM2 is converted first if missing; a step takes about a minute on 2 CPU cores"
    else:
        raise ConfigError(f"--model: {model!r} is not allowed ('organism' or 'smollm2')")
    typer.echo(f"Training {cfg.name} ({cfg.steps} steps, allocator {cfg.allocator.name}) "
               f"into {root}; {what}.")
    rid = _run_foreground(cfg, root, None)
    _summary(root, rid)
    if not no_app and importlib.util.find_spec("streamlit") is not None:
        from workbench.commands.app import exec_app

        typer.echo("Starting the dashboard on it (Ctrl-C stops it): http://127.0.0.1:8501")
        exec_app(root.resolve())
    typer.echo(f"Query it: `workbench runs --store {root}`, or in Python: "
               f"`from workbench.store import open_store; open_store('{root}').run_steps('{rid}')`.")

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
    from workbench.experiments.engine_bench import bench_engine as run_bench

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
    from workbench.experiments.async_bench import PROFILES, bench_async as run_bench, markdown

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
    from workbench.experiments.stale_allocators import bench_stale_allocators

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
    from workbench.experiments.engine_bench import bench_learn as run_bench

    if model not in ("organism", "smollm2"):
        raise ConfigError(f"--model: {model!r} is not allowed ('organism' or 'smollm2')")
    out = run_bench(seeds=seeds, store=store, overrides=list(set_ or []), model=model)
    if json_:
        print_json(out)
    else:
        for k, v in out.items():
            typer.echo(f"{k}: {v}")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add this part's commands to the top-level app and the `bench` group."""
    app.command("run")(run_cmd)
    app.command("resume")(resume_cmd)
    config_app = typer.Typer(help="Run configs: the defaults, a file's values, every field documented.",
                             no_args_is_help=True)
    app.add_typer(config_app, name="config")
    config_app.command("show")(config_show)
    app.command()(demo)
    bench.command("engine")(bench_engine)
    bench.command("async")(bench_async)
    bench.command("async-allocators")(bench_async_allocators)
    bench.command("learn")(bench_learn)
