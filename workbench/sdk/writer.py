"""The SDK's background writer: whole steps committed off the trainer's thread, several per transaction
when they come faster than the store commits (group commit, `Store.write_steps`).

Unlike the engine's `GroupWriter` (`workbench/store/group.py`), which rides out an unreachable store but
hands any other failed commit back to a loop that can roll back and regenerate, a trainer logging through
the SDK has no such path: a commit that fails for any reason (the store locked past the lake's own
retries, or unreachable) is kept and tried again with backoff, and the failure is reported as a warning
(`errors`), never raised into the trainer.

- Back-pressure: `submit` blocks while more than `max_queued_rows` rollouts wait. When the store stays
  unreachable, a `submit` that has waited `block_s` gives up on the OLDEST waiting step, counts it in
  `dropped` and reports it: a trainer is never stopped by its logging, and nothing is dropped silently.
- Commit window: the writer waits until the oldest waiting step is `commit_window_s` old (or
  `commit_max_rows` rollouts wait, or `flush`/`close` asks) and commits everything waiting in one
  transaction, so the catalog's fixed cost per commit (one Parquet file and catalog rows per table) is
  paid once for several steps. A step is therefore visible at most `commit_window_s` plus one commit
  after it was handed over while the store is healthy, and a trainer killed with SIGKILL loses at most
  the steps of its open window. `commit_window_s=0` commits as soon as the writer is idle.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from workbench.errors import DataError
from workbench.store.group import lower_thread_priority
from workbench.store.records import StepRecord

if TYPE_CHECKING:
    from workbench.store.protocols import RunWriter


class _Pending:
    """A step handed over: its record is made on the writer's thread, once (kept for a retry)."""

    __slots__ = ("make", "rows", "step", "_record")

    def __init__(self, make: Callable[[], StepRecord], rows: int, step: int) -> None:
        self.make, self.rows, self.step = make, rows, step
        self._record: StepRecord | None = None

    def record(self) -> StepRecord:
        if self._record is None:
            self._record = self.make()
        return self._record


class SdkWriter:
    """Commits submitted steps on a background thread (see the module docstring)."""

    def __init__(self, store: RunWriter, *, commit_max_rows: int = 16384, max_queued_rows: int = 65536,
                 block_s: float = 300.0, retry_max_s: float = 5.0, nice: int = 0, commit_window_s: float = 0.0,
                 on_error: Callable[[str], None] | None = None, name: str = "sdk-writer",
                 after_commit: Callable[[list[StepRecord]], None] | None = None) -> None:
        self.store = store
        self.commit_max_rows = max(1, int(commit_max_rows))
        self.max_queued_rows = max(self.commit_max_rows, int(max_queued_rows))
        self.block_s, self.retry_max_s, self.nice = float(block_s), float(retry_max_s), int(nice)
        self.on_error, self.after_commit = on_error, after_commit
        self.commit_window_s = max(0.0, float(commit_window_s))
        self._flushing = 0
        self.commits: list[tuple[int, int, float]] = []
        """(steps, rollouts, seconds) of each commit."""
        self.dropped: list[int] = []
        """Steps given up on while the store was unreachable."""
        self.failures = 0
        """Commits that failed (each was tried again)."""
        self.cpu_s = 0.0
        self._cond = threading.Condition()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._since: collections.deque[float] = collections.deque()  # when each waiting step came
        self._pending_rows = 0
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _take(self) -> list[_Pending]:
        batch, rows = [], 0
        while self._pending:
            n = self._pending[0].rows
            if batch and rows + n > self.commit_max_rows:
                break
            batch.append(self._pending.popleft())
            self._since.popleft()
            rows += n
        return batch

    def _work(self) -> None:
        if self.nice > 0:
            lower_thread_priority(self.nice)
        delay = 0.05
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                self._wait_window()
                batch = self._take()
                self._busy = True
            ok = self._commit(batch)
            with self._cond:
                self._busy = False
                if ok:
                    self._pending_rows -= sum(p.rows for p in batch)
                    delay = 0.05
                else:  # kept, first in line; a `submit` that waits too long drops the oldest
                    self._pending.extendleft(reversed(batch))
                    self._since.extendleft([0.0] * len(batch))
                self._cond.notify_all()
                if not ok:
                    self._cond.wait(delay)
                    delay = min(delay * 2, self.retry_max_s)

    def _wait_window(self) -> None:
        """Wait (caller holds the condition) until the oldest waiting step is `commit_window_s` old, the
        waiting rows fill a commit, or a flush or close asks for everything now."""
        while self.commit_window_s and not self._closing and not self._flushing:
            left = self._since[0] + self.commit_window_s - time.monotonic()
            if left <= 0 or self._pending_rows >= self.commit_max_rows:
                return
            self._cond.wait(left)

    def _commit(self, batch: list[_Pending]) -> bool:
        t, c = time.perf_counter(), time.thread_time()
        try:
            self.store.write_steps([p.record() for p in batch])
        except DataError as exc:  # rows the store refuses: trying again cannot help
            self._report(f"the store refused {len(batch)} step(s): {exc}")
            self._drop_all(batch)
            return True
        except Exception as exc:  # noqa: BLE001 - a trainer's logging never raises into it
            self.failures += 1
            self._report(f"commit of {len(batch)} step(s) failed, kept and retried: {exc}")
            if self._closing and self._close_deadline is not None and time.monotonic() > self._close_deadline:
                with self._cond:
                    self._drop_all(batch)
                return True
            return False
        self.commits.append((len(batch), sum(p.rows for p in batch), time.perf_counter() - t))
        if self.after_commit is not None:  # the guards (alert only); their failure never undoes the commit
            try:
                self.after_commit([p.record() for p in batch])
            except Exception as exc:  # noqa: BLE001
                self._report(f"the guards over the committed step(s) failed: {exc}")
        self.cpu_s += time.thread_time() - c
        return True

    _close_deadline: float | None = None

    def _report(self, message: str) -> None:
        if self.on_error is not None:
            try:
                self.on_error(message)
            except Exception:  # noqa: BLE001
                pass

    def _drop_all(self, batch: list[_Pending]) -> None:
        self.dropped.extend(p.step for p in batch)
        self._report(f"gave up on {len(batch)} step(s) the store did not take: {[p.step for p in batch][:10]}")

    def submit(self, make: Callable[[], StepRecord], rows: int, step: int) -> None:
        """Hand a whole step (`make()` builds its record, on the writer's thread) to the writer; blocks while
        the queue is full (see the module docstring)."""
        if self._thread is None:
            raise RuntimeError("SdkWriter: submit after close")
        with self._cond:
            start = time.monotonic()
            while self._pending_rows + rows > self.max_queued_rows and self._pending:
                left = start + self.block_s - time.monotonic()
                if left <= 0:
                    old = self._pending.popleft()
                    self._since.popleft()
                    self._pending_rows -= old.rows
                    self._drop_all([old])
                    continue
                self._cond.wait(left)
            self._pending.append(_Pending(make, rows, step))
            self._since.append(time.monotonic())
            self._pending_rows += rows
            self._cond.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every step handed over is committed; False when `timeout_s` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while (self._pending or self._busy) and self._thread is not None and self._thread.is_alive():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout_s: float = 60.0) -> None:
        """Commit what was handed over (trying for up to `timeout_s` while the store fails, then giving
        the rest up, reported) and stop the thread."""
        if self._thread is None:
            return
        with self._cond:
            self._closing = True
            self._close_deadline = time.monotonic() + timeout_s
            self._cond.notify_all()
        self._thread.join()
        self._thread = None
