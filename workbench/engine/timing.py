"""Phase timing: `with timer("generate"): ...` adds the wall time to `timing_s/generate`."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class PhaseTimer:
    """Accumulates wall time per phase for one step; `metrics()` gives `timing_s/<phase>`."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"timing_s/{k}": v for k, v in self.totals.items()}
