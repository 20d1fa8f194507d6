"""Live control of real engine processes: launched detached, steered through the store.

One small organism run is launched per module and steered through the tests in order (budget,
allocator switch, invalid commands, pause, stop -> resume); a second run is killed with SIGKILL,
detected as crashed, and resumed. The organism (a small recipe) is built once per session."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from pathlib import Path

import pytest

from waiting import wait_until
from workbench import control
from workbench.control.liveness import refresh_statuses
from workbench.control.priority import DEFAULT_RUN_NICE, RUN_NICE_ENV

pytestmark = pytest.mark.slow

TIMEOUT_S = 900.0


LIVE = dict(allocator__prompts_per_step=4, allocator__budget=16, eval__at_start=False, eval__every=0,
            checkpoint__every=2, logging__heartbeat_s=1.0)
"""What these runs change in the tiny run: short steps, no evaluation, a checkpoint every 2 steps."""


def last_step(store, run_id) -> int:
    steps = store.run_steps(run_id)
    return int(steps["step"].max()) if len(steps) else 0


def status(store, run_id) -> str:
    return store.run(run_id)["status"]


def log_of(store_dir, run_id) -> str:
    path = store_dir / "runs" / run_id / "run.log"
    return path.read_text()[-3000:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def live_store_dir(new_store, tmp_path_factory):
    return new_store(tmp_path_factory.mktemp("live") / "store")


@pytest.fixture(scope="module")
def live(live_store_dir, tiny_config):
    """(store, run_id) of a launched run, stepping."""
    from workbench.store import open_store

    t0 = time.monotonic()
    # steps take ~0.1 s: it must outlive every test of the module; each step is committed before the next
    # starts: the store tells the step in progress exactly
    cfg = tiny_config(name="live", steps=2000, logging__background_writes=False, **LIVE)
    suite_nice = os.environ.pop(RUN_NICE_ENV, None)  # this run (and its restart) at the default (tests/conftest.py)
    run_id = control.launch(cfg.to_dict(), store=live_store_dir)
    assert time.monotonic() - t0 < 60, "launch must return at once"
    with open_store(live_store_dir) as st:
        assert status(st, run_id) == "created" and st.run(run_id)["pid"] != os.getpid()
        wait_until(lambda: last_step(st, run_id) >= 1 or status(st, run_id) == "failed", TIMEOUT_S,
                   "the first step", every=0.3)
        assert status(st, run_id) == "running", log_of(live_store_dir, run_id)
        assert_below_the_dashboard(st.run(run_id)["pid"])
        try:
            yield st, run_id
        finally:
            if suite_nice is not None:
                os.environ[RUN_NICE_ENV] = suite_nice
        if status(st, run_id) in ("running", "paused"):
            os.killpg(st.run(run_id)["pid"], signal.SIGKILL)


def assert_below_the_dashboard(pid: int) -> None:
    """A launched run works at niceness WORKBENCH_RUN_NICE (default 10) with torch's threads waiting
    quietly (workbench.control.priority)."""
    assert os.getpriority(os.PRIO_PROCESS, pid) >= DEFAULT_RUN_NICE
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists():  # Linux autogroup scheduling: the run's session is lowered too
        assert int(group.read_text().split()[-1]) >= DEFAULT_RUN_NICE
    environ = Path(f"/proc/{pid}/environ")
    if environ.exists():  # Linux
        assert f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'PASSIVE')}".encode() in environ.read_bytes()


def applied(st, run_id, cid):
    row = control.wait(st, run_id, cid, timeout_s=120)
    assert row["status"] == "applied", row
    return row


def test_set_budget_reaches_allocation_rows(live):
    st, run_id = live
    # the step in progress when the insert committed lies between these two (steps of the tiny run
    # can be shorter than the validation + insert); applied no later than the step after it
    before = last_step(st, run_id) + 1
    cid = control.set_budget(st, run_id, 24)
    after = last_step(st, run_id) + 1
    n = applied(st, run_id, cid)["applied_step"]
    assert before <= n <= after + 1
    wait_until(lambda: last_step(st, run_id) >= n + 1, TIMEOUT_S, "two steps under the new budget", every=0.3)
    alloc = st.allocations(run_id)
    before, after = alloc.filter(alloc["step"] < n), alloc.filter(alloc["step"] >= n)
    assert set(before["budget"].to_list()) == {16}
    assert set(after["budget"].to_list()) == {24}
    steps = st.run_steps(run_id)
    assert set(steps.filter(steps["step"] >= n)["budget"].to_list()) == {24}


def test_switch_allocator_mid_run(live):
    st, run_id = live
    row = applied(st, run_id, control.set_allocator(st, run_id, "multistage", {"n": 2, "n_max": 8}))
    n = row["applied_step"]
    wait_until(lambda: last_step(st, run_id) >= n, TIMEOUT_S, "a step under the new allocator", every=0.3)
    alloc = st.allocations(run_id)
    assert set(alloc.filter(alloc["step"] < n)["allocator"].to_list()) == {"uniform"}
    assert set(alloc.filter(alloc["step"] >= n)["allocator"].to_list()) == {"multistage"}
    all_steps = st.run_steps(run_id)
    steps = all_steps.filter(all_steps["step"] >= n)
    assert set(steps["allocator"].to_list()) == {"multistage"}
    assert control.allocator_in_force(st, run_id)[0] == "multistage"


def test_invalid_values_rejected_while_the_run_continues(live):
    st, run_id = live
    raw = {
        st.add_control(run_id, "set_budget", {"amount": 0}): "set_budget: amount",
        st.add_control(run_id, "set_allocator", {"name": "nope"}): "unknown allocator",
        st.add_control(run_id, "set_allocator_params", {"params": {"zz": 1}}): "zz",
        st.add_control(run_id, "set_temperature", {"temperature": 0}): "set_temperature: temperature",
    }
    for cid, text in raw.items():
        row = control.wait(st, run_id, cid, timeout_s=120)
        assert row["status"] == "rejected" and text in row["reason"], row
    before = last_step(st, run_id)
    wait_until(lambda: last_step(st, run_id) >= before + 2, TIMEOUT_S, "steps after the rejections", every=0.3)
    assert status(st, run_id) == "running"


def test_pause_holds_then_resume_continues(live):
    st, run_id = live
    row = applied(st, run_id, control.pause(st, run_id))
    assert status(st, run_id) == "paused"
    held = row["applied_step"] - 1
    wait_until(lambda: last_step(st, run_id) >= held, TIMEOUT_S, "the step before the pause to be committed",
               every=0.3)
    assert last_step(st, run_id) == held
    beat0 = st.run(run_id)["heartbeat_at"]
    # a paused run keeps heart-beating (every second here): watch it for several beats
    wait_until(lambda: st.run(run_id)["heartbeat_at"] >= beat0 + dt.timedelta(seconds=5), 60,
               "5 s of heartbeats while paused", every=0.3)
    assert last_step(st, run_id) == held, "steps were taken while paused"
    assert refresh_statuses(st, stale_s=5) == []
    applied(st, run_id, control.resume(st, run_id))
    assert status(st, run_id) == "running"
    wait_until(lambda: last_step(st, run_id) >= held + 2, TIMEOUT_S, "steps after resume", every=0.3)


def test_stop_then_resume(live, live_store_dir):
    st, run_id = live
    row = applied(st, run_id, control.stop(st, run_id))
    wait_until(lambda: status(st, run_id) == "stopped", TIMEOUT_S, "the stopped status", every=0.3)
    stopped_at = last_step(st, run_id)
    assert stopped_at == row["applied_step"] - 1
    # settings queued while stopped apply once restarted; then stop again to finish quickly
    control.set_budget(st, run_id, 20)
    control.restart_run(st, run_id)
    wait_until(lambda: last_step(st, run_id) >= stopped_at + 2, TIMEOUT_S, "steps after the restart", every=0.3)
    assert_below_the_dashboard(st.run(run_id)["pid"])  # the resumed process too
    steps = st.run_steps(run_id)["step"].to_list()
    assert steps == list(range(1, max(steps) + 1)), "a step was lost or counted twice"
    applied(st, run_id, control.stop(st, run_id))
    wait_until(lambda: status(st, run_id) == "stopped", TIMEOUT_S, "the second stop", every=0.3)


def test_kill9_crashed_then_resume_completes_once(live_store_dir, tiny_config):
    from workbench.store import open_store

    # long enough that it cannot finish between "three steps seen" and the kill (tiny steps take ~0.1 s)
    run_id = control.launch(tiny_config(name="crash", steps=40, **LIVE).to_dict(), store=live_store_dir)
    with open_store(live_store_dir) as st:
        wait_until(lambda: last_step(st, run_id) >= 3, TIMEOUT_S, "three steps", every=0.3)
        os.killpg(st.run(run_id)["pid"], signal.SIGKILL)
        assert status(st, run_id) == "running"
        wait_until(lambda: refresh_statuses(st, stale_s=3) == [run_id], 60, "crash detection", every=0.3)
        assert status(st, run_id) == "crashed"
        assert "gone" in st.run(run_id)["error"]
        control.restart_run(st, run_id)
        wait_until(lambda: status(st, run_id) in ("finished", "failed"), TIMEOUT_S, "the resumed run to finish",
                   every=0.3)
        assert status(st, run_id) == "finished", log_of(live_store_dir, run_id)
        steps = st.run_steps(run_id)["step"].to_list()
        assert sorted(steps) == list(range(1, 41))
        alloc = st.allocations(run_id)
        keys = alloc.select("step", "stage", "prompt_id")
        assert keys.n_unique() == len(keys), "allocation rows duplicated by the resume"
