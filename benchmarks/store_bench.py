"""`workbench bench store`: ingest a synthetic run through the writer API, then time the readers.

Ingest runs three patterns side by side on one store, interleaved so the machine's load falls on each
alike:

- step-per-commit, flat out: every step its own `write_step` transaction (the baseline);
- group commit, flat out: steps handed to a `GroupWriter` as fast as it takes them (several whole
  steps per transaction, up to `commit_max_rows` rollouts); `ingest_rollouts_per_s` and
  `ingest_rollouts_per_cpu_s` are this pattern's;
- the engine's pattern: a step every `engine_period_s` (~0.5 s), held until the "update" halfway
  through it as the engine holds it; `visibility_lag_p95_s` is this pattern's time from a step's
  hand-over to the end of the commit that made it visible.

Records are built before each timed block (building synthetic Arrow tables is not the store's work).
Times are wall and this process's CPU time (all threads: the writer's and the upkeep's included; the
figure that stays comparable on a shared, busy machine). Each reader query is timed `repeats` times
after one warm-up call, with fresh random parameters each time, and reported as the 95th percentile in
milliseconds.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import StoreError
from workbench.store.group import GroupWriter
from workbench.store.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun

BASELINE_EVERY = 100
"""Of every this many steps, the last `BASELINE_STEPS` go step-per-commit, the rest group-committed."""
BASELINE_STEPS = 10
CATALOGS = ("sqlite", "postgres")


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


def _phase(step: int, steps: int, engine_steps: int) -> str:
    if step >= steps - engine_steps:
        return "engine"
    return "baseline" if step % BASELINE_EVERY >= BASELINE_EVERY - BASELINE_STEPS else "group"


class _Tally:
    def __init__(self) -> None:
        self.rollouts, self.wall_s, self.cpu_s = 0, 0.0, 0.0

    def add(self, rollouts: int, wall_s: float, cpu_s: float) -> None:
        self.rollouts += rollouts
        self.wall_s += wall_s
        self.cpu_s += cpu_s

    def summary(self) -> dict[str, Any]:
        return {"rollouts": self.rollouts, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
                "rollouts_per_s": self.rollouts / self.wall_s if self.wall_s > 0 else None,
                "rollouts_per_cpu_s": self.rollouts / self.cpu_s if self.cpu_s > 0 else None}


def _lag_summary(lags: list[float]) -> dict[str, Any]:
    if not lags:
        return {"steps": 0, "lag_p50_s": None, "lag_p95_s": None, "lag_max_s": None}
    return {"steps": len(lags), "lag_p50_s": float(np.percentile(lags, 50)),
            "lag_p95_s": float(np.percentile(lags, 95)), "lag_max_s": float(max(lags))}


def bench_store(rollouts: int, *, path: str | os.PathLike[str] | None = None, repeats: int = 20,
                seed: int = 0, keep: bool = False, progress: Callable[[int, int], None] | None = None,
                compact: bool = False, threads: int | None = None, upkeep_every: int | None = None,
                catalog: str = "sqlite", commit_max_rows: int = 16384, engine_steps: int = 40,
                engine_period_s: float = 0.5, commit_spacing_s: float = 0.5) -> dict[str, Any]:
    """Build a store of `rollouts` synthetic rollouts (512 per step) and time the writer and readers.

    `path`: where to build it (default: a temp dir, removed afterwards unless `keep`); a path holding
    an interrupted build of the same size and seed resumes it (ingest figures then cover the steps
    written by this call; `resumed_at_step` says where it went on), a finished one is only timed.
    `catalog`: "sqlite" (a store directory) or "postgres" (a local PostgreSQL server started for the
    bench, its data under the path, with the Parquet files beside it). `compact`: run `compact`
    before timing the readers again (reported as `compacted`). `threads`: DuckDB threads of the
    store's connections (as `open_store`; the engine uses 1). `upkeep_every`: steps between the
    writer's file merges (default 100, also for PostgreSQL; 0 turns them off). `commit_max_rows`: the
    group writer's cap. `engine_steps`: the last steps, written in the engine's pattern, one every
    `engine_period_s`, through a writer spacing its commits by `commit_spacing_s` (the engine's default,
    `store.commit_spacing_s`)."""
    if catalog not in CATALOGS:
        raise StoreError(f"bench store: catalog {catalog!r} must be one of {CATALOGS}")
    shape = Shape()
    steps = max(1, math.ceil(rollouts / shape.rollouts_per_step))
    engine_steps = max(0, min(int(engine_steps), steps // 4))
    root = Path(path) if path else Path(tempfile.mkdtemp(prefix="workbench-bench-store-"))
    if not path:
        os.chmod(root, 0o711)  # a local PostgreSQL server (another user, when run as root) reaches its data here
    rng = np.random.default_rng(seed + 1)
    upkeep = 100 if upkeep_every is None else upkeep_every
    try:
        with ExitStack() as stack:
            store = _open_bench_store(stack, root, catalog, threads, upkeep)
            run_id, start = _bench_run(store, rollouts, seed)
            syn = SyntheticRun(run_id, shape, seed=seed)
            for step in range(start):  # a resumed build: replay the generator to where it stopped
                syn.step(step)
            flat = GroupWriter(store, commit_max_rows=commit_max_rows, name="bench-flat")
            paced = GroupWriter(store, commit_max_rows=commit_max_rows, commit_spacing_s=commit_spacing_s,
                                name="bench-engine")
            t_all = time.perf_counter()
            try:
                tallies = _ingest(store, syn, start, steps, engine_steps, flat, paced, engine_period_s, progress)
            finally:
                flat.close()
                paced.close()
            wall_s = time.perf_counter() - t_all
            store.wait_upkeep()
            total = steps * shape.rollouts_per_step
            data_dir = root / "data" if catalog == "postgres" else root
            result: dict[str, Any] = {
                "rollouts": total, "steps": steps, "rollouts_per_step": shape.rollouts_per_step,
                "resumed_at_step": start or None, "threads": threads, "catalog": catalog,
                "commit_max_rows": commit_max_rows, "upkeep_every": upkeep,
                **_ingest_figures(tallies, flat, paced, engine_period_s),
                "ingest_wall_s": wall_s,
                "upkeep_longest_hold_s": store.longest_upkeep_hold_s,
                "bytes_per_rollout": _dir_bytes(data_dir) / total,
            }
            result["p95_ms"], result["median_ms"], result["p95_cpu_ms"] = time_queries(
                store, run_id, steps, shape, rng, repeats)
            if compact:
                from workbench.store.maintenance import compact as run_compact
                t = time.perf_counter()
                run_compact(store, older_than_s=0)
                compact_s = time.perf_counter() - t
                p95, median, cpu = time_queries(store, run_id, steps, shape, rng, repeats)
                result["compacted"] = {"compact_s": compact_s, "p95_ms": p95, "median_ms": median, "p95_cpu_ms": cpu,
                                       "bytes_per_rollout": _dir_bytes(data_dir) / total}
            result["repeats"] = repeats
            result["store"] = str(root) if keep or path else None
            return result
    finally:
        if not keep and path is None:
            shutil.rmtree(root, ignore_errors=True)


def _open_bench_store(stack: ExitStack, root: Path, catalog: str, threads: int | None, upkeep: int) -> Any:
    """The bench's store at `root`: a store directory, or a local PostgreSQL catalog with the Parquet
    files beside it (closed with `stack`)."""
    if catalog == "postgres":
        from workbench.store.pglocal import local_postgres

        url = stack.enter_context(local_postgres(root / "pg"))
        return stack.enter_context(open_store(catalog=url, data_path=str(root / "data"), threads=threads,
                                              upkeep_every=upkeep))
    return stack.enter_context(open_store(root, threads=threads, upkeep_every=upkeep))


def _ingest(store: Any, syn: SyntheticRun, start: int, steps: int, engine_steps: int, flat: GroupWriter,
            paced: GroupWriter, engine_period_s: float, progress: Callable[[int, int], None] | None
            ) -> dict[str, _Tally]:
    """Write steps `start`.. in blocks of one pattern each (see the module docstring); each pattern's tally."""
    tallies = {"baseline": _Tally(), "group": _Tally(), "engine": _Tally()}
    step = start
    while step < steps:
        phase = _phase(step, steps, engine_steps)
        block = [step]
        while block[-1] + 1 < steps and _phase(block[-1] + 1, steps, engine_steps) == phase:
            block.append(block[-1] + 1)
        records = [syn.step(s) for s in block]
        t, c = time.perf_counter(), time.process_time()
        if phase == "baseline":
            for record in records:
                store.write_step(record)
        elif phase == "group":
            for record in records:
                flat.submit(record)
            flat.flush()
        else:
            for record in records:
                begin = time.perf_counter()
                paced.submit(record, hold=True)
                time.sleep(engine_period_s / 2)
                paced.release()  # the engine releases its step when the update starts
                time.sleep(max(0.0, begin + engine_period_s - time.perf_counter()))
            paced.flush()
        tallies[phase].add(len(records) * syn.shape.rollouts_per_step, time.perf_counter() - t,
                           time.process_time() - c)
        step = block[-1] + 1
        if progress is not None:  # every step of the block is committed now
            for done in block:
                progress(done + 1, steps)
    return tallies


def _ingest_figures(tallies: dict[str, _Tally], flat: GroupWriter, paced: GroupWriter,
                    engine_period_s: float) -> dict[str, Any]:
    """The ingest part of the result: each pattern's throughput, lags and commits."""
    base, group = tallies["baseline"].summary(), tallies["group"].summary()
    commits = flat.commits
    return {
        "ingest_rollouts_per_s": group["rollouts_per_s"],
        "ingest_rollouts_per_cpu_s": group["rollouts_per_cpu_s"],
        "visibility_lag_p95_s": _lag_summary(paced.lags)["lag_p95_s"],
        "group_commit": {**group, **_lag_summary(flat.lags), "commits": len(commits),
                         "steps_per_commit_mean": (sum(c[0] for c in commits) / len(commits)) if commits else None},
        "step_per_commit": base,
        "group_vs_step_per_commit": {
            "wall": (group["rollouts_per_s"] / base["rollouts_per_s"])
            if group["rollouts_per_s"] and base["rollouts_per_s"] else None,
            "cpu": (group["rollouts_per_cpu_s"] / base["rollouts_per_cpu_s"])
            if group["rollouts_per_cpu_s"] and base["rollouts_per_cpu_s"] else None},
        "engine_pattern": {**tallies["engine"].summary(), **_lag_summary(paced.lags),
                           "period_s": engine_period_s, "commits": len(paced.commits)},
    }


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


def time_queries(store: Any, run_id: str, steps: int, shape: Shape, rng: np.random.Generator,
                 repeats: int) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """p95 ms, median ms and p95 CPU ms of each reader query the dashboard makes, on `run_id`."""
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
