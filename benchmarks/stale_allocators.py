"""`workbench bench async-allocators`: does adaptive allocation still pay when its statistics and the
policy that samples are eta versions stale? The simulator's answer, on a workload profile's measured
warm start.

An asynchronous run at staleness eta allocates step j's budget on the per-prompt statistics of the
steps up to j - 1 - eta, and its rollouts are sampled by the policy of that version. The allocation
simulator (`workbench.allocators.simulate`, `SimConfig.staleness`) models exactly these two lags
over the same synthetic learner it uses for its predictions elsewhere (docs/allocators.md, "The
simulator"): each prompt a pass rate that rises when an informative group of it is trained on.

For the profile, the population is drawn from the measured warm-start pass rates
(`docs/bench/profile-<profile>.json`: its histogram of correct answers in 16 samples per prompt),
with the simulator settings recorded there (prompts per step, group size, steps, the token budget).
Per eta and allocator, `seeds` runs; the saving is generated tokens to reach uniform's final mean
pass rate *at the same eta*, relative to uniform's, with its 90% bootstrap interval over seeds
(`benchmarks.intervals.bootstrap_saving`); `final_pass` is the mean true pass rate at the
end and `uniform_eta0_saving` compares with synchronous uniform (what asynchrony plus the allocator
gives together, in tokens).

This is a prediction. The real comparison is the allocator benchmark with the pipeline on:
`workbench bench allocators --profile skewed --set pipeline.max_staleness=1 ...` (docs/bench/async.md).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

BENCH = Path(__file__).resolve().parents[1] / "docs" / "bench"
ALLOCATORS = ("uniform", "value_tracker", "selective", "dynamic_sampling")


def profile_sim_config(profile: str) -> Any:
    """The simulator settings and warm-start population recorded for `profile`."""
    from workbench.allocators.simulate import SimConfig

    path = BENCH / f"profile-{profile}.json"
    if not path.is_file():
        raise WorkbenchError(f"bench async-allocators: no warm-start report for profile {profile!r} ({path.name}); "
                             f"`workbench allocators profile {profile}` writes it")
    report = json.loads(path.read_text())
    samples = int(report["samples_per_prompt"])
    rates = tuple(c / samples for c, count in enumerate(report["pass_rate_histogram"]) for _ in range(count))
    return SimConfig(**report["simulator"]["config"], initial_pass=rates)


def _curve(run: dict[str, Any]) -> list[dict[str, float]]:
    return [{"tokens": t, "pass1": p} for t, p in run["curve"]]


def bench_stale_allocators(*, profile: str = "skewed", allocators: tuple[str, ...] = ALLOCATORS,
                           etas: tuple[int, ...] = (0, 1, 2), seeds: int = 20,
                           steps: int | None = None) -> dict[str, Any]:
    """Per eta, each allocator's saving against uniform at that eta (see the module docstring)."""
    from workbench.allocators.registry import get_allocator
    from workbench.allocators.simulate import simulate_one
    from benchmarks.intervals import bootstrap_mean, bootstrap_saving

    for name in allocators:
        get_allocator(name)
    if seeds < 2:
        raise WorkbenchError(f"bench async-allocators: --seeds {seeds}: at least 2 (an interval needs them)")
    base = profile_sim_config(profile)
    if steps is not None:
        base = dataclasses.replace(base, steps=steps)
    names = ["uniform"] + [n for n in allocators if n != "uniform"]
    t0 = time.perf_counter()
    runs = {(eta, name): [simulate_one(name, None, dataclasses.replace(base, staleness=eta), seed)
                          for seed in range(seeds)]
            for eta in etas for name in names}
    out: dict[str, Any] = {"profile": profile, "seeds": seeds, "etas": list(etas),
                           "config": {k: v for k, v in vars(base).items() if k != "initial_pass"},
                           "warm_start_rates": len(base.initial_pass), "by_eta": {}}
    sync_uniform = [_curve(r) for r in runs[(0, "uniform")]] if 0 in etas else None
    for eta in etas:
        ref = [_curve(r) for r in runs[(eta, "uniform")]]
        rows = {}
        for name in names:
            mine = [_curve(r) for r in runs[(eta, name)]]
            finals = [r["pass_mean_end"] for r in runs[(eta, name)]]
            row = {"final_pass": sum(finals) / len(finals), "final_pass_ci90": bootstrap_mean(finals),
                   "zero_signal_frac": sum(r["zero_signal_frac"] for r in runs[(eta, name)]) / seeds}
            if name != "uniform":
                b = bootstrap_saving(ref, mine)
                row.update(saving=b["saving"], saving_ci90=b["saving_ci90"], saving_real=b["real"])
            if sync_uniform is not None:
                row["uniform_eta0_saving"] = bootstrap_saving(sync_uniform, mine)["saving"]
            rows[name] = row
        out["by_eta"][str(eta)] = rows
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out
