"""`workbench bench allocators` (the allocators compared on the organism, or on the offline
simulator) and `workbench allocators profile` (a workload profile's warm start and the simulator's
predicted savings, written to docs/bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def _names(allocators: str | None) -> list[str] | None:
    return [a.strip() for a in allocators.split(",") if a.strip()] if allocators else None


def _seeds_for(items: list[str] | None) -> dict[str, int]:
    from workbench.errors import ConfigError

    out = {}
    for item in items or []:
        name, _, n = item.partition("=")
        if not name.strip() or not n.strip().isdigit():
            raise ConfigError(f"--seeds-for: {item!r} is not NAME=SEEDS (e.g. uniform=5)")
        out[name.strip()] = int(n)
    return out


def profile_cmd(
    profile: Annotated[str, typer.Argument(help="default, skewed or long.")],
    store: Annotated[Optional[Path], typer.Option("--store", help="Store whose models/ caches the organism (default: the default store).")] = None,
    sim_seeds: Annotated[int, typer.Option("--sim-seeds", help="Simulator seeds per allocator.")] = 3,
    out: Annotated[Optional[Path], typer.Option("--out", help="Where profile-<P>.json/.png and the leverage map go (default docs/bench).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """A workload profile at its warm start: build its organism, measure the pass-rate histogram
    (16 samples per held-out prompt), predict each allocator's token saving with the simulator."""
    from workbench.commands.common import store_path
    from workbench.errors import ConfigError
    from benchmarks.compare import DOCS_BENCH
    from benchmarks.leverage import PROFILES, profile_report, write_profile

    if profile not in PROFILES:
        raise ConfigError(f"allocators profile: {profile!r}; allowed: {', '.join(PROFILES)}")
    report = profile_report(profile, store_path(store), sim_seeds=sim_seeds)
    paths = write_profile(report, out or DOCS_BENCH)
    if json_out:
        print_json(report)
        return
    typer.echo(f"profile {profile}: pass@1 {report['pass1']:.3f}, all-or-nothing prompts "
               f"{report['frac_all_or_nothing']:.2f}, expected zero-signal fraction "
               f"{report['warm_start_zero_signal_frac']:.3f}, histogram {report['pass_rate_histogram']}")
    for name, row in report["simulator"]["allocators"].items():
        typer.echo(f"  {name}: predicted saving {row['predicted_saving']}")
    typer.echo("written: " + ", ".join(str(p) for p in paths))


def bench_allocators(
    simulate: Annotated[bool, typer.Option("--simulate", help="Offline simulator: synthetic prompts, no model (seconds).")] = False,
    allocators: Annotated[Optional[str], typer.Option("--allocators", help="Comma-separated names (default: all).")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Seeds per allocator (metrics are means).")] = 3,
    seeds_for: Annotated[Optional[list[str]], typer.Option("--seeds-for", help="Real: NAME=SEEDS for an allocator that gets another number of seeds, e.g. --seeds-for uniform=5 (repeatable).")] = None,
    reference_last: Annotated[bool, typer.Option("--reference-last", help="Real, with --tokens-per-step: run uniform's seeds after the others (another process may run them meanwhile in the same --keep-in store).")] = False,
    profile: Annotated[str, typer.Option("--profile", help="Real: workload profile, default, skewed or long (see docs/allocators.md).")] = "default",
    steps: Annotated[Optional[int], typer.Option("--steps", help="Steps per run (simulator default 60; real default: the config's).")] = None,
    budget_factor: Annotated[float, typer.Option("--budget-factor", help="Simulator: budget per step as a multiple of uniform's B x n.")] = 1.5,
    budget_kind: Annotated[str, typer.Option("--budget-kind", help="Simulator: rollouts or tokens.")] = "rollouts",
    tokens_per_step: Annotated[Optional[int], typer.Option("--tokens-per-step", help="Real: every allocator's per-step budget in generated tokens (default: what uniform's configured run generates).")] = None,
    overrides: Annotated[Optional[list[str]], typer.Option("--set", help="Real: override a field of configs/organism.toml, e.g. --set eval.every=20 (repeatable).")] = None,
    keep_in: Annotated[Optional[Path], typer.Option("--keep-in", help="Real: keep the runs in this store (default: a temporary one).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Real: where the JSON, table and plots go (default docs/bench).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compare allocators: on the organism (held-out pass@k against generated tokens), or --simulate."""
    names = _names(allocators)
    if not simulate:
        from benchmarks.compare import DOCS_BENCH, compare, write_report

        sets = list(overrides or []) + ([f"steps={steps}"] if steps is not None else [])
        result = compare(names, seeds=seeds, overrides=sets, tokens_per_step=tokens_per_step, store=keep_in,
                         progress=lambda msg: typer.echo(msg, err=True), profile=profile,
                         seeds_for=_seeds_for(seeds_for), reference_last=reference_last)
        paths = write_report(result, out or DOCS_BENCH)
        if json_out:
            print_json(result)
            return
        from benchmarks.compare import markdown_table

        typer.echo(markdown_table(result))
        typer.echo("written: " + ", ".join(str(p) for p in paths))
        return
    steps = 60 if steps is None else steps
    from workbench.allocators.simulate import SimConfig, simulate as run_sim

    rows = run_sim(names, SimConfig(steps=steps, budget_factor=budget_factor, budget_kind=budget_kind), seeds=seeds)
    if json_out:
        print_json(rows)
        return
    from rich.console import Console
    from rich.table import Table

    cols = ["zero_signal_frac", "informative_per_1k", "budget_used_frac", "rollouts_per_step", "pass_gain"]
    table = Table("allocator", *cols, title=f"offline simulator, {steps} steps x {seeds} seeds")
    for r in rows:
        table.add_row(r["allocator"], *(f"{r[c]:.3f}" for c in cols))
    Console().print(table)


def register(bench: typer.Typer) -> None:
    """Add `bench allocators` (`profile_cmd` is added to `workbench allocators` by its entry point)."""
    bench.command("allocators")(bench_allocators)
