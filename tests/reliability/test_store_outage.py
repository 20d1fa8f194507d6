"""A training run rides out an outage of its store (issue #39): object storage behind a loopback proxy
taken down for 60 s in the middle of a run, and a PostgreSQL catalog whose server is stopped for 60 s.
The run keeps training (its steps queue in memory; the second test's bound of 3 pauses it), says
"store unreachable, retrying since ..." while the outage lasts (its status file, which `workbench runs`
prints when the store cannot be read), finishes by itself, and every step it stored equals an
uninterrupted run's of the same seed (timing metrics left out); an event records the outage.
A run started or resumed while the store is unreachable stops at once with one line.

The 60 s tests are slow (`-m slow`); WORKBENCH_OUTAGE_S shortens their outage for a quick look."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from workbench.engine import run
from benchmarks.chaos_compare import KEYS, compare_table
from workbench.store import open_store
from workbench.store.outage import read_statuses
from workbench.store.s3local import environ, local_s3
from workbench.store.tcpproxy import TcpProxy

BUCKET = "wb-outage-run"
OUTAGE_S = float(os.environ.get("WORKBENCH_OUTAGE_S", "60"))
STEPS = 14
OUTAGE_AFTER = 3
"""The outage starts when this step is recorded."""


@pytest.fixture(scope="module")
def proxied_s3():
    with local_s3(BUCKET, set_env=False) as server, TcpProxy(server.port) as proxy:
        with environ({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint}):
            yield server, proxy


@pytest.fixture
def pg_server():
    """A PostgreSQL server in a temp dir of its own (as root it runs as `postgres`), to stop and start; one
    per test, so that each test's catalog is its own (a catalog keeps the data path it was created with)."""
    from workbench.store.pglocal import local_postgres_server, server_bin

    if server_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with local_postgres_server(fsync=False) as server:
        yield server


def _cfg(tiny_config, bound: int):
    return tiny_config(name="outage", steps=STEPS, eval__every=0, eval__at_start=False, checkpoint__every=0,
                       store__max_queued_steps=bound)


def _ride_out(open_it, folder, cfg, stop, start) -> dict:
    """An uninterrupted run, then the same run with the store taken away for OUTAGE_S after step
    OUTAGE_AFTER; what was seen meanwhile."""
    seen: dict = {"statuses": [], "steps_during": [], "outage": None}
    with open_it() as st:
        st.handle = st.handle.at_home(folder)  # the runs' local folder (a shared catalog has none of its own)
        ref = run(cfg, store=st)
    back = threading.Event()

    def restore() -> None:
        time.sleep(OUTAGE_S)
        start()
        back.set()

    def watch() -> None:
        while not back.is_set():
            said = read_statuses(folder)
            if said:
                seen["statuses"].extend(said.values())
            back.wait(0.5)  # the next look, or at once when the store is back

    def on_step(step: int, metrics: dict) -> None:
        if step == OUTAGE_AFTER and seen["outage"] is None:
            stop()
            seen["outage"] = time.monotonic()
            threading.Thread(target=restore, daemon=True).start()
            threading.Thread(target=watch, daemon=True).start()
        elif seen["outage"] is not None and not back.is_set():
            seen["steps_during"].append(step)

    t = time.monotonic()
    with open_it() as st:
        st.handle = st.handle.at_home(folder)
        rid = run(cfg, store=st, on_step=on_step)
    seen["wall_s"] = time.monotonic() - t
    back.wait(OUTAGE_S + 60)
    return {"ref": ref, "run": rid, **seen}


def _check(open_it, folder, out: dict, *, paused: bool) -> None:
    ref, rid = out["ref"], out["run"]
    assert out["wall_s"] >= OUTAGE_S, "the run ended before the store came back"
    assert out["steps_during"], "no step was trained while the store was down"
    said = [s for s in out["statuses"] if s["run_id"] == rid]
    assert said and all(s["message"].startswith("store unreachable, retrying since") for s in said)
    assert ("paused" in {s["state"] for s in said}) == paused
    assert read_statuses(folder) == {}, "the status file outlived the outage"
    with open_it() as st:
        assert st.run(rid)["status"] == "finished"
        assert st.run_steps(rid)["step"].to_list() == list(range(1, STEPS + 1))
        for table in KEYS:
            diff = compare_table(st, table, rid, ref)
            assert diff == {"lost": 0, "extra": 0, "differ": 0, "duplicated_steps": []}, (table, diff)
        events = st.events(rid).filter(kind="store_outage").to_dicts()
    assert len(events) == 1
    import json

    data = events[0]["data"] if isinstance(events[0]["data"], dict) else json.loads(events[0]["data"])
    print(f"outage {OUTAGE_S:g} s: run wall {out['wall_s']:.1f} s, steps trained during it {out['steps_during']}, "
          f"event {data}")  # the figures docs/object-storage.md quotes (pytest -s)
    assert data["seconds"] >= 0.75 * OUTAGE_S and data["steps_queued"] >= 1 and data["paused"] == paused


@pytest.mark.slow
def test_a_run_rides_out_an_outage_of_its_object_storage(proxied_s3, tiny_config, new_store, tmp_path):
    _, proxy = proxied_s3
    folder = new_store(tmp_path / "local")
    url, catalog = f"s3://{BUCKET}/ride", str(folder / "catalog.sqlite")
    out = _ride_out(lambda: open_store(url, catalog=catalog, threads=1), str(folder), _cfg(tiny_config, 256),
                    proxy.stop, proxy.start)
    _check(lambda: open_store(url, catalog=catalog), str(folder), out, paused=False)


@pytest.mark.slow
def test_a_run_rides_out_a_stopped_postgres_catalog_paused_at_its_bound(pg_server, tiny_config, new_store,
                                                                        tmp_path):
    folder = new_store(tmp_path / "local")
    data = str(tmp_path / "data")
    out = _ride_out(lambda: open_store(catalog=pg_server.url, data_path=data, threads=1), str(folder),
                    _cfg(tiny_config, 3), pg_server.stop, pg_server.start)
    _check(lambda: open_store(catalog=pg_server.url, data_path=data), str(folder), out, paused=True)


def _cli(*args: str, env: dict) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120)
    return out, time.monotonic() - t


def test_a_run_started_or_resumed_while_the_store_is_unreachable_stops_at_once_in_one_line(
        proxied_s3, pg_server, new_store, tmp_path):
    server, proxy = proxied_s3
    folder = new_store(tmp_path / "local")
    env = {**server.env, "AWS_ENDPOINT_URL": proxy.endpoint, "WORKBENCH_LOCAL_DIR": str(folder)}
    sqlite = ["--catalog", str(folder / "catalog.sqlite")]
    postgres = ["--catalog", pg_server.url]
    url = f"s3://{BUCKET}/down"
    with open_store(url, catalog=pg_server.url):
        pass  # the store exists: only its server is missing below
    runs = []
    proxy.stop()
    try:
        runs += [_cli(*sqlite, "run", "--store", url, "--steps", "2", "--quiet", env=env),
                 _cli(*sqlite, "resume", "some-run", "--store", url, "--quiet", env=env)]
    finally:
        proxy.start()
    pg_server.stop()
    try:
        runs += [_cli(*postgres, "run", "--store", url, "--steps", "2", "--quiet", env=env),
                 _cli(*postgres, "resume", "some-run", "--store", url, "--quiet", env=env)]
    finally:
        pg_server.start()
    for out, seconds in runs:
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1, out.stderr
        assert "cannot open store" in lines[0] and "its server is unreachable" in lines[0], lines[0]
        assert seconds < 60, seconds
