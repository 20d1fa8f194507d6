"""The dashboard in `workbench bench soak`: every page script run with Streamlit's AppTest as a person
browses, timed per page.

- `person` (the default): the pages in turn, a second's look at each; the live page left open for
  LIVE_REFRESHES refreshes at its default interval (LIVE_REFRESH_S; AppTest reruns the whole page where a
  browser reruns only its live fragments, so these timings are an upper bound). The data cache is
  kept, as in a real session: a page answers from cache while nothing new was committed.
- `hammer` (the soak's earlier reader): every page once a second, the data cache cleared before each,
  so every run reads the store afresh.

Phases, each started by the soak through a file beside `out` (so one process, one warm cache, one
set of imports serves them all):

1. warm-up: every page runs once untimed (its imports, as a server that has been up has done them),
   then `<out>.ready` is written; the process waits for `<out>.go` (the runs' baseline, alone);
2. loaded: the pattern for `seconds` while the runs train beside it; then `<out>.loaded` is written
   and the process waits for `<out>.idle` (the soak stops the runs);
3. idle: the same pattern for `idle_s` seconds on the same store with no run training (what the
   pages cost without the load, for the ratio).

Figures: per page (and `live (refresh)`) the number of runs, p50 and p95 wall milliseconds, loaded
and idle; overall p50 and p95 of each; errors with their first messages. Where the loaded pages' time
went: per page the p50 of the store's reads (`read_ms_p50`, wall), of the waits for the read lock while
upkeep held it (`lock_ms_p50`, part of the reads) and of this process's CPU (`cpu_ms_p50`), and over all
pages the shares of their wall time (`time_share`: read, lock, cpu).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

PATTERNS = ("person", "hammer")
LOOK_S = 1.0
"""How long the person looks at a page before opening the next."""
LIVE_REFRESHES = 3
LIVE_REFRESH_S = 5.0
"""The live page's default refresh interval (app/app_pages/live.py)."""


def quantiles(values: list[float]) -> dict[str, Any]:
    """{"n", "p50_ms", "p95_ms"} of wall milliseconds (None when empty)."""
    if not values:
        return {"n": 0, "p50_ms": None, "p95_ms": None}
    v = sorted(values)
    return {"n": len(v), "p50_ms": round(statistics.median(v), 1),
            "p95_ms": round(v[min(len(v) - 1, int(0.95 * len(v)))], 1)}


def _wait_for(path: Path, timeout_s: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"soak pages: {path.name} never came")
        time.sleep(0.1)


def _count_reads() -> list[float]:
    """Seconds this process has spent in the store's reads (`Lake.read`, wall) and, of those, waiting
    for the store's read lock while upkeep held it (`Lake.reading`), summed in the list's two elements:
    what part of a page's time was the store's, the rest being the page's own work or the wait for a
    core (`cpu_ms_p50`: this process's CPU time per page run)."""
    from contextlib import contextmanager

    from workbench.store.connection import Lake

    total = [0.0, 0.0]
    read, reading = Lake.read, Lake.reading

    def timed_read(self, query, params=None):
        t = time.perf_counter()
        try:
            return read(self, query, params)
        finally:
            total[0] += time.perf_counter() - t

    @contextmanager
    def timed_reading(self):
        t = time.perf_counter()
        with reading(self):
            total[1] += time.perf_counter() - t
            yield

    Lake.read, Lake.reading = timed_read, timed_reading
    return total


def app_tester(timeout_s: float):
    """An AppTest of the dashboard whose reruns share one compiled-script cache, as a server's runtime
    does: AppTest compiles the page scripts afresh on every run (a new `ScriptCache` each time, ~30 ms
    per script here), which a browser's rerun on a server that has been up never pays."""
    from streamlit.testing.v1 import AppTest, app_test, local_script_runner
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    from workbench.dashboard import MAIN

    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared
    return AppTest.from_file(str(MAIN), default_timeout=timeout_s)


def pages_main(spec: dict[str, str], seconds: float, out: str, pattern: str = "person",
               idle_s: float = 0.0) -> None:
    """Browse the dashboard on the store `spec` names for `seconds` (then `idle_s` more once the runs
    are stopped, see the module docstring); write the figures to `out`."""
    import streamlit as st

    from workbench.dashboard import PAGES
    from benchmarks.soak import open_spec

    if "path" in spec:
        os.environ["WORKBENCH_STORE"] = spec["path"]
    else:  # the dashboard opens a store by directory; hand it the catalog's store instead
        import app.data

        app.data.open_store = lambda _location: open_spec(spec)
    at = app_tester(120)
    errors, messages = 0, []
    t0 = time.perf_counter()
    at.run()
    for page in PAGES.values():  # a server that has been up: every page's imports done once, untimed
        at.switch_page(page)
        at.run()
    warmup_s = time.perf_counter() - t0
    Path(out + ".ready").write_text(f"{warmup_s:.1f}")
    _wait_for(Path(out + ".go"))

    reading = _count_reads()
    split: dict[str, dict[str, list[float]]] = {"read": {}, "lock": {}, "cpu": {}}

    def browse(seconds: float) -> dict[str, list[float]]:
        timings: dict[str, list[float]] = {name: [] for name in PAGES}
        timings["live (refresh)"] = []
        end = time.monotonic() + seconds

        def timed(name: str, switch_to: str | None) -> None:
            nonlocal errors
            t0, c0, r0, l0 = time.perf_counter(), time.process_time(), reading[0], reading[1]
            try:
                if switch_to:
                    at.switch_page(switch_to)
                if pattern == "hammer":
                    st.cache_data.clear()
                at.run()
                failed = [str(e.value) for e in at.exception]
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failed = [f"{type(exc).__name__}: {exc}"]
            timings[name].append((time.perf_counter() - t0) * 1000.0)
            split["read"].setdefault(name, []).append((reading[0] - r0) * 1000.0)
            split["lock"].setdefault(name, []).append((reading[1] - l0) * 1000.0)
            split["cpu"].setdefault(name, []).append((time.process_time() - c0) * 1000.0)
            if failed:
                errors += 1
                messages.append(f"{name}: {failed[0][:300]}")

        while time.monotonic() < end:
            t_round = time.monotonic()
            for name, page in PAGES.items():
                if time.monotonic() >= end:
                    break
                timed(name, page)
                if pattern == "hammer":
                    continue
                time.sleep(LOOK_S)
                if name == "live":
                    for _ in range(LIVE_REFRESHES):
                        if time.monotonic() + LIVE_REFRESH_S >= end:
                            break
                        time.sleep(LIVE_REFRESH_S)
                        timed("live (refresh)", None)
            if pattern == "hammer":
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t_round)))
        return timings

    loaded = browse(seconds)
    loaded_split = {k: {name: quantiles(v)["p50_ms"] for name, v in series.items()} for k, series in split.items()}
    loaded_split["share"] = {k: round(sum(map(sum, split[k].values())) / max(1e-9, sum(map(sum, loaded.values()))), 3)
                             for k in ("read", "lock", "cpu")}  # of all the pages' wall time
    Path(out + ".loaded").write_text("")
    idle: dict[str, list[float]] = {}
    if idle_s > 0:
        _wait_for(Path(out + ".idle"))
        idle = browse(idle_s)
    every = [t for ts in loaded.values() for t in ts]
    overall = quantiles(every)
    Path(out).write_text(json.dumps({
        "pattern": pattern, "warmup_s": round(warmup_s, 1), "queries": len(every), "errors": errors,
        "p95_ms": overall["p95_ms"], "p50_ms": overall["p50_ms"],
        "pages": {name: quantiles(ts) for name, ts in loaded.items()},
        "read_ms_p50": loaded_split["read"], "lock_ms_p50": loaded_split["lock"], "cpu_ms_p50": loaded_split["cpu"],
        "time_share": loaded_split["share"],
        "idle": {"seconds": idle_s, "overall": quantiles([t for ts in idle.values() for t in ts]),
                 "pages": {name: quantiles(ts) for name, ts in idle.items()}},
        "messages": messages[:10]}))
