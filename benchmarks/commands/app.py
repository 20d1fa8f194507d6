"""`workbench bench app`: every dashboard page's full script run timed on a synthetic store of N
rollouts (and on its copy in a bucket, `--s3`); the store and the result are built in
benchmarks/app_store.py, the page timing is in benchmarks/app_bench.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.app_store import bench_app_result, ensure_bench_store
from workbench.commands.app import check_app
from workbench.commands.common import JsonOpt, StoreOpt, print_json
from workbench.dashboard import PAGES


def bench_app(
    rollouts: Annotated[int, typer.Option("--rollouts", help="Rollouts in the synthetic store.")] = 1_000_000,
    store: StoreOpt = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed rounds per page (a cold and a cached run "
                                         "each; median, p95 and max reported).")] = 5,
    pages: Annotated[str | None, typer.Option("--pages", help="Comma-separated pages to time (default: all; "
                                              f"{', '.join(PAGES)}).")] = None,
    s3: Annotated[bool, typer.Option("--s3", help="Also copy the store into a bucket (`workbench store copy`) "
                                     "and time every page on both, alternately: the S3 server of "
                                     "AWS_ENDPOINT_URL, else a local one (moto, the dev extra) in a "
                                     "subprocess.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Time each dashboard page's full script run (default selections, AppTest) on a synthetic store
    of two runs of N rollouts each (built once, then reused): per page a first run, then --repeats
    rounds of a cold run (data cache cleared) and a cached one; median, p95 and max of wall and CPU
    ms; and the prompt table of the two runs (`prompt_table`: the comparison the Compare prompts
    page draws, timed alone). With --s3, the same on the store's copy in a bucket, side by side."""
    from workbench.store.objectstore import is_object_url

    check_app()
    chosen = [p.strip() for p in pages.split(",")] if pages else None
    unknown = sorted(set(chosen or []) - set(PAGES))
    if unknown:
        raise typer.BadParameter(f"unknown page(s) {unknown}; pages are {', '.join(PAGES)}", param_hint="--pages")
    path = (store or Path("store") / f"bench-{rollouts}").resolve() if not (
        store and is_object_url(store)) else store  # s3://: docs/object-storage.md
    if s3 and is_object_url(path):
        raise typer.BadParameter("--s3 copies a local store into a bucket: give a directory as --store",
                                 param_hint="--s3")
    t0 = time.perf_counter()
    info = ensure_bench_store(path, rollouts, runs=2)
    build_s = time.perf_counter() - t0
    result = {
        **bench_app_result(path, info, repeats=repeats, chosen=chosen, s3=s3),
        "rollouts": rollouts,
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "store": str(path),
        "store_ready_s": round(build_s, 1),
        "store_info": info,
    }
    if as_json:
        print_json(result)
    else:
        typer.echo(json.dumps(result, indent=2, default=str))


def register(bench: typer.Typer) -> None:
    """Add `bench app`."""
    bench.command("app")(bench_app)
