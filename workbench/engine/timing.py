"""Phase timing: `with timer("generate"): ...` adds the wall time to `timing_s/generate` (and, for the
phases in `CPU_PHASES`, the calling thread's CPU time to `timing_cpu_s/<phase>`: on a machine shared with
other jobs the CPU time measures the phase's own work where the wall time also counts the wait for a core.
It is the whole of that work at one torch thread (`model.threads = 1`, or OMP_NUM_THREADS=1); with more,
torch's other threads are not counted, nor are the store's (whose commit overlaps the next step)).

Lanes (`workbench.metrics.Lanes`): when each worker did what, for the Run page's per-worker lanes. A
phase timed on the pipeline's generator thread is the generator's, any other the trainer's (`worker_of`); the pipeline adds
its own spans (the generator's idle wait and weight installs, the trainer's wait for a batch). Per step,
worker and phase: `lane/<worker>/<phase>/start` and `.../end` (the first start and the last end, seconds
since the epoch, so lanes of steps line up in time) and `.../s` (the seconds inside it). Ray's rollout
workers report their own (`workbench/rollout/worker_lanes.py`)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

from workbench.metrics import Lanes  # noqa: F401 - also its old home: checkpoints pickled a batch's timer with it

CPU_PHASES = ("generate",)
GENERATOR_THREAD = "rollout-generator"
"""The name of the asynchronous pipeline's generator thread (`workbench/engine/pipeline.py`)."""


def worker_of(thread: threading.Thread | None = None) -> str:
    """The lane of work done on `thread` (default: this one): "generator" on the pipeline's generator
    thread, else "trainer"."""
    name = (thread or threading.current_thread()).name
    return "generator" if name == GENERATOR_THREAD else "trainer"


class PhaseTimer:
    """Accumulates wall time per phase for one step; `metrics()` gives `timing_s/<phase>` and
    `timing_cpu_s/<phase>` for the phases in `CPU_PHASES`, and each phase's lane (`Lanes`)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.lanes = Lanes()

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0, c0, w0 = time.perf_counter(), time.thread_time(), time.time()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - t0
            if phase in CPU_PHASES:
                self.cpu[phase] += time.thread_time() - c0
            self.lanes.add(worker_of(), phase, w0, time.time())

    def metrics(self) -> dict[str, float]:
        return {**{f"timing_s/{k}": v for k, v in self.totals.items()},
                **{f"timing_cpu_s/{k}": v for k, v in self.cpu.items()}, **self.lanes.metrics()}
