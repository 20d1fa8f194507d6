"""What each Ray rollout worker did, on the trainer's clock: the `lane/ray-<i>/<phase>/...` step metrics
of the Run page's per-worker lanes (`workbench.metrics.Lanes`; the trainer's own are timed in
workbench/engine/timing.py).

A worker times its own work (`workbench/rollout/ray_worker.py`: each call answers with its spans,
`generate` and `weight_sync`, in its own `time.time()` seconds, and when the call began and ended
there). The driver places them here:

1. Windows: each call the driver makes to the workers (a stage's generation, a weight shipment) is one
   window on the driver's clock, from just before the first submission to just after the last answer.
   Every worker is in every window, with rows or without.
2. Clock offset: a call submitted at `sent` and answered at `got` (driver's clock) began at `t_in` and
   ended at `t_out` on the worker's, so the offset (driver minus worker) lies in
   [`sent - t_in`, `got - t_out`]. The bounds of a worker's calls are intersected (the tightest bound
   holds while the clocks tick at one rate) and the midpoint is used, so every span lands inside its own
   call and the worker's generation inside the step's generate phase, whether the worker's node keeps
   another time or not. A worker whose pid changed (restarted by Ray, perhaps on another node), or
   whose new bounds no longer meet the old (a clock stepped), starts afresh from this call's bounds.
   On one machine the offset is ~0 and its uncertainty is the call's round trip.
3. Restarts: a call whose worker died is a `restart` span from its submission until the call made
   again is submitted; a worker answering with a new pid adds a `restart` span from the submission
   until its first span began (Ray brought it back while the call waited).
4. Idle: inside a window, the worker's time outside its spans (waiting for its share, for the other
   workers, or with no rows this stage). So per worker and window, generate + weight_sync + restart +
   idle = the window's seconds.

Recorded per step with the rest of the Ray backend's figures (`RayBackend.take_metrics`; behind the
pipeline's generator, with its batches). Wall-clock figures: run comparisons leave `lane/` out.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from workbench.metrics import Lanes


class WorkerLanes:
    """The Ray workers' lanes (see the module docstring): `open` a window, `place` each answer, note a
    `restart`, `close` the window; `metrics()` gives the `lane/...` figures since the last call. Driven
    from one thread at a time (the trainer's, or the pipeline's generator thread while the workers are
    lent to it)."""

    def __init__(self) -> None:
        self._lanes = Lanes()
        self._clock: dict[str, tuple[int, float, float]] = {}
        """worker -> (pid, low, high): the bounds of its clock's offset from the driver's."""
        self._busy: dict[str, list[tuple[str, float, float]]] = {}
        self._opened: float | None = None

    def open(self, names: Sequence[str]) -> None:
        """A window starts (driver's clock: now) for the workers `names`."""
        self._opened = time.time()
        self._busy = {name: [] for name in names}

    def offset(self, name: str) -> float | None:
        """The offset (driver's clock minus worker `name`'s) in use; None before its first answer."""
        got = self._clock.get(name)
        return None if got is None else (got[1] + got[2]) / 2

    def place(self, name: str, answer: dict[str, Any], sent: float, got: float) -> list[tuple[str, float, float]]:
        """Put a call's `answer` (its `spans`, `clock`, `pid`), submitted at `sent` and answered at `got`
        (driver's clock), in the open window on the driver's clock; the spans as placed."""
        t_in, t_out = answer["clock"]
        low, high = sent - t_in, got - t_out
        known = self._clock.get(name)
        if known is not None and known[0] == answer["pid"] and max(known[1], low) <= min(known[2], high):
            low, high = max(known[1], low), min(known[2], high)
        self._clock[name] = (answer["pid"], low, high)
        shift = (low + high) / 2
        spans = [(phase, start + shift, end + shift) for phase, start, end in answer["spans"]]
        if known is not None and known[0] != answer["pid"] and spans:  # Ray brought it back meanwhile
            self.restart(name, sent, min(start for _, start, _ in spans))
        self._busy.setdefault(name, []).extend(spans)
        return spans

    def restart(self, name: str, start: float, end: float) -> None:
        """Worker `name` was down (dead, or coming back) from `start` to `end` (driver's clock)."""
        if end > start:
            self._busy.setdefault(name, []).append(("restart", start, end))

    def close(self) -> None:
        """The window ends now: each worker's spans and the idle time between them go to its lanes."""
        if self._opened is None:
            return
        closed = time.time()
        for name, spans in self._busy.items():
            at = self._opened
            for phase, start, end in sorted(spans, key=lambda s: s[1]):
                start, end = max(start, at), min(max(end, start), closed)
                if start > at:
                    self._lanes.add(name, "idle", at, start)
                if end > start:
                    self._lanes.add(name, phase, start, end)
                at = max(at, end)
            if closed > at:
                self._lanes.add(name, "idle", at, closed)
        self._opened, self._busy = None, {}

    def metrics(self) -> dict[str, float]:
        """`lane/<worker>/<phase>/{start,end,s}` since the last call (and starts afresh)."""
        return self._lanes.metrics()
