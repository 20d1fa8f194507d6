"""Reliability with real processes: concurrent writers and readers, kill -9 mid-transaction."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from waiting import wait_until
from workbench.store import open_store
from tests.store.procs import SHAPE, WHOLE_STEPS_SQL

PROCS = str(Path(__file__).with_name("procs.py"))


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, PROCS, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen, timeout: float) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}): {out}\n{err[-3000:]}"
    return json.loads(out.strip().splitlines()[-1])


def _new_runs(path: Path, n: int) -> list[str]:
    with open_store(path) as store:
        return [store.create_run(f"proc{i}", {}, seed=i) for i in range(n)]


@pytest.mark.slow
def test_one_writer_two_readers_only_whole_steps(tmp_path):
    """Readers see whole steps only, also while the writer merges files and flushes inlined rows
    (upkeep every 5 steps here: without the read lock, reads during upkeep saw tables empty)."""
    path = tmp_path / "store"
    (run_id,) = _new_runs(path, 1)
    writer = _start("writer", path, run_id, 100_000, 32, 5)
    readers = [_start("reader", path, run_id, 32) for _ in range(2)]
    w = _finish(writer, 240)
    results = [_finish(r, 240) for r in readers]
    assert w["failed"] == 0 and w["steps"] >= 10  # at least two upkeeps ran under the readers
    for r in results:
        assert r["errors"] == 0 and r["torn"] == 0
        assert r["reads"] >= 3 and r["max_step"] >= 1  # the readers saw the run grow
    with open_store(path) as store:
        assert store.count_rollouts(run_id) == w["steps"] * SHAPE.rollouts_per_step


@pytest.mark.slow
def test_three_writers_and_a_control_inserter(tmp_path):
    path = tmp_path / "store"
    runs = _new_runs(path, 3)
    steps, controls = 8, 20
    writers = [_start("writer", path, run_id, steps, 600) for run_id in runs]
    control = _start("controller", path, ",".join(runs), controls)
    results = [_finish(p, 600) for p in writers]
    c = _finish(control, 600)
    assert [r["failed"] for r in results] == [0, 0, 0]
    assert c["failed"] == 0 and sorted(c["ids"]) == list(range(1, controls + 1))
    with open_store(path) as store:
        for run_id in runs:
            frame = store.sql(WHOLE_STEPS_SQL, {"run": run_id})
            assert frame.height == steps
            assert frame["rn"].to_list() == [SHAPE.rollouts_per_step] * steps
            assert store.run_steps(run_id)["step"].to_list() == list(range(steps))
        ids = store.sql("SELECT control_id FROM controls ORDER BY control_id")["control_id"].to_list()
        assert ids == list(range(1, controls + 1))


@pytest.mark.slow
def test_kill_9_mid_transaction(tmp_path):
    path = tmp_path / "store"
    (run_id,) = _new_runs(path, 1)
    w = _finish(_start("writer", path, run_id, 2, 120), 180)
    assert w["steps"] == 2
    ready = tmp_path / "ready"
    hang = _start("hang", path, run_id, ready)

    def inside() -> bool:
        assert hang.poll() is None, hang.communicate()[1][-2000:]
        return ready.exists()

    wait_until(inside, 120, "the hanging writer to get inside its transaction")
    os.kill(hang.pid, signal.SIGKILL)
    hang.wait(30)
    with open_store(path) as store:
        assert store.run_steps(run_id)["step"].to_list() == [0, 1]
        assert store.count_rollouts(run_id) == 2 * SHAPE.rollouts_per_step
        assert store.count_rollouts(run_id, step_min=99) == 0
        # the lock died with the process: the next writer goes ahead
        store.heartbeat(run_id)
        store.add_event(run_id, "info", "resume", "after kill -9")
    frame = open_store(path, read_only=True).sql(WHOLE_STEPS_SQL, {"run": run_id})
    assert frame["rn"].to_list() == [SHAPE.rollouts_per_step] * 2


@pytest.mark.slow
def test_group_commit_with_two_readers_only_whole_steps(tmp_path):
    """Several whole steps per transaction (group commit), upkeep every 10 steps: readers still see
    whole steps only."""
    path = tmp_path / "store"
    (run_id,) = _new_runs(path, 1)
    writer = _start("group_writer", path, run_id, 100_000, 32, 4 * SHAPE.rollouts_per_step, 10)
    readers = [_start("reader", path, run_id, 32) for _ in range(2)]
    w = _finish(writer, 240)
    results = [_finish(r, 240) for r in readers]
    assert w["failed"] == 0 and w["steps"] >= 20
    assert w["commits"] < w["steps"]  # steps were grouped
    for r in results:
        assert r["errors"] == 0 and r["torn"] == 0
        assert r["reads"] >= 3 and r["max_step"] >= 1
    with open_store(path) as store:
        assert store.count_rollouts(run_id) == w["steps"] * SHAPE.rollouts_per_step


@pytest.mark.slow
def test_kill_9_during_group_commits_loses_only_uncommitted_steps(tmp_path):
    """kill -9 while a group writer commits: the store holds a prefix of whole steps, at least every
    step the writer had seen flushed; rolling back to a checkpoint and writing on works."""
    path = tmp_path / "store"
    (run_id,) = _new_runs(path, 1)
    proc = _start("group_writer", path, run_id, 100_000, 120, 4 * SHAPE.rollouts_per_step, 0)
    flushed = 0
    deadline = time.monotonic() + 120
    while flushed < 30 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, proc.communicate()[1][-2000:]
        flushed = max(flushed, json.loads(line).get("committed", 0))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    with open_store(path) as store:
        steps = store.run_steps(run_id)["step"].to_list()
        assert len(steps) >= flushed and steps == list(range(len(steps)))
        frame = store.sql(WHOLE_STEPS_SQL, {"run": run_id})
        assert frame["rn"].to_list() == [SHAPE.rollouts_per_step] * len(steps)
        store.rollback_run(run_id, flushed - 1)  # resume from the last checkpoint
        assert store.count_rollouts(run_id) == flushed * SHAPE.rollouts_per_step
