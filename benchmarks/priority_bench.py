"""`workbench bench priority`: what the workbench's defaults for the runs it starts
(`workbench.control.priority`) do to a training loop and to the processes beside it.

The loop: a small two-layer network trained with torch on `threads` intra-op threads (the shape of
the organism's update: many short parallel regions, where OpenMP's waiting policy matters), a fixed
number of iterations, in a subprocess. It runs

- alone and beside `busy` single-threaded busy processes (a dashboard, a notebook, another job),
- with `OMP_WAIT_POLICY=ACTIVE` (spinning waiters; what libgomp does by default for a while) and
  `PASSIVE` (sleeping waiters; the workbench's default),
- at niceness 0 and at the detached runs' niceness (10), beside the busy processes: what the run
  gives up, and how much CPU the busy processes get (their work done per second, the dashboard's
  stand-in).

Every configuration runs `repeats` times, interleaved; the figures are medians of wall seconds (and
the busy processes' loops per second). On an idle machine niceness changes nothing (the scheduler
weighs it only between processes that compete for a core).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

LOOP = """
import os, time, torch
torch.set_num_threads({threads})
torch.manual_seed(0)
x = torch.randn(256, 128); y = torch.randn(256, 1)
net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
t0, c0 = time.perf_counter(), time.process_time()
for _ in range({iters}):
    opt.zero_grad(); loss = ((net(x) - y) ** 2).mean(); loss.backward(); opt.step()
print(time.perf_counter() - t0, time.process_time() - c0)
"""

BUSY = """
import sys, time
n, end = 0, time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    n += 1
print(n)
"""


def _loop(threads: int, iters: int, policy: str, nice: int) -> tuple[float, float]:
    env = {**os.environ, "OMP_WAIT_POLICY": policy}
    pre = (lambda: os.nice(nice)) if nice else None  # noqa: E731 - a fresh single-threaded child
    out = subprocess.run([sys.executable, "-c", LOOP.format(threads=threads, iters=iters)], env=env,
                         capture_output=True, text=True, check=True, preexec_fn=pre)
    wall, cpu = (float(v) for v in out.stdout.split())
    return wall, cpu


def bench_priority(*, threads: int = 2, iters: int = 300, busy: int = 1, repeats: int = 3) -> dict[str, Any]:
    """The figures described in the module docstring."""
    import psutil

    configs = [(b, policy, nice) for b in (0, busy) for policy in ("ACTIVE", "PASSIVE")
               for nice in ((0, 10) if b else (0,))]
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    busy_share: dict[str, list[float]] = {}
    for _ in range(repeats):
        for b, policy, nice in configs:
            key = f"busy{b}_{policy.lower()}_nice{nice}"
            procs = [psutil.Popen([sys.executable, "-c", BUSY, "600"], stdout=subprocess.DEVNULL) for _ in range(b)]
            try:
                c0 = [p.cpu_times() for p in procs]
                t0 = time.monotonic()
                wall, cpu = _loop(threads, iters, policy, nice)
                spent = time.monotonic() - t0
                share = [(sum(p.cpu_times()[:2]) - sum(c[:2])) / spent for p, c in zip(procs, c0)]
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            walls.setdefault(key, []).append(wall)
            cpus.setdefault(key, []).append(cpu)
            if share:
                busy_share.setdefault(key, []).append(statistics.mean(share))
    med = {k: round(statistics.median(v), 3) for k, v in walls.items()}
    return {
        "loop_wall_s": med,
        "loop_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpus.items()},
        "busy_cpu_share": {k: round(statistics.median(v), 3) for k, v in busy_share.items()},
        "passive_vs_active_alone": round(med["busy0_passive_nice0"] / med["busy0_active_nice0"], 3),
        "passive_vs_active_beside_busy": round(med[f"busy{busy}_passive_nice0"] / med[f"busy{busy}_active_nice0"], 3),
        "nice10_vs_nice0_beside_busy": round(med[f"busy{busy}_passive_nice10"] / med[f"busy{busy}_passive_nice0"], 3),
        "threads": threads, "iters": iters, "busy": busy, "repeats": repeats, "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


if __name__ == "__main__":
    print(json.dumps(bench_priority(), indent=2))
