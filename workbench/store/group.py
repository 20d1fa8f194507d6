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
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from workbench.store.records import StepRecord

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
                 commit_spacing_s: float = 0.0, name: str = "store-writer", nice: int = 0) -> None:
        self.store = store
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
                self._busy = True
                self._cond.notify_all()  # producers blocked on a full queue
            try:
                if self._error is None:
                    t, c = time.perf_counter(), time.thread_time()
                    self.store.write_steps([record for _, record, _ in batch])
                    self.cpu_s += time.thread_time() - c
                    done = self._last_end = time.monotonic()
                    self.commits.append((len(batch), sum(n for _, _, n in batch), time.perf_counter() - t))
                    self.lags.extend(done - handed for handed, _, _ in batch)
            except BaseException as exc:  # noqa: BLE001 - raised to the producer at its next call
                self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    if self._error is not None:  # what waits is dropped: resume regenerates it
                        self._pending.clear()
                        self._pending_rows = 0
                        self._held = None
                    self._cond.notify_all()

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
            while self._pending_rows > 2 * self.commit_max_rows and self._error is None:
                self._cond.wait()

    def release(self) -> None:
        """Hand the held step to the writer now."""
        with self._cond:
            self._hand_over()

    def flush(self) -> None:
        """Block until every step submitted is committed; re-raise a failed commit."""
        if self._thread is not None:
            with self._cond:
                self._hand_over()
                self._flushing += 1  # no spacing while someone waits for the commit
                self._cond.notify_all()
                try:
                    while (self._pending or self._busy) and self._thread.is_alive():
                        self._cond.wait()
                finally:
                    self._flushing -= 1
        self._raise()

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
