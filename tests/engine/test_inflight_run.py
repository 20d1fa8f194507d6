"""Rollouts in flight from a real run: an organism run launched as its own process writes its in-flight
file while it steps; read from here, the file names the run's process, advances step by step, is never
behind what the store has committed, and its rows and tokens add up."""

from __future__ import annotations

import os
import signal

import pytest

from waiting import wait_until
from workbench.store.inflight import read_inflight

pytestmark = pytest.mark.slow


def test_a_launched_run_reports_its_steps_in_flight(new_store, tiny_config, tmp_path):
    from workbench.control import launch
    from workbench.store import open_store

    root = new_store(tmp_path / "store")
    cfg = tiny_config(name="inflight", steps=3000, eval__every=0, eval__at_start=False, checkpoint__every=1000,
                      logging__inflight_s=0.05, logging__background_writes=False)
    run_id = launch(cfg.to_dict(), store=str(root))
    seen: list[tuple[int, dict]] = []  # (the store's last committed step before the read, the report)
    try:
        with open_store(root) as store:
            def committed() -> int:
                steps = store.run_steps(run_id)
                return int(steps["step"].max()) if steps.height else -1

            def enough() -> bool:
                assert store.run(run_id)["status"] not in ("failed", "crashed"), store.run(run_id)
                before = committed()
                report = read_inflight(root, run_id)
                assert report.problem is None, report.problem  # a reader never sees a half-written file
                if report.row is not None:
                    seen.append((before, report.row))
                return len({r["step"] for _, r in seen if r["step"] is not None}) >= 4

            wait_until(enough, 600, "four steps reported in flight", every=0.05)
            pid = store.run(run_id)["pid"]
    finally:
        with open_store(root) as store:
            pid = store.run(run_id).get("pid")
        if pid:
            os.killpg(pid, signal.SIGKILL)
    rows = [r for _, r in seen]
    assert {r["pid"] for r in rows} == {pid} and {r["run_id"] for r in rows} == {run_id}
    steps = [r["step"] for r in rows if r["step"] is not None]
    assert steps == sorted(steps), steps  # it only goes forward
    for before, r in seen:
        if r["step"] is not None:
            assert r["step"] >= before, (before, r)  # never behind the store's commits
        assert 0 <= r["finished"] <= r["rows"] and r["tokens"] <= r["rows"] * r["max_new_tokens"]
        # a batch's first report (decode step 0, written as it begins when a write is due) has no rows yet
        assert r["step_tokens"] >= r["tokens"] and len(r["slowest"]) == (min(3, r["rows"]) if r["decode_step"] else 0)
        if r["state"] == "idle":
            assert r["finished"] == r["rows"]
    assert "idle" in {r["state"] for r in rows}  # its batches end (the organism's take ~10 ms: seldom seen going)
    assert any(s["text"] is not None for r in rows for s in r["samples"])  # the tokenizer's text
