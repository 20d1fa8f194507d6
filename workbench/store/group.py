"""Group commit: a writer thread that commits whole steps, several per transaction when they come
faster than the store commits them (`Store.write_steps`), as databases group their commits.

- A step that reaches the writer while it is idle is committed at once, unless the last commit ended
  less than `commit_spacing_s` ago: then it waits out the rest of that spacing, so that steps arriving
  faster than that share a transaction (fewer catalog writes and files per step, the visibility lag
  at most the spacing plus a commit). Steps that arrive while a commit runs wait and go together in
  the next transaction, up to `commit_max_rows` rollouts (whole steps; a single larger step goes
  alone). Readers see whole steps only.
- `submit(record, hold=True)` keeps the step back until `release()` (the engine releases it when its
  next policy update starts, so the commit's Python work does not compete with generation for the
  GIL); the writer hands a held step over by itself after `commit_interval_s`, and so do the next
  `submit`, `flush` and `close`.
- `flush()` blocks until every step submitted is committed and re-raises a failed commit. After a
  failed commit the steps still waiting are dropped (a kill would lose them the same way: they are
  past the last checkpoint, which resume rolls back to and regenerates from).
- `submit` blocks while more than `2 * commit_max_rows` rollouts wait, so a producer faster than the
  store cannot grow memory without bound.
- Outages: a commit that cannot reach the store (object storage or a PostgreSQL catalog not
  answering, `StoreUnreachable`) is never given up: the writer replays it with backoff (at most 1 s
  apart) until it commits, while `submit` goes on queueing steps in memory. From the first failed
  attempt `outage` says since when and how many steps wait, and `listener("retrying" | "paused" |
  "end", info)` is told (the engine writes it where the CLI and the dashboard read it without the
  store, `workbench.store.outage`). At `max_queued_steps` waiting steps `submit` blocks (the run
  pauses) until the store is back; then the queued steps commit in order and the listener gets "end"
  with the outage's start, end and the most steps queued. During an outage the steps bound replaces
  the rollouts bound above.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from workbench.errors import StoreError, StoreUnreachable
from workbench.store.records import StepRecord

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from workbench.store.protocols import RunWriter


def lower_thread_priority(nice: int) -> bool:
    """Raise the calling thread's niceness by `nice` (Linux schedules threads one by one; a thread
    may always lower its own priority). False where the platform does not allow it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        return True
    except (AttributeError, OSError):
        return False


def record_rows(record: StepRecord) -> int:
    """Rollouts in a step (what `commit_max_rows` counts)."""
    rollouts = record.rollouts
    return int(rollouts.num_rows) if isinstance(rollouts, pa.Table) else len(rollouts)


class GroupWriter:
    """Commits submitted steps on a background thread, in groups (see the module docstring)."""

    def __init__(self, store: RunWriter, *, commit_max_rows: int = 16384, commit_interval_s: float = 1.0,
                 commit_spacing_s: float = 0.0, name: str = "store-writer", nice: int = 0,
                 max_queued_steps: int = 256, listener: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.store = store
        self.max_queued_steps = max(1, int(max_queued_steps))
        self.listener = listener
        self.outage: dict[str, Any] | None = None
        """While commits cannot reach the store: `since` (UTC datetime), `queued_steps`, `max_queued`,
        `paused`, `error` (the last failure's line); None otherwise."""
        self.outages: list[dict[str, Any]] = []
        """Every outage ridden out: start, end (UTC datetimes), seconds, steps_queued (the most)."""
        self._inflight = 0
        self.commit_max_rows = max(1, int(commit_max_rows))
        self.commit_interval_s = float(commit_interval_s)
        self.commit_spacing_s = max(0.0, float(commit_spacing_s))
        self._last_end = float("-inf")
        self._flushing = 0
        self.nice = int(nice)
        self.lags: list[float] = []
        """Seconds from each step's `submit` to the end of the commit that made it visible."""
        self.commits: list[tuple[int, int, float]] = []
        """(steps, rollouts, seconds) of each commit."""
        self.cpu_s = 0.0
        """The writer thread's CPU seconds in its commits so far (the store's Python work, Arrow, Parquet
        encoding and the catalog's writes: the engine's store runs DuckDB on one thread, the caller's)."""
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._pending: collections.deque[tuple[float, StepRecord, int]] = collections.deque()
        self._pending_rows = 0
        self._held: tuple[float, StepRecord] | None = None
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    # -- the writer thread -----------------------------------------------------------------------
    def _take(self) -> list[tuple[float, StepRecord, int]]:
        """The next group (caller holds the condition): whole steps up to commit_max_rows rollouts."""
        batch, rows = [], 0
        while self._pending:
            n = self._pending[0][2]
            if batch and rows + n > self.commit_max_rows:
                break
            batch.append(self._pending.popleft())
            rows += n
        self._pending_rows -= rows
        return batch

    def _work(self) -> None:
        if self.nice > 0:
            lower_thread_priority(self.nice)
        while True:
            with self._cond:
                while True:
                    if self._held is not None and (
                            self._closing or time.monotonic() - self._held[0] >= self.commit_interval_s):
                        self._hand_over()
                    spaced = self._last_end + self.commit_spacing_s
                    if self._pending and (self._closing or self._flushing or time.monotonic() >= spaced):
                        break
                    if self._closing:
                        return
                    deadlines = ([self._held[0] + self.commit_interval_s] if self._held is not None else []) + \
                        ([spaced] if self._pending else [])
                    self._cond.wait(max(0.0, min(deadlines) - time.monotonic()) if deadlines else None)
                batch = self._take()
                self._inflight = len(batch)
                self._busy = True
                self._cond.notify_all()  # producers blocked on a full queue
            try:
                if self._error is None:
                    t, c = time.perf_counter(), time.thread_time()
                    self._commit([record for _, record, _ in batch])
                    self.cpu_s += time.thread_time() - c
                    done = self._last_end = time.monotonic()
                    self.commits.append((len(batch), sum(n for _, _, n in batch), time.perf_counter() - t))
                    self.lags.extend(done - handed for handed, _, _ in batch)
            except BaseException as exc:  # noqa: BLE001 - raised to the producer at its next call
                self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._inflight = 0
                    if self._error is not None:  # what waits is dropped: resume regenerates it
                        self._pending.clear()
                        self._pending_rows = 0
                        self._held = None
                    self._cond.notify_all()

    def _commit(self, records: list[StepRecord]) -> None:
        """Commit one group, riding out an outage of the store (see the module docstring)."""
        delay = 0.05
        while True:
            try:
                self.store.write_steps(records, timeout_s=math.inf, on_retry=self._unreachable)
                break
            except StoreUnreachable as exc:  # a read before the commit (a run's last step) failed
                self._unreachable(exc)
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
        if self.outage is not None:
            self._outage_ended()

    def _queued_steps(self) -> int:
        """Steps handed over and not yet committed (caller holds the condition)."""
        return len(self._pending) + self._inflight + (self._held is not None)

    def _unreachable(self, exc: StoreError) -> None:
        """A commit failed to reach the store and will be replayed: begin or go on with the outage."""
        with self._cond:
            first = self.outage is None
            if first:
                self.outage = {"since": dt.datetime.now(dt.timezone.utc), "max_queued": 0, "paused": False}
            self.outage["error"] = str(exc).splitlines()[0][:500]
            self._note_queued()
            info = dict(self.outage)
        if first:
            log.warning("store unreachable: retrying, steps queue in memory (at most %d): %s",
                        self.max_queued_steps, info["error"])
        self._tell("paused" if info["paused"] else "retrying", info)

    def _note_queued(self) -> None:
        assert self.outage is not None
        queued = self._queued_steps()
        self.outage["queued_steps"] = queued
        self.outage["max_queued"] = max(self.outage["max_queued"], queued)

    def _outage_ended(self) -> None:
        with self._cond:
            assert self.outage is not None
            end = dt.datetime.now(dt.timezone.utc)
            info = {"start": self.outage["since"], "end": end, "seconds": (end - self.outage["since"]).total_seconds(),
                    "steps_queued": self.outage["max_queued"], "paused": self.outage.get("was_paused", False),
                    "error": self.outage.get("error")}
            self.outage = None
            self.outages.append(info)
            self._cond.notify_all()  # a producer paused at the bound
        log.warning("store reachable again after %.0f s; %d queued steps committed", info["seconds"],
                    info["steps_queued"])
        self._tell("end", info)

    def _tell(self, what: str, info: dict[str, Any]) -> None:
        if self.listener is not None:
            try:
                self.listener(what, info)
            except Exception:  # noqa: BLE001 - reporting must never stop the commits
                log.exception("store writer: the outage listener failed on %r", what)

    def _hand_over(self) -> None:
        """Move the held step to the queue (caller holds the condition)."""
        if self._held is not None:
            handed, record = self._held
            self._held = None
            rows = record_rows(record)
            self._pending.append((handed, record, rows))
            self._pending_rows += rows
            self._cond.notify_all()

    # -- the producer's side ---------------------------------------------------------------------
    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, record: StepRecord, *, hold: bool = False) -> None:
        """Hand a whole step to the writer (held back until `release()` when `hold`); raises the
        error of a failed earlier commit."""
        self._raise()
        if self._thread is None:
            raise RuntimeError("GroupWriter: submit after close")
        with self._cond:
            self._hand_over()
            self._held = (time.monotonic(), record)
            self._cond.notify_all()  # the writer's wait now has a deadline
            if not hold:
                self._hand_over()
            if self.outage is not None:
                self._note_queued()
            while self._error is None and self._full():
                if self.outage is not None and not self.outage["paused"]:
                    self.outage["paused"] = self.outage["was_paused"] = True
                    info = dict(self.outage)
                    self._cond.release()  # the listener writes a file: not under the lock
                    try:
                        self._tell("paused", info)
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(1.0)
            if self.outage is not None:
                self.outage["paused"] = False

    def _full(self) -> bool:
        """Whether `submit` must wait (caller holds the condition): the steps bound during an outage,
        else the rollouts bound."""
        if self.outage is not None:
            return self._queued_steps() >= self.max_queued_steps
        return self._pending_rows > 2 * self.commit_max_rows

    def release(self) -> None:
        """Hand the held step to the writer now."""
        with self._cond:
            self._hand_over()

    def flush(self, *, through_outage: bool = True) -> bool:
        """Block until every step submitted is committed (True); re-raise a failed commit. With
        `through_outage=False`, return False as soon as the store is found unreachable instead of
        waiting for it to come back."""
        if self._thread is not None:
            with self._cond:
                self._hand_over()
                self._flushing += 1  # no spacing while someone waits for the commit
                self._cond.notify_all()
                try:
                    while (self._pending or self._busy) and self._thread.is_alive():
                        if self.outage is not None and not through_outage:
                            return False
                        self._cond.wait(0.2 if not through_outage else None)
                finally:
                    self._flushing -= 1
        self._raise()
        return True

    def close(self) -> None:
        """Commit what was submitted, stop the writer thread; re-raise a failed commit."""
        if self._thread is not None:
            with self._cond:
                self._hand_over()
                self._closing = True
                self._cond.notify_all()
            self._thread.join()
            self._thread = None
        self._raise()
