"""Liveness: crashed means stale heartbeat AND process gone (checked against real processes)."""

import datetime as dt
import os
import signal
import subprocess
import sys
import time

import pytest

from waiting import wait_until
from workbench.control.liveness import heartbeat_age_s, is_crashed, pid_alive

NOW = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.timezone.utc)


def _run(pid, *, beat_age_s, status="running", host=None):
    beat = NOW - dt.timedelta(seconds=beat_age_s)
    return {"run_id": "r1", "status": status, "pid": pid, "host": host,
            "heartbeat_at": beat.replace(tzinfo=None), "created_at": beat - dt.timedelta(seconds=60)}


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a live process to look at
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_live_process_is_alive(child):
    assert pid_alive(child.pid)
    assert pid_alive(child.pid, since=time.time())


def _state(pid: int) -> str:
    """The process's state letter from /proc (R, S, Z, ...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_killed_unreaped_child_is_not_alive(child):
    os.kill(child.pid, signal.SIGKILL)
    # not reaped yet: a zombie, which still "exists"
    wait_until(lambda: _state(child.pid) == "Z", 10, "the killed child to become a zombie", every=0.02)
    assert not pid_alive(child.pid)


def test_pid_reused_after_last_heartbeat_is_not_ours(child):
    # the process started now; a heartbeat from an hour ago cannot have come from it
    assert not pid_alive(child.pid, since=time.time() - 3600)


def test_crashed_needs_both_conditions(child):
    now = NOW.timestamp()
    dead = 2**22 + 12345  # above the default pid_max: no such process
    # stale and gone: crashed
    assert is_crashed(_run(dead, beat_age_s=300), now=now)
    # fresh heartbeat, process gone: not (yet) crashed
    assert not is_crashed(_run(dead, beat_age_s=1), now=now)
    # stale heartbeat but the process lives (and started before that heartbeat): not crashed
    live = _run(child.pid, beat_age_s=300)
    live["heartbeat_at"] = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    assert not is_crashed(live, stale_s=0.5)


def test_only_live_statuses_and_local_hosts(child):
    now = NOW.timestamp()
    dead = 2**22 + 12345
    for status in ("finished", "failed", "stopped", "crashed"):
        assert not is_crashed(_run(dead, beat_age_s=300, status=status), now=now)
    for status in ("created", "running", "paused", "stopping"):
        assert is_crashed(_run(dead, beat_age_s=300, status=status), now=now)
    assert not is_crashed(_run(dead, beat_age_s=300, host="some-other-machine"), now=now)


def test_age_falls_back_to_created_at():
    run = {"heartbeat_at": None, "created_at": NOW - dt.timedelta(seconds=42)}
    assert heartbeat_age_s(run, now=NOW.timestamp()) == pytest.approx(42)
    assert heartbeat_age_s({"heartbeat_at": None, "created_at": None}) is None
