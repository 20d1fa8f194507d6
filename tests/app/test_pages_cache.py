"""The dashboard's live frames are cached per version of the tables they read: a page reopened while
nothing new was committed answers from cache (no store read), a commit to other tables leaves a frame
cached, and a new commit shows once the versions are re-read (within `app.data.LIVE_TTL`, shorter than a
live page's refresh). A live run's steps are read incrementally, whole again after a rollback."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
import synth  # noqa: E402
from apptest import new_app, open_app, point_at  # noqa: E402
from waiting import wait_until  # noqa: E402
from workbench.store import open_store  # noqa: E402


def test_reopened_page_reads_nothing_until_a_commit(tmp_path, monkeypatch):
    from app import data

    path = tmp_path / "store"
    ids = synth.fill(path, steps=2)
    at = open_app(path, monkeypatch)
    handle = data.store()
    reads = []
    real = handle.list_runs
    monkeypatch.setattr(handle, "list_runs", lambda *a, **k: reads.append(1) or real(*a, **k))
    for _ in range(3):  # the Runs page reopened, nothing new committed
        at.switch_page("app_pages/live.py").run()
        at.switch_page("app_pages/runs.py").run()
        assert not at.exception
    assert reads == []
    with open_store(path) as store:
        store.set_run_status(ids[0], "stopped")  # one commit

    def shows_it():
        at.run()
        return "stopped" in str(at.dataframe[0].value.to_dict())

    wait_until(shows_it, 30, "the new commit on the Runs page", every=0.5)
    assert len(reads) >= 1
    settled = len(reads)
    at.run()
    at.run()
    assert len(reads) == settled  # cached again under the new snapshot


def test_steps_are_read_incrementally_and_whole_again_after_a_rollback(tmp_path, monkeypatch):
    import streamlit as st

    from app import data
    from workbench.store.records import StepRecord

    path = tmp_path / "store"
    run_id, other = synth.fill(path, steps=4)
    point_at(path, monkeypatch)
    st.cache_resource.clear()
    handle = data.store()
    calls = []
    real = handle.run_steps
    monkeypatch.setattr(handle, "run_steps", lambda *a, **k: calls.append(k.get("after")) or real(*a, **k))

    def fresh():
        data.versions.clear()
        return data.steps((run_id,))

    assert fresh()["step"].to_list() == [0, 1, 2, 3] and calls == [None]
    with open_store(path) as store:
        store.add_event(other, "info", "note", "another table")
    assert fresh()["step"].to_list() == [0, 1, 2, 3] and len(calls) == 1  # events changed: still cached
    with open_store(path) as store:
        for step in (4, 5):
            store.write_step(StepRecord(run_id, step, {"rollout/count": 0}, [], [], [], []))
    got = fresh()
    assert calls[-1] == {run_id: 3}  # only the new steps read
    with open_store(path) as store:
        assert got.equals(store.run_steps(run_id))  # the same frame a whole read gives
        store.rollback_run(run_id, 1)
    assert fresh()["step"].to_list() == [0, 1] and calls[-1] is None  # a rewrite: read whole again


HOLD = """
import fcntl, sqlite3, sys
lock = open(sys.argv[1] + "/.write.lock", "a+")
fcntl.flock(lock, fcntl.LOCK_EX)               # the store's writer lock, as during a commit
con = sqlite3.connect(sys.argv[1] + "/catalog.sqlite", isolation_level=None)
con.execute("BEGIN IMMEDIATE")                 # the catalog's write transaction, open
con.execute("UPDATE ducklake_metadata SET value = value WHERE key = 'version'")
print("held", flush=True)
sys.stdin.read()                               # until the test closes our stdin
con.execute("ROLLBACK")
"""


def test_the_dashboards_reads_do_not_wait_on_a_writers_commit(tmp_path, monkeypatch):
    """A writer in the middle of a commit (the store's write lock and the SQLite catalog's write
    transaction held, in another process) does not hold up a page: its reads go on (WAL)."""
    import subprocess
    import sys
    import time

    path = tmp_path / "store"
    ids = synth.fill(path, steps=2)
    point_at(path, monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        at = new_app()
        at.run()
        assert not at.exception, at.exception
        shown = at.dataframe[0].value.to_dict()
        assert all(any(r in str(v) for v in shown.values()) for r in ids)
        assert holder.poll() is None and time.monotonic() - t0 < 60  # read while the commit was held
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
