"""Commands of the engine: run, resume, demo, config show (see workbench/commands/__init__.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_handle, store_path, store_spec

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
    from workbench.models.organism import META_FILE
    from workbench.models.sources import run_model_dir

    target = run_model_dir(cfg, store, build=False)
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
        from workbench.models.sources import smollm2_config

        cfg = smollm2_config(over)
        what = "SmolLM2 is converted first if missing; a step takes about a minute on 2 CPU cores"
    else:
        raise ConfigError(f"--model: {model!r} is not allowed ('organism' or 'smollm2')")
    typer.echo(f"Training {cfg.name} ({cfg.steps} steps, allocator {cfg.allocator.name}) "
               f"into {root}; {what}.")
    rid = _run_foreground(cfg, store_handle(store), None)
    _summary(root, rid)
    if not no_app and importlib.util.find_spec("streamlit") is not None:
        from workbench.commands.app import exec_app

        typer.echo("Starting the dashboard on it (Ctrl-C stops it): http://127.0.0.1:8501")
        exec_app(root.resolve())
    typer.echo(f"Query it: `workbench runs --store {root}`, or in Python: "
               f"`from workbench.store import open_store; open_store('{root}').run_steps('{rid}')`.")

def register(app: typer.Typer) -> None:
    """Add this part's commands to the top-level app."""
    app.command("run")(run_cmd)
    app.command("resume")(resume_cmd)
    config_app = typer.Typer(help="Run configs: the defaults, a file's values, every field documented.",
                             no_args_is_help=True)
    app.add_typer(config_app, name="config")
    config_app.command("show")(config_show)
    app.command()(demo)
