"""`workbench bench store --data s3`: a store on object storage against one on the local disk, in one
run, and its faults.

- Ingest: synthetic steps (512 rollouts of 200 tokens) written flat out through the engine's group
  writer, in alternating blocks into a local store directory and into `s3://.../` (SQLite catalog), so
  the machine's load falls on both alike; `s3_vs_local` is the ratio of rollouts/s.
- Visibility lag: the engine's pattern on the S3 store (a step every `engine_period_s`, held until the
  "update" halfway through it); seconds from hand-over to the end of the commit that made it visible.
- Files and bytes per 1,000 steps, of the S3 store's data before and after `compact` (the writer's own
  upkeep off, so "before" is what a run leaves without it).
- Faults (local server only): the S3 server stopped for `outage_s` mid-run while the engine's
  pattern goes on (the writer retries the commit; every step once, no file missing); a writer process
  killed with SIGKILL during its commits `kills` times (then every committed step once, every file the
  catalog names present); two writers committing to one catalog at once (PostgreSQL when its server
  binaries are installed, else SQLite) at engine rates.

The local S3 server is moto's, in this process's threads: its CPU time is the bench's too, so the S3
figures here are a floor for a server on its own machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from workbench.config import StoreConfig
from workbench.errors import StoreError
from workbench.store.group import GroupWriter
from workbench.store.store import Store, open_store
from workbench.store.synthetic import Shape, SyntheticRun

BUCKET = "workbench-bench"
ENGINE_SPACING_S = StoreConfig().commit_spacing_s
"""The engine's default `store.commit_spacing_s`, which the engine pattern uses (and 0, commit when idle)."""


def _lags(lags: list[float]) -> dict[str, Any]:
    if not lags:
        return {"steps": 0, "lag_p50_s": None, "lag_p95_s": None, "lag_max_s": None}
    return {"steps": len(lags), "lag_p50_s": float(np.percentile(lags, 50)),
            "lag_p95_s": float(np.percentile(lags, 95)), "lag_max_s": float(max(lags))}


def _ingest(store: Store, syn: SyntheticRun, steps: range) -> tuple[int, float]:
    """Write `steps` flat out through a group writer; (rollouts, wall seconds)."""
    records = [syn.step(s) for s in steps]  # built before the clock starts: not the store's work
    t = time.perf_counter()
    writer = GroupWriter(store, name="bench-s3")
    try:
        for record in records:
            writer.submit(record)
        writer.flush()
    finally:
        writer.close()
    return sum(r.rollouts.num_rows for r in records), time.perf_counter() - t


def _paced(store: Store, syn: SyntheticRun, steps: range, period_s: float,
           during: Any = None, spacing_s: float = ENGINE_SPACING_S) -> GroupWriter:
    """The engine's pattern: a step every `period_s`, released halfway, commits spaced by `spacing_s`;
    `during(i)` is called before step number i (the outage hook). Returns the closed writer (its `lags`)."""
    writer = GroupWriter(store, commit_spacing_s=spacing_s, name="bench-s3-engine")
    try:
        for i, s in enumerate(steps):
            if during is not None:
                during(i)
            record = syn.step(s)
            begin = time.perf_counter()
            writer.submit(record, hold=True)
            time.sleep(period_s / 2)
            writer.release()
            time.sleep(max(0.0, begin + period_s - time.perf_counter()))
        writer.flush()
    finally:
        writer.close()
    return writer


def catalog_files(store: Store) -> list[str]:
    """Every data file the catalog's current snapshot names."""
    from workbench.store.schema import TABLES

    named: list[str] = []
    for table in TABLES:
        frame = store._lake.read(f"SELECT data_file FROM ducklake_list_files('lake', '{table}')")
        named += frame["data_file"].to_list()
    return named


def missing_files(store: Store, objects: set[str] | None) -> list[str]:
    """Data files the catalog names that are not in the bucket (`objects`: the bucket's keys as
    s3:// URLs; None: checked by reading each file's footer through DuckDB)."""
    named = catalog_files(store)
    if objects is not None:
        return [f for f in named if f not in objects]
    gone = []
    for f in named:
        try:
            store._lake.read("SELECT count(*) FROM parquet_metadata(?)", [f])
        except StoreError:
            gone.append(f)
    return gone


def _check_steps(store: Store, run_id: str, per_step: int) -> dict[str, Any]:
    steps = store.run_steps(run_id)["step"].to_list()
    rollouts = store.count_rollouts(run_id)
    return {"steps": len(steps), "distinct_steps": len(set(steps)), "contiguous": steps == list(range(len(steps))),
            "rollouts": rollouts, "rollouts_match_steps": rollouts == len(steps) * per_step}


def _bucket_urls(s3: Any, prefix: str) -> set[str]:
    return {f"s3://{BUCKET}/{o['Key']}" for o in s3.objects(BUCKET, prefix)}


def bench_object_storage(*, data: str = "s3", steps: int = 120, rounds: int = 4, engine_steps: int = 20,
                         engine_period_s: float = 0.5, outage_s: float = 10.0, kills: int = 3,
                         faults: bool = True, seed: int = 0) -> dict[str, Any]:
    """Run the bench (see the module docstring); one JSON-able dict. `data`: "s3" (a local moto
    server started here) or an `s3://bucket/prefix` URL reached through the AWS variables (faults
    that stop the server are then skipped)."""
    from workbench.store.maintenance import compact, info
    from workbench.store.s3local import local_s3

    shape = Shape()
    per_block = max(1, steps // (2 * rounds))
    out: dict[str, Any] = {"load_average_at_start": os.getloadavg(), "cores": os.cpu_count(),
                           "rollouts_per_step": shape.rollouts_per_step, "steps_per_store": per_block * rounds,
                           "rounds": rounds, "data": data, "server": "moto (in this process)" if data == "s3" else data}
    root = Path(tempfile.mkdtemp(prefix="workbench-bench-s3-"))
    os.chmod(root, 0o711)  # a local PostgreSQL server (another user, when run as root) reaches its data here
    with ExitStack() as stack:
        s3 = stack.enter_context(local_s3(BUCKET)) if data == "s3" else None
        base = f"s3://{BUCKET}/bench" if s3 is not None else data.rstrip("/")
        local = stack.enter_context(open_store(root / "local", upkeep_every=0))
        remote = stack.enter_context(open_store(f"{base}/ingest", catalog=str(root / "s3" / "catalog.sqlite"),
                                                upkeep_every=0))
        runs = {name: (st, SyntheticRun(st.create_run("bench-s3", {"store": name}, seed=seed), shape, seed=seed))
                for name, st in (("local", local), ("s3", remote))}
        totals = {name: [0, 0.0] for name in runs}
        for r in range(rounds):  # alternate blocks, local first then s3, then s3 first
            order = ("local", "s3") if r % 2 == 0 else ("s3", "local")
            for name in order:
                st, syn = runs[name]
                n, wall = _ingest(st, syn, range(r * per_block, (r + 1) * per_block))
                totals[name][0] += n
                totals[name][1] += wall
        rate = {name: n / wall for name, (n, wall) in totals.items()}
        out["ingest_rollouts_per_s"] = rate
        out["s3_vs_local"] = rate["s3"] / rate["local"]
        out["reader_p95_ms"] = _readers(runs, rounds * per_block, shape, seed)
        out.update(_engine_pattern(runs, rounds * per_block, engine_steps, engine_period_s))
        out["files_per_1000_steps"] = _files(remote, s3, "bench/ingest/", compact, info)
        out["check_after_ingest"] = _check_steps(remote, runs["s3"][1].run_id, shape.rollouts_per_step)
        if faults and s3 is not None:
            out["outage"] = _outage(s3, root, shape, outage_s, engine_period_s, seed)
            out["kill9"] = _kill9(s3, root, kills, seed)
            out["two_writers"] = _two_writers(s3, root, shape, engine_period_s, seed, stack)
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    out["load_average_at_end"] = os.getloadavg()
    return out


def _engine_pattern(runs: dict[str, Any], first: int, steps: int, period_s: float,
                    blocks: int = 2) -> dict[str, Any]:
    """The engine's pattern on both stores, with the engine's commit spacing and with none, in
    alternating blocks (local, s3, then s3, local, ...) so that the machine's load falls on both alike;
    `steps` per store and spacing. Also the commits' own seconds (what the lag is made of)."""
    per = max(1, steps // blocks)
    found: dict[str, dict[str, list[float]]] = {}
    next_step = {name: first for name in runs}  # each store's run stays contiguous
    for spacing in (ENGINE_SPACING_S, 0.0):
        for b in range(blocks):
            for name in (("local", "s3") if b % 2 == 0 else ("s3", "local")):
                st, syn = runs[name]
                step = next_step[name]
                w = _paced(st, syn, range(step, step + per), period_s, spacing_s=spacing)
                slot = found.setdefault(f"engine_pattern_{name}" + ("" if spacing else "_spacing_0"),
                                        {"lags": [], "commit_s": [], "steps_per_commit": []})
                slot["lags"] += w.lags
                slot["commit_s"] += [c[2] for c in w.commits]
                slot["steps_per_commit"] += [float(c[0]) for c in w.commits]
                next_step[name] = step + per
    out: dict[str, Any] = {}
    for key, slot in found.items():
        out[key] = {**_lags(slot["lags"]), "period_s": period_s,
                    "commit_spacing_s": 0.0 if key.endswith("_spacing_0") else ENGINE_SPACING_S,
                    "commits": len(slot["commit_s"]), "commit_p50_s": float(np.median(slot["commit_s"])),
                    "steps_per_commit_mean": float(np.mean(slot["steps_per_commit"]))}
    return out


def _readers(runs: dict[str, Any], steps: int, shape: Shape, seed: int, repeats: int = 10) -> dict[str, Any]:
    """The store bench's reader queries (the dashboard's reads: a rollouts page, prompt history, ...),
    p95 ms on each store, one store after the other; before any compaction (one file per commit)."""
    from benchmarks.store_bench import time_queries

    out: dict[str, Any] = {}
    for name, (st, syn) in runs.items():
        p95, _median, _cpu = time_queries(st, syn.run_id, steps, shape, np.random.default_rng(seed), repeats)
        out[name] = p95
    out["s3_over_local"] = {q: out["s3"][q] / out["local"][q] for q in out["s3"] if out["local"][q]}
    return out


def _files(store: Store, s3: Any, prefix: str, compact: Any, info: Any) -> dict[str, Any]:
    """Data files and bytes per 1,000 steps before and after `compact` (from the catalog; the
    bucket's object count too on the local server)."""
    steps = max(1, store.run_steps(store.list_runs()["run_id"][0]).height)
    scale = 1000.0 / steps

    def count() -> dict[str, Any]:
        i = info(store)
        files = sum(t["files"] + t["delete_files"] for t in i["tables"].values())
        row = {"files": files * scale, "rollouts_files": i["tables"]["rollouts"]["files"] * scale,
               "tables_with_files": sum(1 for t in i["tables"].values() if t["files"]),
               "bytes": i["data_bytes"] * scale}
        if s3 is not None:
            objects = s3.objects(BUCKET, prefix)
            row.update(objects=len(objects) * scale, object_bytes=sum(o["Size"] for o in objects) * scale)
        return row

    before = count()
    t = time.perf_counter()
    compact(store, older_than_s=0)
    seconds = time.perf_counter() - t
    after = count()
    missing = missing_files(store, _bucket_urls(s3, prefix) if s3 is not None else None)
    return {"steps_measured": steps, "before": before, "after": after, "compact_s": seconds,
            "catalog_files_missing_after": len(missing)}


def _outage(s3: Any, root: Path, shape: Shape, outage_s: float, period_s: float, seed: int) -> dict[str, Any]:
    """The engine's pattern on an S3 store with the server stopped for `outage_s` after step 5."""
    with open_store(f"s3://{BUCKET}/outage", catalog=str(root / "outage" / "catalog.sqlite"), upkeep_every=0) as st:
        syn = SyntheticRun(st.create_run("bench-s3-outage", {}, seed=seed), shape, seed=seed)
        timer: list[threading.Timer] = []

        def during(i: int) -> None:
            if i == 5:
                s3.stop()
                timer.append(threading.Timer(outage_s, s3.start))
                timer[0].start()

        t = time.perf_counter()
        error = None
        try:
            writer = _paced(st, syn, range(20), period_s, during)
            lags = writer.lags
        except Exception as exc:  # noqa: BLE001 - reported: the bench's point is what happens
            error, lags = str(exc).splitlines()[0], []
        finally:
            for tm in timer:
                tm.join()
        return {"outage_s": outage_s, "error": error, "wall_s": time.perf_counter() - t, **_lags(lags),
                **_check_steps(st, syn.run_id, shape.rollouts_per_step),
                "catalog_files_missing": len(missing_files(st, _bucket_urls(s3, "outage/")))}


_CHILD = """
import sys, time
from workbench.store import open_store
from workbench.store.group import GroupWriter
from workbench.store.synthetic import Shape, SyntheticRun
url, catalog, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
st = open_store(url, catalog=catalog, upkeep_every=0)
runs = st.list_runs()
rid = runs["run_id"][0] if runs.height else st.create_run("bench-s3-kill", {}, seed=0)
last = st.run_steps(rid)["step"].max()
syn = SyntheticRun(rid, Shape(), seed=0)
start = 0 if last is None else int(last) + 1
for s in range(start):
    syn.step(s)
print("ready", start, flush=True)
for s in range(start, start + 400):
    st.write_step(syn.step(s))
    print("committed", s, flush=True)
"""


def _kill9(s3: Any, root: Path, kills: int, seed: int) -> dict[str, Any]:
    """A process writing steps (one commit each) to an S3 store, killed with SIGKILL at a random
    moment after its second commit, `kills` times; then the store is checked."""
    rng = np.random.default_rng(seed)
    url, catalog = f"s3://{BUCKET}/kill", str(root / "kill" / "catalog.sqlite")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed_after: list[int] = []
    for _ in range(kills):
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, url, catalog, str(seed)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)
        seen = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("committed"):
                seen += 1
                if seen == 2:
                    time.sleep(float(rng.uniform(0.0, 0.6)))  # somewhere inside a later commit
                    proc.send_signal(signal.SIGKILL)
                    break
        proc.wait(timeout=60)
        killed_after.append(seen)
    with open_store(url, catalog=catalog) as st:
        rid = st.list_runs()["run_id"][0]
        objects = _bucket_urls(s3, "kill/")
        return {"kills": kills, "commits_seen_before_each_kill": killed_after,
                **_check_steps(st, rid, Shape().rollouts_per_step),
                "catalog_files_missing": len(missing_files(st, objects)),
                "orphan_objects": len(objects - set(catalog_files(st)))}


def _two_writers(s3: Any, root: Path, shape: Shape, period_s: float, seed: int, stack: ExitStack) -> dict[str, Any]:
    """Two Stores (two connections, as two machines would have) committing the engine's pattern to
    one catalog at once, 20 steps each."""
    from workbench.store.pglocal import local_postgres, server_bin

    if server_bin() is not None:
        catalog, kind = stack.enter_context(local_postgres(root / "pg", fsync=False)), "postgres"
    else:
        catalog, kind = str(root / "two" / "catalog.sqlite"), "sqlite"
    url = f"s3://{BUCKET}/two"
    open_store(url, catalog=catalog).close()  # created once, before the race
    stores = [stack.enter_context(open_store(url, catalog=catalog, upkeep_every=0)) for _ in range(2)]
    syns = [SyntheticRun(st.create_run(f"writer-{i}", {}, seed=seed + i), shape, seed=seed + i)
            for i, st in enumerate(stores)]
    errors: list[str] = []
    lags: list[float] = []

    def work(i: int) -> None:
        try:
            lags.extend(_paced(stores[i], syns[i], range(20), period_s).lags)
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(str(exc).splitlines()[0])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    checks = [_check_steps(stores[0], syn.run_id, shape.rollouts_per_step) for syn in syns]
    return {"catalog": kind, "errors": errors, **_lags(lags), "runs": checks}
