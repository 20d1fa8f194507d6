"""The bad-input corpus's live run (benchmarks/badinput.py): a small organism run, launched detached
and paused in the corpus's store, that must keep going through every case: alive, heart-beating, and
taking a step once the corpus resumes it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError


class LiveRun:
    """A small organism run, launched detached and paused, that must survive the corpus."""

    def __init__(self, store: Path):
        self.store = store
        self.run_id = ""
        self.pid: int | None = None

    def start(self, timeout_s: float = 240.0) -> None:
        from workbench.control import api
        from workbench.control.launch import launch
        from benchmarks.tiny import small_organism_models, tiny_run
        from workbench.store import open_store

        models = small_organism_models()  # built once per machine (seconds), shared with the tests
        self.store.mkdir(parents=True, exist_ok=True)
        if not (self.store / "models").exists():
            (self.store / "models").symlink_to(models)
        config = tiny_run({
            "name": "badinput-live", "steps": 100_000, "allocator.budget": 16, "allocator.prompts_per_step": 4,
            "eval.every": 0, "eval.samples": 2, "eval.max_prompts": 4, "eval.at_start": False,
            "checkpoint.every": 0,
        })
        self.run_id = launch(config.to_dict(), store=str(self.store))
        with open_store(self.store, create=False) as st:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                row = st.run(self.run_id)
                if row.get("status") in ("failed", "crashed"):
                    raise WorkbenchError(f"the corpus's live run {self.run_id} {row['status']}: {row.get('error')}")
                if st.run_steps(self.run_id).height >= 1:
                    break
                time.sleep(0.5)
            else:
                raise WorkbenchError(f"the corpus's live run {self.run_id} took no step in {timeout_s:g} s")
            cid = api.pause(st, self.run_id, who="badinput")
            out = api.wait(st, self.run_id, cid, timeout_s=120)
            if out.get("status") != "applied":
                raise WorkbenchError(f"could not pause the corpus's live run: {out}")
            self.pid = st.run(self.run_id).get("pid")

    def check(self) -> dict[str, Any]:
        """Is the run still alive and heart-beating, and does it take a step when resumed? Stops it."""
        from workbench.control import api
        from workbench.store import open_store

        with open_store(self.store, create=False) as st:
            row = st.run(self.run_id)
            steps_before = st.run_steps(self.run_id).height
            age = _heartbeat_age(row)
            alive = _alive(self.pid)
            status = row.get("status")
            cid = api.resume(st, self.run_id, who="badinput")
            resumed = api.wait(st, self.run_id, cid, timeout_s=120).get("status") == "applied"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and st.run_steps(self.run_id).height <= steps_before:
                time.sleep(0.5)
            steps_after = st.run_steps(self.run_id).height
            self.stop(st)
        ok = bool(alive and status == "paused" and age is not None and age < 30 and resumed
                  and steps_after > steps_before)
        return {"ok": ok, "run_id": self.run_id, "status_during": status, "alive": alive,
                "heartbeat_age_s": age, "resumed": resumed, "steps_before": steps_before,
                "steps_after": steps_after}

    def stop(self, st: Any = None) -> None:
        from workbench.control import api

        if not self.run_id:
            return
        try:
            if st is not None:
                cid = api.stop(st, self.run_id, who="badinput")
                api.wait(st, self.run_id, cid, timeout_s=60)
        except WorkbenchError:
            pass
        deadline = time.monotonic() + 30
        while self.pid and _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.pid and _alive(self.pid):
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass


def _alive(pid: Any) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except OSError:
        return False
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{int(pid)}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _heartbeat_age(row: dict[str, Any]) -> float | None:
    import datetime as dt

    hb = row.get("heartbeat_at")
    if hb is None:
        return None
    if hb.tzinfo is None:
        hb = hb.replace(tzinfo=dt.timezone.utc)
    return round((dt.datetime.now(dt.timezone.utc) - hb).total_seconds(), 1)
