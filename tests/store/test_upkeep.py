"""The writer's periodic upkeep: every `upkeep_every` steps small files are merged; the rows are
unchanged and a failed upkeep never fails the step that triggered it."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time

import pytest

from waiting import wait_until
from workbench.errors import StoreError
from workbench.store import maintenance, open_store
from workbench.store.connection import GATE_FILE
from workbench.store.maintenance import info
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL


def _files(store, table: str) -> int:
    return info(store)["tables"][table]["files"]


def _rows(store, run_id):
    return store.rollouts(run_id, limit=10_000).drop("token_entropy").to_dicts()


def test_small_files_are_merged_every_n_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(maintenance, "UPKEEP_DUTY", 1.0)  # the second round right after the first (no spacing)
    with open_store(tmp_path / "off", upkeep_every=0) as off, open_store(tmp_path / "on", upkeep_every=4) as on:
        ids = {}
        for name, store in (("off", off), ("on", on)):
            run_id = ids[name] = store.create_run(name, {}, seed=0)
            syn = SyntheticRun(run_id, SMALL, seed=3)
            for step in range(9):
                store.write_step(syn.step(step))
        on.wait_upkeep()  # rounds run on a background thread
        assert _files(off, "rollouts") == 9
        assert _files(on, "rollouts") <= 2  # steps 0-7 merged into one file, step 8 on its own
        assert _files(on, "allocations") <= 2
        want, got = _rows(off, ids["off"]), _rows(on, ids["on"])
        assert [{**r, "run_id": None} for r in got] == [{**r, "run_id": None} for r in want]
        assert on.run_steps(ids["on"])["step"].to_list() == list(range(9))


def test_a_failed_upkeep_is_logged_and_the_step_kept(tmp_path, monkeypatch, caplog):
    def broken(store, **_kw):
        raise StoreError("merge failed on purpose")

    monkeypatch.setattr(maintenance, "upkeep", broken)
    with open_store(tmp_path / "s", upkeep_every=1) as store:
        run_id = store.create_run("r", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=3)
        with caplog.at_level(logging.WARNING, logger="workbench.store.writer"):
            store.write_step(syn.step(0))
            store.wait_upkeep()
        assert "merge failed on purpose" in caplog.text
        assert store.run_steps(run_id)["step"].to_list() == [0]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_bad_upkeep_every_is_refused(tmp_path, bad):
    with pytest.raises(StoreError, match="upkeep_every"):
        open_store(tmp_path / "s", upkeep_every=bad)


def test_a_moved_store_directory_opens_and_takes_writes(tmp_path):
    """A store directory copied or moved elsewhere (another disk, a laptop) keeps working: its data
    is always <root>/data, whatever path the catalog recorded when it was created."""
    import shutil

    with open_store(tmp_path / "here") as store:
        run_id = store.create_run("r", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=3)
        store.write_step(syn.step(0))
    shutil.move(str(tmp_path / "here"), str(tmp_path / "there"))
    with open_store(tmp_path / "there", read_only=True) as store:
        assert store.count_rollouts(run_id) == 16 and store.rollouts(run_id, limit=3).height == 3
    with open_store(tmp_path / "there") as store:
        store.write_step(syn.step(1))
        assert store.run_steps(run_id)["step"].to_list() == [0, 1]
    assert list((tmp_path / "there" / "data").rglob("*.parquet"))


def _read_in_thread(store, run_id, done: list) -> threading.Thread:
    def go():
        done.append(store.run_steps(run_id).height)
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_reads_wait_while_maintenance_runs(tmp_path):
    """A read from another connection (here another thread; processes use the same lock files) waits
    until maintenance ends; a read on the maintaining thread itself goes through (no deadlock)."""
    with open_store(tmp_path / "s", upkeep_every=0) as writer, open_store(tmp_path / "s", read_only=True) as reader:
        run_id = writer.create_run("r", {}, seed=0)
        writer.write_step(SyntheticRun(run_id, SMALL, seed=3).step(0))
        done: list = []
        with writer._lake.maintaining("test"):
            assert writer.run_steps(run_id).height == 1  # same thread: not blocked by its own lock
            thread = _read_in_thread(reader, run_id, done)
            time.sleep(0.5)  # a window in which the read must not get through (the thing under test)
            assert done == []  # still waiting for the maintenance to end
        thread.join(10)
        assert done == [1]


def _gate_held(store) -> bool:
    """Whether someone holds the store's read gate exclusively (maintenance waiting or running)."""
    fd = os.open(store.location.root / GATE_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also drops a lock taken here


def test_maintenance_is_not_starved_by_readers(tmp_path):
    """Writer preference: while maintenance waits for a read in progress, new reads queue behind it."""
    with open_store(tmp_path / "s", upkeep_every=0) as store, open_store(tmp_path / "s", read_only=True) as reader:
        run_id = store.create_run("r", {}, seed=0)
        order: list[str] = []
        in_read, release = threading.Event(), threading.Event()

        def long_read():
            with reader._lake.reading():
                in_read.set()
                release.wait(10)
            order.append("first read")

        def maintain():
            with store._lake.maintaining("test"):
                order.append("maintenance")

        first = threading.Thread(target=long_read, daemon=True)
        first.start()
        assert in_read.wait(10)
        maint = threading.Thread(target=maintain, daemon=True)
        maint.start()
        wait_until(lambda: _gate_held(store), 10, "maintenance to hold the gate (waiting for the first read)")
        later: list = []
        second = _read_in_thread(reader, run_id, later)
        time.sleep(0.3)  # a window in which the new read must not get through (the thing under test)
        assert order == [] and later == []  # the new read queues behind the waiting maintenance
        release.set()
        for t in (first, maint, second):
            t.join(10)
        assert order == ["first read", "maintenance"] and later == [0]


def test_reads_of_a_store_without_lock_files_are_unguarded(tmp_path):
    """A read-only copy where the lock files cannot be created still reads."""
    with open_store(tmp_path / "s") as store:
        run_id = store.create_run("r", {}, seed=0)
    for name in (".read.lock", ".read.gate"):
        (tmp_path / "s" / name).unlink(missing_ok=True)
        (tmp_path / "s" / name).mkdir()  # cannot be opened as a lock file
    with open_store(tmp_path / "s", read_only=True) as reader:
        assert reader.run(run_id)["name"] == "r"


def test_upkeep_defaults_on_for_a_directory_and_off_for_a_catalog_url(tmp_path):
    with open_store(tmp_path / "dir") as local:
        assert local.upkeep_every == 100
    with open_store(catalog=f"sqlite:{tmp_path / 'c.sqlite'}", data_path=str(tmp_path / "data")) as shared:
        assert shared.upkeep_every == 0  # readers elsewhere cannot take the read lock
    with open_store(catalog=f"sqlite:{tmp_path / 'c.sqlite'}", data_path=str(tmp_path / "data"),
                    upkeep_every=7) as asked:
        assert asked.upkeep_every == 7


def test_writers_of_one_store_take_turns_at_upkeep(tmp_path, monkeypatch):
    """A round is store-wide: one due before another writer's round began is covered by it (nothing
    run); one due after waits for its turn (the rounds keep readers out at most UPKEEP_DUTY of the
    time), and gives up when its store closes meanwhile. (That a deferred round then runs:
    test_small_files_are_merged_every_n_steps, whose second round comes right after its first.)"""
    from workbench.store.maintenance import UPKEEP_STAMP

    monkeypatch.setattr(maintenance, "UPKEEP_DUTY", 0.01)  # b's turn comes 99 x a's hold after a's round
    with open_store(tmp_path / "s", upkeep_every=0) as a, open_store(tmp_path / "s", upkeep_every=0) as b:
        run_id = a.create_run("r", {}, seed=0)
        syn = SyntheticRun(run_id, SMALL, seed=3)
        a.write_step(syn.step(0))
        due = time.time()
        assert maintenance.upkeep(a, due_at=due) is not None
        stamp = (tmp_path / "s" / UPKEEP_STAMP).read_text()
        start, end, held = (float(x) for x in stamp.split())
        assert due <= start < end and 0 < held <= end - start and held == pytest.approx(a.upkeep_held_s, abs=0.01)
        assert maintenance.upkeep(b, due_at=due) is None and b.upkeep_held_s == 0  # covered by a's round
        b.write_step(syn.step(1))
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()  # b's store closing while its round waits for its turn
        t0 = time.monotonic()
        assert maintenance.upkeep(b, due_at=time.time(), stop=stop) is None
        assert 0.25 < time.monotonic() - t0 < 5.0 and b.upkeep_held_s == 0  # it waited, ran nothing, gave up
        assert (tmp_path / "s" / UPKEEP_STAMP).read_text() == stamp
        assert b.run_steps(run_id)["step"].to_list() == [0, 1]
