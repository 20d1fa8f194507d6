"""`workbench bench store`: ingest a synthetic run through the writer API, then time the readers.

Ingest is timed inside `write_step` only (building the synthetic Arrow tables is not the store's
work), as wall time and as this process's CPU time (the figure that stays comparable on a shared,
busy machine); each reader query is timed `repeats` times after one warm-up call, with fresh random
parameters each time, and reported as the 95th percentile in milliseconds.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import StoreError
from workbench.store.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _p95(fn: Callable[[], Any], repeats: int) -> tuple[float, float, float]:
    """95th percentile and median wall ms, and 95th percentile CPU ms (this process, all threads)."""
    fn()  # warm-up
    times, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
        cpu.append((time.process_time() - c) * 1000.0)
    return float(np.percentile(times, 95)), float(np.median(times)), float(np.percentile(cpu, 95))


def bench_store(rollouts: int, *, path: str | os.PathLike[str] | None = None, repeats: int = 20,
                seed: int = 0, keep: bool = False, progress: Callable[[int, int], None] | None = None,
                compact: bool = False, threads: int | None = None,
                upkeep_every: int | None = None) -> dict[str, Any]:
    """Build a store of `rollouts` synthetic rollouts (512 per step transaction) and time the readers.

    `path`: where to build it (default: a temp dir, removed afterwards unless `keep`); a path holding
    an interrupted build of the same size and seed resumes it (ingest figures then cover the steps
    written by this call; `resumed_at_step` says where it went on), a finished one is only timed. `compact`: run
    `compact` before timing the readers (reported separately as `compacted`). `threads`: DuckDB
    threads of the store's connections (as `open_store`; the engine uses 1). `upkeep_every`: steps
    between the writer's file merges (default `open_store`'s; 0 turns them off)."""
    shape = Shape()
    steps = max(1, math.ceil(rollouts / shape.rollouts_per_step))
    root = Path(path) if path else Path(tempfile.mkdtemp(prefix="workbench-bench-store-"))
    rng = np.random.default_rng(seed + 1)
    try:
        upkeep = {} if upkeep_every is None else {"upkeep_every": upkeep_every}
        with open_store(root, threads=threads, **upkeep) as store:
            run_id, start = _bench_run(store, rollouts, seed)
            syn = SyntheticRun(run_id, shape, seed=seed)
            for step in range(start):  # a resumed build: replay the generator to where it stopped
                syn.step(step)
            ingest_s, cpu_s, t_all = 0.0, 0.0, time.perf_counter()
            for step in range(start, steps):
                record = syn.step(step)
                t, c = time.perf_counter(), time.process_time()
                store.write_step(record)
                ingest_s += time.perf_counter() - t
                cpu_s += time.process_time() - c
                if progress is not None:
                    progress(step + 1, steps)
            wall_s = time.perf_counter() - t_all
            total = steps * shape.rollouts_per_step
            written = (steps - start) * shape.rollouts_per_step  # by this call
            result: dict[str, Any] = {
                "rollouts": total, "steps": steps, "rollouts_per_step": shape.rollouts_per_step,
                "resumed_at_step": start or None, "threads": threads,
                "ingest_rollouts_per_s": written / ingest_s if ingest_s > 0 else None, "ingest_s": ingest_s,
                "ingest_wall_s": wall_s, "ingest_cpu_s": cpu_s,
                "ingest_rollouts_per_cpu_s": written / cpu_s if cpu_s > 0 else None,
                "bytes_per_rollout": _dir_bytes(root) / total,
            }
            result["p95_ms"], result["median_ms"], result["p95_cpu_ms"] = _time_queries(
                store, run_id, steps, shape, rng, repeats)
            if compact:
                from workbench.store.maintenance import compact as run_compact
                t = time.perf_counter()
                run_compact(store, older_than_s=0)
                compact_s = time.perf_counter() - t
                p95, median, cpu = _time_queries(store, run_id, steps, shape, rng, repeats)
                result["compacted"] = {"compact_s": compact_s, "p95_ms": p95, "median_ms": median, "p95_cpu_ms": cpu,
                                       "bytes_per_rollout": _dir_bytes(root) / written}
            result["repeats"] = repeats
            result["store"] = str(root) if keep or path else None
            return result
    finally:
        if not keep and path is None:
            shutil.rmtree(root, ignore_errors=True)


def _bench_run(store: Any, rollouts: int, seed: int) -> tuple[str, int]:
    """The store's bench run and the first step still to write: a new run in a fresh store, or the
    bench run an interrupted build of the same size and seed left (its build goes on where it
    stopped, with the same content an uninterrupted build writes)."""
    runs = store.list_runs()
    bench = runs.filter(runs["name"] == "bench-store") if runs.height else runs
    if bench.height == 0:
        if runs.height:
            raise StoreError(f"bench store: {store.location.describe()} holds runs that are not a store "
                             "bench; give an empty or new --path")
        return store.create_run("bench-store", {"bench": "store", "rollouts": rollouts}, seed=seed), 0
    row = store.run(bench["run_id"][0])
    config = row["config"]
    if int(config.get("rollouts", -1)) != rollouts or int(row["seed"]) != seed:
        raise StoreError(f"bench store: {store.location.describe()} holds a bench of "
                         f"{config.get('rollouts')} rollouts (seed {row['seed']}), not {rollouts} (seed {seed}); "
                         "give another --path")
    last = store.run_steps(row["run_id"])["step"].max()
    return row["run_id"], 0 if last is None else int(last) + 1


def _time_queries(store: Any, run_id: str, steps: int, shape: Shape, rng: np.random.Generator,
                  repeats: int) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    def page() -> None:
        s = int(rng.integers(0, steps))
        store.rollouts(run_id, step_min=s, step_max=s + 10, verdict="correct", limit=50)

    def first_page() -> None:
        store.rollouts(run_id, limit=50, offset=int(rng.integers(0, 10)) * 50)

    def history() -> None:
        store.prompt_history(run_id, f"p{int(rng.integers(0, shape.prompt_pool)):05d}")

    queries = {
        "list_runs": store.list_runs,
        "run_steps": lambda: store.run_steps(run_id),
        "rollouts_page": page,
        "rollouts_first_pages": first_page,
        "prompt_history": history,
        "step_allocations": lambda: store.allocations(run_id, step=int(rng.integers(0, steps))),
    }
    p95, median, cpu = {}, {}, {}
    for name, fn in queries.items():
        p95[name], median[name], cpu[name] = _p95(fn, repeats)
    return p95, median, cpu
