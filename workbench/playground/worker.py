"""The Playground's worker: a process of its own that samples checkpoints for the dashboard, so a page's
script thread never runs a model.

    worker = Worker(store="store")                  # starts `python -m workbench.playground.worker`
    rid = worker.submit(SampleRequest("tiny-...", 2, prompt_id="arith-train-000003", n=8))
    worker.status(rid)     # {"state": "queued" | "running" | "done" | "failed" | "cancelled", ...}
    worker.cancel(rid); worker.close()

How it behaves:

1. Requests are queued and served one at a time, in order. A request past the limits (`Limits`) is
   refused when submitted, with one line naming the field; more than `MAX_QUEUED` waiting is refused too.
2. Cancellable: a queued request is dropped, a running one stops at its next decoding step.
3. Priority: the worker runs at niceness `WORKER_NICE` (5) with one torch thread. Between the dashboard
   (niceness 0: its pages stay responsive) and the runs the workbench starts (10,
   `control.priority`): a person waiting for samples is served before a run's background steps, yet
   the run keeps every core but the one the worker computes on, and only while a request runs. A busy
   machine makes a request slower, never the run: past `Limits.max_seconds` the request fails with a
   line that gives the machine's load.
4. Memory: one model per (run, checkpoint) at most, and at most `MAX_MODELS` of them; a model unused for
   `IDLE_S` seconds is released (so are the oldest past `MAX_MODELS`).
5. The same request gives the same tokens here and from `workbench sample` (both call
   `playground.sample.sample` with one torch thread).

The protocol is JSON lines: requests on the worker's stdin (`{"op": "sample", "id": ..., "request":
{...}}`, `{"op": "cancel", "id": ...}`), updates on its stdout (`{"id": ..., "state": ..., ...}`).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError, WorkbenchError
from workbench.playground.sample import Limits, SampleRequest

if TYPE_CHECKING:
    from workbench.store.handle import StoreLike

WORKER_NICE = 5
MAX_QUEUED = 8
MAX_MODELS = 4
IDLE_S = 300.0


class Worker:
    """The dashboard's side: starts the worker process and follows its requests (see the module)."""

    def __init__(self, store: StoreLike, *, limits: Limits = Limits(), idle_s: float = IDLE_S) -> None:
        """`store`: a store directory, an `s3://` URL, an open Store or its `StoreHandle` (one value: the
        worker reads runs from it and checkpoints from its local folder)."""
        from workbench.store.handle import StoreHandle

        handle = StoreHandle.at(store)
        self.limits = limits
        self._lock = threading.Lock()
        self._states: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        args = [sys.executable, "-m", "workbench.playground.worker", "--store", handle.spec,
                "--store-dir", str(handle.folder()), "--idle-s", str(idle_s),
                "--limits", json.dumps(asdict(limits))]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1,
                                     env={**os.environ, **handle.child_env(), "OMP_WAIT_POLICY": "PASSIVE"})
        self._reader = threading.Thread(target=self._read, daemon=True, name="playground-reader")
        self._reader.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                update = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self._states.setdefault(update["id"], {}).update(update)
        with self._lock:  # the process ended: what was pending will never finish
            for state in self._states.values():
                if state.get("state") in ("queued", "running"):
                    state.update(state="failed", error="the sampling worker stopped; submit the request again")

    def _send(self, message: dict[str, Any]) -> None:
        if not self.alive():
            raise WorkbenchError("the sampling worker is not running (it stopped); reload the page to start it")
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def submit(self, request: SampleRequest) -> str:
        """Queue `request`; returns its id. ConfigError (one line) for a request past the limits or a
        full queue."""
        request.check(self.limits)
        with self._lock:
            waiting = sum(s.get("state") in ("queued", "running") for s in self._states.values())
            if waiting >= MAX_QUEUED:
                raise ConfigError(f"request: {waiting} requests are queued or running (at most {MAX_QUEUED}); "
                                  "wait for one or cancel one")
            rid = f"r{next(self._ids)}"
            self._states[rid] = {"id": rid, "state": "queued", "request": request.to_dict(), "submitted": time.time()}
        self._send({"op": "sample", "id": rid, "request": request.to_dict()})
        return rid

    def status(self, rid: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._states.get(rid) or {"id": rid, "state": "unknown"})

    def finished(self) -> list[dict[str, Any]]:
        """Every request served so far (state "done"), in the order submitted, with its result."""
        with self._lock:
            return [dict(s) for s in self._states.values() if s.get("state") == "done"]

    def cancel(self, rid: str) -> None:
        self._send({"op": "cancel", "id": rid})

    def close(self) -> None:
        if self.alive():
            try:
                self._send({"op": "quit"})
                self.proc.wait(timeout=10)
            except (WorkbenchError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


# -- the worker process -------------------------------------------------------------------------------

class _Models:
    """Loaded policies by (run, step): one each at most, the idle and the oldest past the cap released."""

    def __init__(self, store: str, store_dir: str, idle_s: float) -> None:
        self.store, self.store_dir, self.idle_s = store, store_dir, idle_s
        self.loaded: dict[tuple[str, int], tuple[Any, float]] = {}

    def get(self, run_id: str, step: int) -> Any:
        from workbench.playground.sample import load_policy, run_config
        from workbench.store import open_store

        key = (run_id, step)
        if key not in self.loaded:
            with open_store(self.store, read_only=True) as st:
                cfg = run_config(st.run(run_id))
            self.loaded[key] = (load_policy(self.store_dir, run_id, cfg, step, threads=1), time.monotonic())
            while len(self.loaded) > MAX_MODELS:
                oldest = min(self.loaded, key=lambda k: self.loaded[k][1])
                del self.loaded[oldest]
        policy = self.loaded[key][0]
        self.loaded[key] = (policy, time.monotonic())
        return policy

    def release_idle(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, used) in self.loaded.items() if now - used > self.idle_s]:
            del self.loaded[key]


def _busy_note() -> str:
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    return f" (the machine's load is {load:.1f} on {cores} cores)" if load >= cores else ""


def serve(store: str, store_dir: str, limits: Limits, idle_s: float) -> None:
    """The worker process's loop: read requests from stdin, serve them one at a time, write updates."""
    from workbench.control.priority import lower_priority
    from workbench.playground.sample import sample

    lower_priority(WORKER_NICE)
    jobs: queue.Queue = queue.Queue()
    cancelled: set[str] = set()
    out_lock = threading.Lock()

    def emit(**update: Any) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(update, default=str) + "\n")
            sys.stdout.flush()

    def read() -> None:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("op") == "cancel":
                cancelled.add(msg["id"])
            elif msg.get("op") == "sample":
                jobs.put(msg)
            elif msg.get("op") == "quit":
                break
        jobs.put(None)

    threading.Thread(target=read, daemon=True).start()
    models = _Models(store, store_dir, idle_s)
    while True:
        try:
            msg = jobs.get(timeout=min(idle_s, 30.0))
        except queue.Empty:
            models.release_idle()
            continue
        if msg is None:
            return
        rid = msg["id"]
        if rid in cancelled:
            emit(id=rid, state="cancelled")
            continue
        emit(id=rid, state="running", started=time.time())
        try:
            request = SampleRequest.from_dict(msg["request"])
            policy = models.get(request.run_id, request.checkpoint)
            result = sample(policy, request, limits, cancelled=lambda: rid in cancelled)
            emit(id=rid, state="done", result=result)
        except WorkbenchError as exc:
            state = "cancelled" if rid in cancelled else "failed"
            emit(id=rid, state=state, error=str(exc) + ("" if state == "cancelled" else _busy_note()))
        except Exception as exc:  # noqa: BLE001 - one request's failure never ends the worker
            emit(id=rid, state="failed", error=f"{type(exc).__name__}: {exc}")
        models.release_idle()


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="The Playground's sampling worker (started by the dashboard).")
    parser.add_argument("--store", required=True)
    parser.add_argument("--store-dir", required=True)
    parser.add_argument("--idle-s", type=float, default=IDLE_S)
    parser.add_argument("--limits", default="{}")
    args = parser.parse_args(argv)
    serve(args.store, args.store_dir, Limits(**json.loads(args.limits)), args.idle_s)


if __name__ == "__main__":
    main()
