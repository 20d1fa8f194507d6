"""Phase timing: `with timer("generate"): ...` adds the wall time to `timing_s/generate` (and, for the
phases in `CPU_PHASES`, the calling thread's CPU time to `timing_cpu_s/<phase>`: on a machine shared with
other jobs the CPU time measures the phase's own work where the wall time also counts the wait for a core.
It is the whole of that work at one torch thread (`model.threads = 1`, or OMP_NUM_THREADS=1); with more,
torch's other threads are not counted, nor are the store's (whose commit overlaps the next step))."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


CPU_PHASES = ("generate",)


class PhaseTimer:
    """Accumulates wall time per phase for one step; `metrics()` gives `timing_s/<phase>` and
    `timing_cpu_s/<phase>` for the phases in `CPU_PHASES`."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - t0
            if phase in CPU_PHASES:
                self.cpu[phase] += time.thread_time() - c0

    def metrics(self) -> dict[str, float]:
        return {**{f"timing_s/{k}": v for k, v in self.totals.items()},
                **{f"timing_cpu_s/{k}": v for k, v in self.cpu.items()}}
