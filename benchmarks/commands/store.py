"""`workbench bench store` (the writer's ingest and the reader's queries on a synthetic store, or a
store on object storage against the local disk) and `workbench bench logprobs` (what
`logging.token_logprobs` costs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def bench_store_cmd(
    rollouts: Annotated[int, typer.Option("--rollouts", help="Synthetic rollouts to ingest (512 per step).")] = 100_000,
    path: Annotated[Path | None, typer.Option("--path", help="Build the store here and keep it (default: a temp dir, removed); a path holding an interrupted build of the same size resumes it.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed calls per query (after one warm-up).")] = 20,
    compact: Annotated[bool, typer.Option("--compact", help="Also time the queries after `store compact`.")] = False,
    threads: Annotated[Optional[int], typer.Option("--threads", help="DuckDB threads of the store's connections (default: one per core; the engine uses 1).")] = None,
    upkeep_every: Annotated[Optional[int], typer.Option("--upkeep-every", help="Steps between the writer's file merges (default 100; 0 turns them off).")] = None,
    catalog: Annotated[str, typer.Option("--catalog", help="sqlite (a store directory) or postgres (a local PostgreSQL server started for the bench; needs Debian's postgresql package).")] = "sqlite",
    commit_max_rows: Annotated[int, typer.Option("--commit-max-rows", help="Group commit: the most rollouts per transaction.")] = 16384,
    data: Annotated[str, typer.Option("--data", help="local (a store directory), or s3: a store on object storage "
                                      "against a local one in the same run, with a local S3 server (moto, the dev "
                                      "extra), or s3://bucket/prefix: yours, through the AWS variables "
                                      "(docs/object-storage.md).")] = "local",
    faults: Annotated[bool, typer.Option("--faults/--no-faults", help="--data s3: also the S3 server stopped "
                                         "mid-run, kill -9 during commits, two writers on one catalog.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Ingest N synthetic rollouts through the writer API (step-per-commit, group commit flat out, and
    the engine's pattern of a step every 0.5 s, side by side), then time the reader queries (p95 ms).
    With --data s3: S3 against the local disk (ingest, visibility lag, files per 1,000 steps, faults)."""
    from benchmarks.store_bench import CATALOGS, bench_store

    if data != "local":
        from benchmarks.s3bench import bench_object_storage

        if data != "s3" and not data.startswith("s3://"):
            raise typer.BadParameter(f"{data!r}: local, s3 or s3://bucket/prefix", param_hint="--data")
        print_json(bench_object_storage(data=data, steps=max(8, -(-rollouts // 512)), faults=faults))
        return

    if catalog not in CATALOGS:
        raise typer.BadParameter(f"{catalog!r}: must be one of {', '.join(CATALOGS)}", param_hint="--catalog")

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            typer.echo(f"  step {done}/{total}", err=True)

    out = bench_store(rollouts, path=path, repeats=repeats, progress=progress, compact=compact, threads=threads,
                      upkeep_every=upkeep_every, catalog=catalog, commit_max_rows=commit_max_rows)
    if as_json:
        print_json(out)
    else:
        def rate(value: float | None) -> str:
            return "-" if value is None else f"{value:,.0f}"

        base = out["step_per_commit"]
        typer.echo(f"{out['rollouts']:,} rollouts ({out['catalog']} catalog): group commit "
                   f"{rate(out['ingest_rollouts_per_s'])}/s ({rate(out['ingest_rollouts_per_cpu_s'])} per CPU-s), "
                   f"step-per-commit {rate(base['rollouts_per_s'])}/s ({rate(base['rollouts_per_cpu_s'])} per CPU-s); "
                   f"visibility lag p95 {out['visibility_lag_p95_s'] or 0:.2f} s; "
                   f"{out['bytes_per_rollout']:,.0f} B/rollout")
        for name, ms in out["p95_ms"].items():
            typer.echo(f"  p95 {name:<22}{ms:8.1f} ms")


def bench_logprobs_cmd(
    steps: Annotated[int, typer.Option("--steps", help="Steps per run (the first 2 are not timed).")] = 16,
    rounds: Annotated[int, typer.Option("--rounds", help="Alternations of a run with and one without.")] = 6,
    as_json: JsonOpt = False,
) -> None:
    """What `logging.token_logprobs` costs on the tiny run, on and off side by side: median step time
    and store bytes per rollout (and the two columns' bytes in one Parquet file)."""
    from benchmarks.logprob_cost import bench_token_logprobs

    if steps <= 2 or rounds < 1:
        raise typer.BadParameter(f"--steps {steps} --rounds {rounds}: steps must be > 2 and rounds >= 1",
                                 param_hint="--steps/--rounds")
    out = bench_token_logprobs(steps=steps, rounds=rounds)
    if as_json:
        print_json(out)
    else:
        typer.echo(f"step time x{out['step_time_ratio_on_vs_off']:.3f}, store bytes per rollout "
                   f"x{out['store_bytes_ratio_on_vs_off']:.3f} ({out['on']['bytes_per_rollout']:.0f} vs "
                   f"{out['off']['bytes_per_rollout']:.0f} B); one file x{out['one_file']['ratio']:.3f}")


def register(bench: typer.Typer) -> None:
    """Add `bench store` and `bench logprobs`."""
    bench.command("store")(bench_store_cmd)
    bench.command("logprobs")(bench_logprobs_cmd)
