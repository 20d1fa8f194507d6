"""The Playground's answer time on the real model (issue #43): 8 samples of 24 tokens from a SmolLM2-135M
checkpoint, through the dashboard's own sampling worker process (`workbench.playground.worker.Worker`, at
its niceness), over 10 requests with nothing else running ("idle") and again while a SmolLM2 run trains
beside it (launched as the dashboard launches runs: a detached process at the runs' priority), with that
run's steps per second during the requests against its steps per second without them, and the time to
load the checkpoint.

    nice workbench bench playground --store DIR --json

Steps: (1) a one-step SmolLM2 run (configs/smollm2.toml shrunk, `checkpoint.weights_every = 1`) gives the
checkpoint sampled, a weights-only snapshot at step 1 (reused when DIR already holds it); (2) the load time:
`load_policy` on it, in this process, at one thread; (3) a worker answers one warm-up request (it loads the
model: `first_request_s`), then `requests` timed ones (seeds 0, 1, ...); (4) the training run is launched
and its first two steps awaited (its model loaded), then `quiet_steps` of its steps are timed with no
request, then the same requests are timed again, then `quiet_steps` more steps with no request, and the run
is stopped. Latency is wall time from submit to the result, as the page waits for it. The run's pace is
read from when its steps were recorded (`steps.created_at`): a step's seconds are the time since the
previous step's record, counted "during" when the step overlaps the requests (on a loaded machine one step
may outlast all of them) and "without" when it lies wholly in a quiet window before or after them
(`step_pace`); each side's steps/s is one over its median step. Read the p95s against the 15 s
target, and `steps_per_s_ratio` (during / without, the same run and config) as the cost of sampling beside
a run; the load average at both ends says how shared the machine was.
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
BESIDE = ["steps=100000", "model.threads=1", "model.device=\"cpu\"", "eval.at_start=false", "eval.every=0",
          "checkpoint.every=0", "allocator.prompts_per_step=2", "allocator.budget=8", "allocator.params.n=4",
          "name=\"playground-beside\""]
"""The run that trains beside the requests: configs/smollm2.toml without evaluations or checkpoints and
shrunk to 2 prompts x 4 rollouts of 24 tokens a step (4 x 8 took ~150 s a step on the shared 2-core
machine: no step ended inside 10 requests), stopped when the last quiet window ends."""


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
    """When each of the run's steps was recorded (epoch seconds), in order."""
    from workbench.store import open_store

    with open_store(store, read_only=True) as st:
        steps = st.run_steps([run_id])
    return sorted(t.timestamp() for t in steps["created_at"].to_list() if t is not None) if steps.height else []


def step_pace(records: list[float], during: tuple[float, float],
              without: list[tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """The run's pace from its steps' record times (epoch seconds; a step lasts from the previous record to
    its own): "during" the steps that overlap the `during` window at all (a step longer than the window
    spans it), "without" the steps wholly inside one of the `without` windows; for each, how many, their
    median seconds and one over it (`steps_per_s`; None when there is no such step)."""
    records = sorted(records)
    steps = list(zip(records, records[1:]))
    chosen = {"during": [(a, b) for a, b in steps if a < during[1] and b > during[0]],
              "without": [(a, b) for a, b in steps if any(lo <= a and b <= hi for lo, hi in without)]}
    out: dict[str, dict[str, Any]] = {}
    for name, picked in chosen.items():
        median = statistics.median(b - a for a, b in picked) if picked else None
        out[name] = {"steps": len(picked), "median_step_s": None if median is None else round(median, 2),
                     "steps_per_s": None if not median else round(1.0 / median, 4)}
    return out


def _await_steps(store: Path, run_id: str, n: int, timeout_s: float) -> list[float]:
    """Wait until the run has recorded `n` steps; their record times."""
    deadline = time.time() + timeout_s
    while len(got := _step_times(store, run_id)) < n:
        if time.time() > deadline:
            raise TimeoutError(f"bench playground: the run beside made {len(got)} of {n} steps in {timeout_s:.0f} s")
        time.sleep(0.5)
    return got


def _beside(store: Path, worker: Any, base: Any, requests: int, quiet_steps: int, timeout_s: float,
            run_id: str) -> dict[str, Any]:
    """The requests timed while `run_id` trains, between two quiet windows of `quiet_steps` steps each."""
    commits = _await_steps(store, run_id, 2, timeout_s)  # its model loaded, two steps behind it
    quiet_a = (commits[-1], _await_steps(store, run_id, len(commits) + quiet_steps, timeout_s)[-1])
    start, load_start = time.time(), os.getloadavg()[0]
    times = _timed_requests(worker, base, range(requests), timeout_s)
    end, load_end = time.time(), os.getloadavg()[0]
    after = len(_step_times(store, run_id))
    commits = _await_steps(store, run_id, after + quiet_steps + 1, timeout_s)
    quiet_b = (min(t for t in commits if t >= end), commits[-1])
    pace = step_pace(commits, (start, end), [quiet_a, quiet_b])
    during, without = pace["during"], pace["without"]
    ratio = (round(during["steps_per_s"] / without["steps_per_s"], 3)
             if during["steps_per_s"] and without["steps_per_s"] else None)
    return {**_summary(times), "run_id": run_id, "requests_s": round(end - start, 1),
            "load_avg_1m_requests": [round(load_start, 1), round(load_end, 1)],
            "run_pace": {"during_requests": during, "without_requests": without, "steps_per_s_ratio": ratio}}


def bench_playground(store: Path | str, *, requests: int = 10, samples: int = 8, tokens: int = 24,
                     beside: bool = True, quiet_steps: int = 4, timeout_s: float = 600.0) -> dict[str, Any]:
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
            result["beside_run"] = _beside(store, worker, base, requests, quiet_steps, timeout_s, beside_id)
    finally:
        worker.close()
        if beside_id is not None:
            with open_store(store) as st:
                api.stop(st, beside_id)
    result.update({"load_avg_1m_start": load_start, "load_avg_1m_end": round(os.getloadavg()[0], 1),
                   "cpus": os.cpu_count()})
    return result
