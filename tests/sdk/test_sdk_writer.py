"""The SDK writer's commit window: steps handed over within one window go in one transaction, a flush
commits at once without waiting for the window, and `init` refuses a bad window. Real store, in-process."""

from __future__ import annotations

import time

import pytest

import workbench
from workbench.errors import DataError
from workbench.store import open_store


def _log(run, step, n=4):
    run.log_rollouts(step, prompts=[f"q{i % 2}" for i in range(n)], responses=[f"a{step}-{i}" for i in range(n)],
                     rewards=[float(i % 2) for i in range(n)])


def test_steps_within_one_window_share_a_commit_and_flush_does_not_wait(tmp_path):
    path = tmp_path / "store"
    run = workbench.init(store=path, name="window", heartbeat_s=0, guards=False, commit_window_s=60.0)
    for step in range(5):
        _log(run, step)
    _log(run, 5)  # seals step 4: five steps wait in the writer's queue
    time.sleep(0.3)  # a window of 0 would have committed them by now (checked below with the window off)
    assert run.commits == []
    t = time.monotonic()
    assert run.flush(timeout_s=30)
    assert time.monotonic() - t < 30
    assert [c[0] for c in run.commits] == [6] and sum(c[1] for c in run.commits) == 24
    run.finish()
    with open_store(path, read_only=True) as s:
        assert len(s.rollouts(run.run_id, limit=100)) == 24


def test_a_window_of_zero_commits_as_soon_as_the_writer_is_idle(tmp_path):
    run = workbench.init(store=tmp_path / "store", name="eager", heartbeat_s=0, guards=False, commit_window_s=0)
    _log(run, 0)
    _log(run, 1)  # seals step 0
    deadline = time.monotonic() + 30
    while not run.commits and time.monotonic() < deadline:
        time.sleep(0.02)
    assert run.commits and run.commits[0][:2] == (1, 4)
    run.finish()


@pytest.mark.parametrize("window", [-1, float("nan"), "soon", 1e9])
def test_init_refuses_a_bad_window(tmp_path, window):
    with pytest.raises(DataError, match="commit_window_s"):
        workbench.init(store=tmp_path / "store", name="bad", commit_window_s=window)
