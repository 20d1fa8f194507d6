"""`workbench bench soak`: several runs, the dashboard, a notebook-style reader and live control on one
store at once, for minutes; counts every failure a user could see.

What runs at once (each a separate process, except the controller):

- three engine processes (`workbench.engine.run`, the small organism, 8 prompts x 4 rollouts per
  step, group commit on, an evaluation every 20 steps, a checkpoint every 25) writing one store;
- the dashboard: every page script (`workbench.dashboard.PAGES`) run with Streamlit's AppTest as a
  person browses (`benchmarks.soak_pages`: the pages in turn, the live page refreshing;
  `browse="hammer"`: every page each second with the data cache cleared), timed per page;
- a notebook-style reader (`notebook=False`, `--no-notebook`: none, the load the page-time targets
  name): a full scan of every run's rollouts (per-token entropy included) into
  Polars, then the entropy-by-step analysis, and a whole-step check in ONE statement (one snapshot):
  for every visible step, its `steps` row, its on-policy rollouts (as many as `steps.rollouts`), its
  allocations and prompt_stats must all be there; a step seen partly is a torn read;
- a controller (this process): every few seconds a command to a random run through the control API
  (budget, temperature, allocator parameters, eval interval, pause then resume), and now and then an
  invalid one inserted raw, which the engine must reject while the run goes on.

At the end every run is stopped with the `stop` command and the store is read once more.

Figures: `commits` (snapshots committed during the soak, every writer: steps, heartbeats, controls,
events), `failed_commits` (runs failed and commit errors in their logs), `reader_queries`,
`reader_errors`, `torn_reads`, `controls_applied`, `controls_rejected` (and how many of them were the
invalid ones sent on purpose), p95 reader latency per reader, `page_ms` (p50/p95 per page and
overall; `idle`: the same browsing for `idle_s` after the runs stopped, on the same store; `ratio`:
loaded over idle), `steps_per_s` (the runs alone for `baseline_s` before the soak, then during it: the
ratio is what the dashboard, the reader and the controls cost them; pauses sent by the controller
count), `load_average` (1/5/15-minute, at the baseline's start and end, the soak's end, the idle
browsing's end: what else the machine ran), `priority` (niceness and autogroup niceness of the runs
and of the dashboard's process). Target: 0 failed commits, 0 reader errors, 0 torn reads, every
rejection an intended one; pages p95 <= 2 s and p50 <= 0.7 s (issue #34).

`catalog="postgres"` starts a throw-away PostgreSQL server (the installed binaries, a temporary
directory, a Unix socket, no TCP) and puts the catalog there, the Parquet files in a local directory.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from workbench.control.priority import run_nice
from workbench.errors import WorkbenchError
from workbench.store.audit import control_counts, last_snapshot, rollout_scan, row_count, steps_per_run, whole_steps

RUNS = 3


def soak_overrides() -> dict[str, Any]:
    """What the soak changes in the tiny run (`benchmarks.tiny`): it goes on until stopped, with
    short steps (so commits come often)."""
    return {
        "name": "soak",
        "steps": 1_000_000,
        "eval.every": 20,
        "eval.at_start": False,
        "eval.samples": 4,
        "eval.max_prompts": 12,
        "checkpoint.every": 25,
        "logging.heartbeat_s": 1.0,
        "logging.background_writes": True,
    }


# -- the store: a directory (SQLite catalog) or a PostgreSQL catalog ----------------------------------

def open_spec(spec: dict[str, str], **kw: Any) -> Any:
    """Open the store a spec names: {"path": dir} or {"catalog": url, "data_path": dir}."""
    from workbench.store import open_store

    if "path" in spec:
        return open_store(spec["path"], **kw)
    return open_store(catalog=spec["catalog"], data_path=spec["data_path"], **kw)


@contextmanager
def postgres_catalog() -> Iterator[str]:
    """A throw-away PostgreSQL server for the soak's catalog (three engines, the readers and the
    control loop each hold connections: room for 200); yields its catalog URL."""
    from workbench.store.pglocal import local_postgres

    with local_postgres(max_connections=200) as url:  # StoreError names what is missing
        yield url


# -- the processes ------------------------------------------------------------------------------------

def _engine_main(spec: dict[str, str], store_dir: str, run_id: str, config: str) -> None:
    from workbench.config import load_config
    from workbench.control.priority import apply_run_priority
    from workbench.engine import run

    apply_run_priority()  # as a run the dashboard launches (WORKBENCH_RUN_NICE, set by _spawn)
    with open_spec(spec, threads=1) as store:
        store.handle = store.handle.at_home(store_dir)  # a shared catalog has no folder of its own
        run(load_config(config), store=store, run_id=run_id)


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(0.95 * len(v)))], 1)


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _scan_main(spec: dict[str, str], runs: list[str], seconds: float, out: str) -> None:
    """Notebook-style: scan every run's rollouts, analyse, check whole steps; counts and latencies."""
    from workbench.analysis import entropy_by_step

    queries = errors = torn = scans = 0
    lat: list[float] = []
    messages: list[str] = []
    rows_seen = 0
    with open_spec(spec, read_only=True) as store:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for run_id in runs:
                t0 = time.perf_counter()
                try:
                    frame = rollout_scan(store, run_id)
                    if frame.height:
                        entropy_by_step(frame)
                    rows_seen = max(rows_seen, frame.height)
                    scans += 1
                except Exception as exc:  # noqa: BLE001
                    errors += 1
                    messages.append(f"scan {run_id}: {exc}"[:300])
                lat.append((time.perf_counter() - t0) * 1000.0)
                queries += 1
            t0 = time.perf_counter()
            try:
                row = whole_steps(store, runs)
                if row["torn"]:
                    torn += int(row["torn"])
                    messages.append(f"torn read: {row}")
            except Exception as exc:  # noqa: BLE001
                errors += 1
                messages.append(f"whole-step check: {exc}"[:300])
            lat.append((time.perf_counter() - t0) * 1000.0)
            queries += 1
            time.sleep(0.5)
    Path(out).write_text(json.dumps({"queries": queries, "errors": errors, "torn": torn, "scans": scans,
                                     "largest_scan_rows": rows_seen, "p95_ms": _p95(lat), "p50_ms": _p50(lat),
                                     "messages": messages[:10]}))


def _spawn(args: list[str], log: Path, *, run: bool = False) -> subprocess.Popen:
    """A soak process; with `run`, in the environment of a run the workbench launches (lower
    priority, quiet waiting: `workbench.control.priority`)."""
    from workbench.control.priority import RUN_NICE_ENV, child_env

    env = {**(child_env() if run else os.environ), "PYTHONUNBUFFERED": "1"}
    if not run:
        env.pop(RUN_NICE_ENV, None)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env.pop("WORKBENCH_FAULT", None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "benchmarks.soak", *args], cwd=root,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


# -- the controller -----------------------------------------------------------------------------------

INVALID = [
    ("set_budget", {"kind": "rollouts", "amount": 0}),
    ("set_temperature", {"temperature": -1.0}),
    ("set_allocator_params", {"params": {"no_such_field": 1}}),
    ("explode", {}),
]
"""Commands inserted raw now and then: the engine must reject each and go on."""


def _control_round(store: Any, run_id: str, rng: random.Random, sent: dict[str, int]) -> None:
    from workbench.control import api

    kind = rng.choice(["budget", "temperature", "params", "eval", "pause", "invalid"])
    if kind == "budget":
        api.set_budget(store, run_id, rng.choice([24, 32, 40]), who="soak")
    elif kind == "temperature":
        api.set_temperature(store, run_id, rng.choice([0.8, 1.0, 1.2]), who="soak")
    elif kind == "params":
        api.set_allocator_params(store, run_id, {"n": rng.choice([2, 4])}, who="soak")
    elif kind == "eval":
        api.set_eval_interval(store, run_id, rng.choice([10, 20]), who="soak")
    elif kind == "pause":
        cid = api.pause(store, run_id, who="soak")
        api.wait(store, run_id, cid, timeout_s=60)
        time.sleep(rng.uniform(0.5, 2.0))
        api.resume(store, run_id, who="soak")
        sent["pause_resume"] += 1
    else:
        command, args = rng.choice(INVALID)
        store.add_control(run_id, command, args, who="soak-invalid")
        sent["invalid"] += 1
    sent["issued"] += 2 if kind == "pause" else 1


# -- the bench ----------------------------------------------------------------------------------------

def bench_soak(minutes: float = 10.0, *, catalog: str = "sqlite", seed: int = 0,
               control_every_s: float = 4.0, models: Path | str | None = None,
               workdir: Path | str | None = None, browse: str = "person",
               baseline_s: float | None = None, idle_s: float | None = None,
               notebook: bool = True) -> dict[str, Any]:
    """Run the soak for `minutes` (see the module docstring); its figures. Before the soak, the runs
    train `baseline_s` seconds alone (default a fifth of the soak, 15 to 60 s): `steps_per_s` compares.
    After it, with the runs stopped, the dashboard browses the same store `idle_s` seconds more
    (default a fifth of the soak, 15 to 60 s; 0: not at all): `page_ms.idle` and `page_ms.ratio`.
    `notebook=False` leaves out the notebook-style reader (the store's torn-read check at the end stays):
    the runs, the dashboard and the controller only, the load issue #34's page-time targets name."""
    from benchmarks.soak_pages import PATTERNS

    if catalog not in ("sqlite", "postgres"):
        raise WorkbenchError(f"bench soak: --catalog must be sqlite or postgres, got {catalog!r}")
    if browse not in PATTERNS:
        raise WorkbenchError(f"bench soak: --browse must be one of {', '.join(PATTERNS)}, got {browse!r}")
    baseline_s = min(60.0, max(15.0, minutes * 12.0)) if baseline_s is None else float(baseline_s)
    idle_s = min(60.0, max(15.0, minutes * 12.0)) if idle_s is None else float(idle_s)
    if minutes <= 0:
        raise WorkbenchError(f"bench soak: --minutes must be > 0, got {minutes}")
    tmp = Path(tempfile.mkdtemp(prefix="workbench-soak-")) if workdir is None else Path(workdir)
    tmp.mkdir(parents=True, exist_ok=True)
    root = (tmp / "store").absolute()
    root.mkdir(exist_ok=True)
    if models is not None and not (root / "models").exists():
        (root / "models").symlink_to(Path(models).absolute())
    try:
        if catalog == "postgres":
            with postgres_catalog() as url:
                return _soak({"catalog": url, "data_path": str(root / "data")}, root, minutes, seed,
                             control_every_s, catalog, browse, baseline_s, idle_s, notebook)
        return _soak({"path": str(root)}, root, minutes, seed, control_every_s, catalog, browse, baseline_s, idle_s,
                     notebook)
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _soak(spec: dict[str, str], root: Path, minutes: float, seed: int, control_every_s: float,
          catalog: str, browse: str, baseline_s: float, idle_s: float, notebook: bool = True) -> dict[str, Any]:
    from workbench.config_docs import to_toml
    from workbench.control import api
    from workbench.models.sources import run_model_dir
    from benchmarks.tiny import tiny_run

    cfg = tiny_run(soak_overrides())
    run_model_dir(cfg, root)  # build the organism first (not part of the soak)
    (root / "soak").mkdir(exist_ok=True)
    config = root / "soak" / "config.toml"
    config.write_text(to_toml(cfg))
    with open_spec(spec) as store:
        runs = [store.create_run(f"soak-{i}", cfg.to_dict(), cfg.seed, status="created") for i in range(RUNS)]
        snap0 = last_snapshot(store)
    logs = root / "soak"
    seconds = minutes * 60.0
    engines = [_spawn(["engine", json.dumps(spec), str(root), rid, str(config)], logs / f"{rid}.log", run=True)
               for rid in runs]
    # the dashboard's process warms up (imports, every page once) while the runs start
    marks = logs / "pages.json"
    pages = _spawn(["pages", json.dumps(spec), str(seconds), str(marks), browse, str(idle_s)], logs / "pages.log")
    procs: list[subprocess.Popen] = [*engines, pages]
    rng = random.Random(seed)
    sent = {"issued": 0, "invalid": 0, "pause_resume": 0}
    control_errors: list[str] = []
    load: dict[str, list[float]] = {}
    t0 = time.monotonic()
    try:
        with open_spec(spec) as store:
            _wait_steps(store, runs, engines, logs)
            _wait_for(pages, marks.with_name("pages.json.ready"), logs / "pages.log")
            load["baseline_start"] = _loadavg()
            alone = _steps_per_s(store, runs, baseline_s)  # the same runs, no dashboard, no reader
            load["baseline_end"] = _loadavg()
            priority = _priorities(engines, pages)
            marks.with_name("pages.json.go").write_text("")
            before = (_step_count(store, runs), time.monotonic())
            scan = None
            if notebook:
                scan = _spawn(["scan", json.dumps(spec), ",".join(runs), str(seconds), str(logs / "scan.json")],
                              logs / "scan.log")
                procs.append(scan)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(min(rng.uniform(0.5, 1.5) * control_every_s, max(0.0, end - time.monotonic())))
                if time.monotonic() >= end:
                    break
                try:
                    _control_round(store, rng.choice(runs), rng, sent)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    control_errors.append(f"{type(exc).__name__}: {exc}"[:300])
            loaded = (_step_count(store, runs) - before[0]) / max(1e-9, time.monotonic() - before[1])
            load["soak_end"] = _loadavg()
            if scan is not None:
                scan.wait(timeout=300)
            _wait_for(pages, marks.with_name("pages.json.loaded"), logs / "pages.log", timeout_s=300)
            for rid in runs:
                try:
                    api.stop(store, rid, who="soak")
                except Exception as exc:  # noqa: BLE001 - a run that failed already
                    control_errors.append(f"stop {rid}: {exc}"[:300])
            for p in engines:
                p.wait(timeout=300)
            marks.with_name("pages.json.idle").write_text("")  # the same pages, no run training
            pages.wait(timeout=idle_s + 300)
            load["idle_end"] = _loadavg()
            soak_s = time.monotonic() - t0
            result = _figures(store, runs, snap0, logs, sent, control_errors)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    result.update(minutes=minutes, catalog=catalog, runs=RUNS, notebook=notebook, wall_s=round(soak_s, 1), seed=seed,
                  run_nice=run_nice(), priority=priority, cpus=os.cpu_count(),
                  load_average={k: [round(x, 2) for x in v] for k, v in load.items()},
                  steps_per_s={"alone": round(alone, 3), "with_dashboard": round(loaded, 3),
                                                    "ratio": round(loaded / alone, 3) if alone else None,
                                                    "alone_s": baseline_s})
    return result


def _wait_for(proc: subprocess.Popen, mark: Path, log: Path, timeout_s: float = 900) -> None:
    """Wait for the dashboard reader's mark (`.ready`: its warm-up, every page once, done; `.loaded`:
    the soak's browsing done)."""
    deadline = time.monotonic() + timeout_s
    while not mark.exists():
        if proc.poll() is not None:
            raise WorkbenchError(f"bench soak: the dashboard reader exited ({proc.returncode}); see {log}")
        if time.monotonic() > deadline:
            raise WorkbenchError(f"bench soak: the dashboard reader wrote no {mark.name} in {timeout_s:.0f} s")
        time.sleep(0.2)


def _loadavg() -> list[float]:
    """The 1-, 5- and 15-minute load averages (what else the machine was doing)."""
    return list(os.getloadavg())


def _priorities(engines: list[subprocess.Popen], pages: subprocess.Popen) -> dict[str, Any]:
    """Niceness and autogroup niceness (Linux) of the runs and of the dashboard's process, as they ran."""

    def of(pid: int) -> dict[str, int | None]:
        try:
            nice: int | None = os.getpriority(os.PRIO_PROCESS, pid)
        except OSError:
            nice = None
        try:
            group: int | None = int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            group = None
        return {"nice": nice, "autogroup_nice": group}

    return {"runs": [of(p.pid) for p in engines], "dashboard": of(pages.pid)}


def _step_count(store: Any, runs: list[str]) -> int:
    return row_count(store, "steps", runs)


def _steps_per_s(store: Any, runs: list[str], seconds: float) -> float:
    """Steps per second of all the runs together over `seconds` with nothing else reading."""
    n0, t0 = _step_count(store, runs), time.monotonic()
    time.sleep(seconds)
    return (_step_count(store, runs) - n0) / max(1e-9, time.monotonic() - t0)


def _wait_steps(store: Any, runs: list[str], engines: list[subprocess.Popen], logs: Path) -> None:
    """Wait until every run has committed a step (start-up is not part of the soak)."""
    deadline = time.monotonic() + 600
    while True:
        if len(steps_per_run(store, runs)) == len(runs):
            return
        for p, rid in zip(engines, runs):
            if p.poll() is not None:
                raise WorkbenchError(f"bench soak: run {rid} exited ({p.returncode}) before its first step; "
                                     f"see {logs / (rid + '.log')}")
        if time.monotonic() > deadline:
            raise WorkbenchError("bench soak: the runs took no step within 600 s")
        time.sleep(0.5)


def _page_figures(pages: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's page times under the soak, with no run training (`idle`), and loaded / idle."""
    overall = {"n": pages["queries"], "p50_ms": pages["p50_ms"], "p95_ms": pages["p95_ms"]}
    idle = pages["idle"]

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
        return {q: round(a[q] / b[q], 2) if a.get(q) and b.get(q) else None for q in ("p50_ms", "p95_ms")}

    per_page = {k: ratio(v, idle["pages"].get(k, {})) for k, v in pages["pages"].items()}
    return {"pattern": pages["pattern"], "warmup_s": pages["warmup_s"], "overall": overall, "pages": pages["pages"],
            "read_ms_p50": pages.get("read_ms_p50"), "lock_ms_p50": pages.get("lock_ms_p50"),
            "cpu_ms_p50": pages.get("cpu_ms_p50"), "time_share": pages.get("time_share"),
            "idle": idle, "ratio": {"overall": ratio(overall, idle["overall"]), "pages": per_page}}


def _figures(store: Any, runs: list[str], snap0: int, logs: Path, sent: dict[str, int],
             control_errors: list[str]) -> dict[str, Any]:
    pages = json.loads((logs / "pages.json").read_text())
    scanned = logs / "scan.json"
    scan = json.loads(scanned.read_text()) if scanned.exists() else {
        "queries": 0, "errors": 0, "torn": 0, "scans": 0, "largest_scan_rows": 0, "p95_ms": None, "p50_ms": None,
        "messages": []}
    status = {rid: store.run(rid) for rid in runs}
    failed_runs = {rid: row.get("error") for rid, row in status.items() if row["status"] not in ("stopped",)}
    commit_errors = []
    for rid in runs:
        text = (logs / f"{rid}.log").read_text(errors="replace")
        commit_errors += [line[:300] for line in text.splitlines() if "StoreError" in line or "failed:" in line]
    controls = control_counts(store, runs)
    count = lambda st, who=None: sum(r["n"] for r in controls  # noqa: E731
                                     if r["status"] == st and (who is None or r["who"] == who))
    steps, rollouts = row_count(store, "steps", runs), row_count(store, "rollouts", runs)
    final = whole_steps(store, runs)
    return {
        "commits": last_snapshot(store) - snap0,
        "failed_commits": len(commit_errors) + len(failed_runs),
        "reader_queries": pages["queries"] + scan["queries"],
        "reader_errors": pages["errors"] + scan["errors"],
        "torn_reads": scan["torn"] + int(final["torn"]),
        "controls_applied": count("applied"),
        "controls_rejected": count("rejected"),
        "controls_rejected_intended": count("rejected", "soak-invalid"),
        "controls_pending": count("pending"),
        "controls_issued": sent["issued"] + len(runs),
        "control_api_errors": len(control_errors),
        "page_ms": _page_figures(pages),
        "p95_reader_ms": {"pages": pages["p95_ms"], "scan": scan["p95_ms"]},
        "p50_reader_ms": {"pages": pages["p50_ms"], "scan": scan["p50_ms"]},
        "page_runs": pages["queries"],
        "rollout_scans": scan["scans"],
        "largest_scan_rows": scan["largest_scan_rows"],
        "steps_committed": int(steps),
        "rollouts_committed": int(rollouts),
        "final_status": {rid: row["status"] for rid, row in status.items()},
        "errors": (pages["messages"] + scan["messages"] + control_errors + commit_errors
                   + [f"{rid}: {e}" for rid, e in failed_runs.items()])[:20],
    }


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "engine":
        _engine_main(json.loads(args[0]), args[1], args[2], args[3])
    elif role == "pages":
        from benchmarks.soak_pages import pages_main

        pages_main(json.loads(args[0]), float(args[1]), args[2], args[3], float(args[4]))
    elif role == "scan":
        _scan_main(json.loads(args[0]), args[1].split(","), float(args[2]), args[3])
    else:
        raise SystemExit(f"unknown role {role}")
