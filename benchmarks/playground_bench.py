"""The Playground's answer time on the real model (issue #43): 8 samples of 24 tokens from a SmolLM2-135M
checkpoint, through the dashboard's own sampling worker process (`workbench.playground.worker.Worker`, at
its niceness), over 10 requests with nothing else running ("idle") and again while a SmolLM2 run trains
beside it (launched as the dashboard launches runs: a detached process at the runs' priority), with that
run's steps per second during the requests and before them, and the time to load the checkpoint.

    nice workbench bench playground --store DIR --json

Steps: (1) a one-step SmolLM2 run (configs/smollm2.toml shrunk, `checkpoint.weights_every = 1`) gives the
checkpoint sampled, a weights-only snapshot at step 1 (reused when DIR already holds it); (2) the load time:
`load_policy` on it, in this process, at one thread; (3) a worker answers one warm-up request (it loads the
model: `first_request_s`), then `requests` timed ones (seeds 0, 1, ...); (4) the training run is launched,
its first step awaited, then the same requests are timed again, and the run stopped. Latency is wall time
from submit to the result, as the page waits for it. Read the p95s against the 15 s target, and the run's
steps/s during the requests against its steps/s before them (the cost of sampling beside it).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

TRAINED = ["steps=1", "allocator.prompts_per_step=2", "allocator.budget=4", "allocator.params.n=2",
           "sampling.max_new_tokens=8", "eval.at_start=false", "eval.every=0", "model.threads=1",
           "model.device=\"cpu\"", "checkpoint.weights_every=1", "name=\"playground-checkpoint\""]
"""The run whose step-1 snapshot is sampled (two prompts x two rollouts: it only has to exist)."""
BESIDE = ["steps=1000", "model.threads=1", "model.device=\"cpu\"", "eval.at_start=false", "eval.every=0",
          "checkpoint.every=0", "name=\"playground-beside\""]
"""The run that trains beside the requests: configs/smollm2.toml (4 prompts x 8 rollouts of 24 tokens a
step) without evaluations or checkpoints, stopped when the requests end."""


def _quantile(values: list[float], q: float) -> float:
    from benchmarks.app_bench import quantile

    return quantile(values, q)


def _summary(times: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(times), 2), "p95_s": round(_quantile(times, 0.95), 2),
            "max_s": round(max(times), 2), "n": len(times)}


def _checkpoint_run(store: Path) -> str:
    """The id of the finished one-step run whose step-1 snapshot is sampled (made when missing)."""
    from workbench.engine import run
    from workbench.models.sources import smollm2_config
    from workbench.playground.sample import available_steps
    from workbench.store import open_store

    with open_store(store) as st:
        runs = st.list_runs()
    for row in runs.to_dicts() if runs.height else []:
        if row["name"] == "playground-checkpoint" and row["status"] == "finished" \
                and 1 in available_steps(store, row["run_id"]):
            return row["run_id"]
    return run(smollm2_config(TRAINED), store=str(store))


def _timed_requests(worker: Any, base: Any, seeds: range, timeout_s: float) -> list[float]:
    import dataclasses

    from workbench.errors import WorkbenchError

    out = []
    for seed in seeds:
        t0 = time.perf_counter()
        rid = worker.submit(dataclasses.replace(base, seed=seed))
        while True:
            state = worker.status(rid)
            if state.get("state") == "done":
                break
            if state.get("state") in ("failed", "cancelled") or time.perf_counter() - t0 > timeout_s:
                raise WorkbenchError(f"bench playground: request {seed} {state.get('state')}: {state.get('error')}")
            time.sleep(0.02)
        out.append(time.perf_counter() - t0)
    return out


def _step_times(store: Path, run_id: str) -> list[float]:
    """When each of the run's steps was committed (epoch seconds), in order."""
    from workbench.store import open_store

    with open_store(store, read_only=True) as st:
        steps = st.run_steps([run_id])
    return sorted(t.timestamp() for t in steps["created_at"].to_list() if t is not None) if steps.height else []


def bench_playground(store: Path | str, *, requests: int = 10, samples: int = 8, tokens: int = 24,
                     beside: bool = True, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run the bench (see the module docstring); one JSON-able dict."""
    from benchmarks.tiny import shared_smollm2
    from workbench.control import api
    from workbench.control.launch import launch
    from workbench.models.sources import smollm2_config
    from workbench.playground.sample import SampleRequest, load_policy, run_config
    from workbench.playground.worker import Worker
    from workbench.store import open_store

    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    if not (store / "models").exists():  # the converted SmolLM2, shared with the tests (converted once)
        (store / "models").symlink_to(shared_smollm2().parent)
    load_start = round(os.getloadavg()[0], 1)
    run_id = _checkpoint_run(store)
    with open_store(store) as st:
        row = st.run(run_id)
        prompt_id = st.prompts(run_id).filter(st.prompts(run_id)["split"] == "train")["prompt_id"][0]
    t0 = time.perf_counter()
    load_policy(store, run_id, run_config(row), 1, threads=1)
    load_s = time.perf_counter() - t0
    base = SampleRequest(run_id, checkpoint=1, prompt_id=prompt_id, n=samples, max_new_tokens=tokens)
    worker = Worker(store)
    result: dict[str, Any] = {"run_id": run_id, "checkpoint": 1, "samples": samples, "tokens": tokens,
                              "checkpoint_load_s": round(load_s, 2)}
    beside_id = None
    try:
        t0 = time.perf_counter()
        _timed_requests(worker, base, range(1000, 1001), timeout_s)
        result["first_request_s"] = round(time.perf_counter() - t0, 2)
        result["idle"] = _summary(_timed_requests(worker, base, range(requests), timeout_s))
        if beside:
            beside_id = launch(smollm2_config(BESIDE).to_dict(), store=store)
            deadline = time.time() + timeout_s
            while len(_step_times(store, beside_id)) < 2:  # its model loaded and two steps behind it
                if time.time() > deadline:
                    raise TimeoutError(f"bench playground: the run beside made no two steps in {timeout_s:.0f} s")
                time.sleep(1.0)
            before = _step_times(store, beside_id)
            start = time.time()
            times = _timed_requests(worker, base, range(requests), timeout_s)
            end = time.time()
            during = [t for t in _step_times(store, beside_id) if start <= t <= end]
            result["beside_run"] = _summary(times)
            result["beside_run"].update({
                "run_id": beside_id,
                "run_steps_during": len(during), "requests_s": round(end - start, 1),
                "run_steps_per_s_during": round(len(during) / (end - start), 4),
                "run_steps_per_s_before": round((len(before) - 1) / max(before[-1] - before[0], 1e-9), 4)})
    finally:
        worker.close()
        if beside_id is not None:
            with open_store(store) as st:
                api.stop(st, beside_id)
    result.update({"load_avg_1m_start": load_start, "load_avg_1m_end": round(os.getloadavg()[0], 1),
                   "cpus": os.cpu_count()})
    return result
