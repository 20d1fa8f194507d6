"""Other engines' runs: `workbench import FORMAT PATH`, `workbench replay RUN` (see docs/import.md).
Thin: parse, call workbench.integrations / workbench.analysis.replay, print."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path
from workbench.errors import DataError


def _formats() -> list[str]:
    from workbench.integrations import FORMATS

    return FORMATS.names()



def _print_report(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(out)
        return
    steps = (f"steps {out['first_step']}..{out['last_step']}" if out["steps_imported"] else "no new steps")
    typer.echo(f"{out['run_id']}: imported {out['steps_imported']} step(s) ({steps}), {out['rollouts']:,} "
               f"rollouts, {out['eval_steps_imported']} eval step(s) ({out['eval_samples']:,} samples)")
    if out["skipped_rows"] or out["skipped_files"]:
        typer.echo(f"skipped {out['skipped_rows']} bad row(s)/file(s):", err=True)
        for s in out["skipped"]:
            typer.echo(f"  {s['count']:>6}  {s['reason']}  (first at {s['first']})", err=True)


def _opt(key: str, extra: str = "") -> Any:
    """The Typer option of import option `key`, its help read from the format registry."""
    from workbench.integrations import FORMATS, OPTIONS

    opt = OPTIONS[key]
    formats = "/".join(n for n in FORMATS.names() if key in FORMATS.get(n).options)
    return typer.Option(opt.flag, help=f"{formats}: {opt.help}.{extra}")


def _path_help() -> str:
    from workbench.integrations import FORMATS

    return "; ".join(f"{n}: {FORMATS.get(n).path}" for n in FORMATS.names()) + "."


def import_cmd(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help=" | ".join(_formats()))],
    path: Annotated[Path, typer.Argument(help=f"The dump to import ({_path_help()})")],
    name: Annotated[Optional[str], typer.Option("--name", help="Run name (default: FORMAT-<folder name>). "
                                                "The same folder and name import into the same run.")] = None,
    store: StoreOpt = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep watching the folder and import each new "
                                         "step file once complete (Ctrl-C to stop).")] = False,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Import what is good; print counts of the "
                                           "bad rows skipped and why.")] = False,
    val_dir: Annotated[Optional[str], _opt("val_dir")] = None,
    fmap: Annotated[Optional[str], _opt("map")] = None,
    reward_weights: Annotated[Optional[str], _opt("reward_weights")] = None,
    tokenizer: Annotated[Optional[str], _opt("tokenizer")] = None,
    correct_if: Annotated[Optional[str], _opt("correct_if")] = None,
    poll_s: Annotated[float, typer.Option("--poll-s", help="--follow: seconds between polls.")] = 2.0,
    idle_exit_s: Annotated[float, typer.Option("--idle-exit-s", help="--follow: stop after this many "
                                               "seconds without a new step (0: never).")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Import a verl, TRL, NeMo-RL or prime-rl rollout dump (or any JSONL/Parquet through --map) as a run; run it
    again (or --follow) to add only new steps."""
    from workbench.integrations import import_options, importer
    from workbench.store import open_store

    options = import_options(fmt, dict(val_dir=val_dir, map=fmap, reward_weights=reward_weights,
                                       tokenizer=tokenizer, correct_if=correct_if))
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    with open_store(store_path(store)) as s:
        imp = importer(s, fmt, path, name=name, options=options, skip_bad=skip_bad)
        report = imp.run_once()
        _print_report(report.as_dict(imp.problems), as_json)
        if not follow:
            return
        from workbench.integrations.follow import follow as follow_loop

        typer.echo(f"following {imp.path} (every {poll_s:g} s; Ctrl-C to stop)", err=True)
        follow_loop(imp, poll_s=poll_s, idle_exit_s=idle_exit_s,
                    on_report=lambda r: _print_report(r.as_dict(imp.problems), as_json))


def replay_cmd(
    run: Annotated[str, typer.Argument(help="Run id (an imported run or one of ours).")],
    allocator: Annotated[Optional[list[str]], typer.Option("--allocator", "-a", help="Allocator to replay "
                                                           "(repeatable; default: the run's own).")] = None,
    param: Annotated[Optional[list[str]], typer.Option("--param", "-p", help="name=value for the allocator "
                                                       "(repeatable; with one --allocator).")] = None,
    every: Annotated[bool, typer.Option("--all", help="Replay every registered allocator with its "
                                        "default parameters.")] = False,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of the replay (default: the run's).")] = None,
    episodes: Annotated[bool, typer.Option("--episodes", help="On an episodes run: what GRPO-RoC and ARPO would "
                                           "have spent, or one line each saying why the store cannot tell "
                                           "(docs/episode-allocation.md).")] = False,
    roc_oversample: Annotated[Optional[int], typer.Option("--roc-oversample", help="With --episodes: RoC's "
                                                          "factor (default: the run's own).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay a run's logged outcomes under our allocators: rollouts, generated tokens, informative groups
    and zero-signal fraction each would have had, beside what the run itself did. With --episodes: what
    GRPO-RoC (which episodes kept, which dropped) and ARPO would have spent on an episodes run."""
    if episodes:
        _replay_episodes(run, roc_oversample, seed, store, as_json)
        return
    if roc_oversample is not None:
        raise DataError("replay: --roc-oversample needs --episodes")
    from workbench.allocators import available_allocators
    from workbench.control.commands import parse_params
    from workbench.integrations.whatif import whatif_rows
    from workbench.store import open_store

    names = list(available_allocators()) if every else list(allocator or [])
    params = parse_params(param or [])
    if params and len(names) != 1:
        raise DataError("replay: -p/--param needs exactly one --allocator")
    with open_store(store_path(store), read_only=True) as s:
        chosen = {name: (params or None) for name in names} or None
        out = whatif_rows(s, run, chosen, seed=seed)
    logged, rows = out["logged"], out["replays"]
    if as_json:
        print_json(out)
        return
    cols = ["label", "rollouts", "tokens", "groups", "informative_groups", "informative_per_1k",
            "zero_signal_frac"]
    typer.echo("  ".join(f"{c:>18}" for c in cols))
    for row in [logged, *rows]:
        typer.echo("  ".join(f"{row[c]:>18.3f}" if isinstance(row.get(c), float) else f"{str(row.get(c)):>18}"
                             for c in cols))


def _replay_episodes(run: str, roc_oversample: int | None, seed: int | None, store: Any, as_json: bool) -> None:
    from workbench.analysis.replay_episodes import episode_replay
    from workbench.store import open_store

    with open_store(store_path(store), read_only=True) as s:
        out = episode_replay(s, run, roc_oversample=roc_oversample, seed=seed)
    decisions = out["roc"].pop("decisions", None)
    if as_json:
        print_json({**out, "roc": {**out["roc"], "decisions": None if decisions is None else decisions.to_dicts()}})
        return
    for method in ("roc", "arpo"):
        answer = out[method]
        if "refused" in answer:
            typer.echo(answer["refused"])
            continue
        cannot = answer.pop("cannot", None)
        typer.echo(f"{'GRPO-RoC' if method == 'roc' else 'ARPO'}: " + ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in answer.items() if v is not None))
        if cannot:
            typer.echo(f"ARPO cannot replay {cannot}")


def register(app: typer.Typer) -> None:
    """Add `workbench import` and `workbench replay`."""
    app.command("import")(import_cmd)
    app.command("replay")(replay_cmd)
