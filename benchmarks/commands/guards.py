"""`workbench bench guards` (scripted faults on the organism: detection, delay, false alarms) and
`workbench bench guard-cost` (the default guards' cost per step)."""

from __future__ import annotations

from typing import Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_result


def bench_guards(
    steps: int = typer.Option(0, "--steps", help="Steps per run (0: the full-size default)."),
    seeds: int = typer.Option(3, "--seeds", help="Clean seeds for the false-alarm count."),
    organism: str = typer.Option("default", "--organism", help="default, or small (a fast test organism)."),
    profile: Optional[list[str]] = typer.Option(None, "--profile", help="Clean runs of these workload "
                                                "profiles only (repeatable; default: every one)."),
    fault: Optional[list[str]] = typer.Option(None, "--fault", help="These faults only (repeatable; "
                                              "default: every one)."),
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Scripted faults on the organism, each injected the real way; detection, delay, false alarms."""
    from benchmarks.guards_bench import FAULTS, PROFILES, run_bench

    result = run_bench(store, steps=steps or None, seeds=seeds, organism=organism,
                       profiles=tuple(profile or PROFILES), faults=tuple(fault or FAULTS))
    print_result(result, as_json)

def bench_guard_cost(
    rollouts: int = typer.Option(512, "--rollouts", help="Rollouts per step."),
    steps: int = typer.Option(12, "--steps", help="Timed steps per response shape."),
    as_json: JsonOpt = False,
) -> None:
    """The default guards' cost per step, on organism-sized and on long (400-token) responses, beside
    the plain per-rollout loop."""
    from benchmarks.guard_cost import guard_cost

    result = guard_cost(rollouts_per_step=rollouts, steps=steps)
    print_result(result, as_json)


def register(bench: typer.Typer) -> None:
    """Add `bench guards` and `bench guard-cost`."""
    bench.command("guards")(bench_guards)
    bench.command("guard-cost")(bench_guard_cost)
