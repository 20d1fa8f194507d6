"""Reliability benchmarks: `workbench bench chaos` (crash anywhere: SIGKILL at random moments, resume,
compare with an uninterrupted run) and `workbench bench soak` (runs, dashboard, notebook reader and
live control on one store for minutes). See docs/reliability.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def register(bench: typer.Typer) -> None:
    """Add `workbench bench chaos` and `workbench bench soak`."""

    @bench.command("chaos")
    def bench_chaos(
        kills: Annotated[int, typer.Option("--kills", help="SIGKILLs of the run, each followed by a resume.")] = 20,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the kill schedule (points, counts, delays).")] = 0,
        steps: Annotated[int, typer.Option("--steps", help="Training steps of the shortened experiment.")] = 24,
        organism: Annotated[str, typer.Option("--organism", help="small (built in seconds) or default "
                                              "(the default experiment's, built once in minutes).")] = "small",
        store: Annotated[Optional[Path], typer.Option("--store", help="Store directory to run in (kept "
                                                      "afterwards). Default: a temporary one, removed after.")] = None,
        eta: Annotated[int, typer.Option("--eta", help="The asynchronous mode: runs with pipeline.max_staleness "
                                         "= ETA, checked for steps and rollouts trained once and the bound kept.")] = 0,
        as_json: JsonOpt = False,
    ) -> None:
        """Crash anywhere: kill a run at random moments (generation, update, store commit, checkpoint,
        evaluation, control, timer), resume after each, compare every stored row with an uninterrupted run."""
        from workbench.errors import WorkbenchError
        from benchmarks.chaos import bench_chaos as run_bench

        if organism not in ("small", "default"):
            raise WorkbenchError(f"bench chaos: --organism must be small or default, got {organism!r}")
        out = run_bench(kills, seed=seed, steps=steps, organism=organism, store_dir=store, eta=eta)
        if as_json:
            print_json(out)
            return
        if eta:
            typer.echo(f"eta {eta}: kills {out['kills']} (by point {out['kills_by_point']}), resumed {out['resumed']}, "
                       f"steps lost {out['steps_lost']}, duplicated {out['steps_duplicated']}, rollouts lost "
                       f"{out['rollouts_lost']}, twice {out['rollouts_twice']}, staleness max {out['staleness_max']}, "
                       f"ok {out['ok']}")
            return
        typer.echo(f"kills {out['kills']} (by point {out['kills_by_point']}), resumed {out['resumed']}, "
                   f"steps lost {out['steps_lost']}, duplicated {out['steps_duplicated']}, rows mismatched "
                   f"{out['rows_mismatched']}, final equal {out['final_equal']}")

    @bench.command("soak")
    def bench_soak(
        minutes: Annotated[float, typer.Option("--minutes", help="How long everything runs at once.")] = 10.0,
        catalog: Annotated[str, typer.Option("--catalog", help="sqlite (a store directory) or postgres "
                                             "(a throw-away local PostgreSQL server holds the catalog).")] = "sqlite",
        seed: Annotated[int, typer.Option("--seed", help="Seed of the control commands.")] = 0,
        workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Directory to run in (kept "
                                                        "afterwards). Default: a temporary one, removed after.")] = None,
        browse: Annotated[str, typer.Option("--browse", help="person: the pages in turn, the live page "
                                            "refreshing, the data cache kept; hammer: every page each second, "
                                            "cache cleared.")] = "person",
        baseline_s: Annotated[Optional[float], typer.Option("--baseline-s", help="Seconds the runs train alone "
                                                            "first (steps/s without the dashboard); default a "
                                                            "fifth of the soak, 15-60 s.")] = None,
        idle_s: Annotated[Optional[float], typer.Option("--idle-s", help="Seconds the dashboard browses the same "
                                                        "store after the runs stop (page times without the load, "
                                                        "for the ratio); default a fifth of the soak, 15-60 s; 0: "
                                                        "none.")] = None,
        notebook: Annotated[bool, typer.Option("--notebook/--no-notebook", help="The notebook-style reader "
                                               "(every run's rollouts scanned every 0.5 s, torn reads checked) "
                                               "beside the dashboard; --no-notebook: the runs and the dashboard "
                                               "only, the load the page-time targets name.")] = True,
        as_json: JsonOpt = False,
    ) -> None:
        """Load: three runs writing one store, the dashboard's pages browsed as a person does (then again
        with the runs stopped), a notebook-style reader scanning rollouts, control commands every few
        seconds; failures, torn reads, page times per page, the runs' steps/s, the load average."""
        from benchmarks.soak import bench_soak as run_bench

        out = run_bench(minutes, catalog=catalog, seed=seed, workdir=workdir, browse=browse, baseline_s=baseline_s,
                        idle_s=idle_s, notebook=notebook)
        if as_json:
            print_json(out)
            return
        idle = out["page_ms"]["idle"]["overall"]
        typer.echo(f"commits {out['commits']}, failed {out['failed_commits']}; reader queries "
                   f"{out['reader_queries']}, errors {out['reader_errors']}, torn {out['torn_reads']}; controls "
                   f"applied {out['controls_applied']}, rejected {out['controls_rejected']}; p95 reader ms "
                   f"{out['p95_reader_ms']}; pages p50/p95 ms {out['page_ms']['overall']['p50_ms']}/"
                   f"{out['page_ms']['overall']['p95_ms']} (with no run training "
                   f"{idle['p50_ms']}/{idle['p95_ms']}); steps/s alone {out['steps_per_s']['alone']}, with the "
                   f"dashboard {out['steps_per_s']['with_dashboard']}")
