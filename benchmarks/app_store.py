"""The synthetic store `workbench bench app` times the dashboard on (two runs of N rollouts, built once
and reused), the prompt table timed alone, and the bench's result: the pages on the store and, with
`--s3`, on its copy in a bucket, side by side (the page timing is in benchmarks/app_bench.py)."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

BENCH_RUN = "bench-app"
BENCH_SHAPE = dict(prompts_per_step=128, rollouts_per_prompt=16, tokens=200)
"""Synthetic steps of 2,048 rollouts of 200 tokens (the store's SyntheticRun)."""


def ensure_bench_store(path: Path, rollouts: int, *, runs: int = 1, eval_every: int = 10, eval_prompts: int = 64,
                       eval_samples: int = 16) -> dict:
    """A store at `path` holding `runs` synthetic runs of `rollouts` rollouts each (rounded up to whole
    steps), named bench-app, bench-app-2, ... (seeds 0, 1, ...), with held-out evaluations every
    `eval_every` steps and a budget/allocator change half way; built with the store's `SyntheticRun` and
    writer, or reused where the store already holds them. Returns the first run's figures and `run_ids`."""
    from workbench.store import open_store

    shape_steps = -(-rollouts // (BENCH_SHAPE["prompts_per_step"] * BENCH_SHAPE["rollouts_per_prompt"]))
    infos = []
    with open_store(path) as store:
        for i in range(runs):
            name = BENCH_RUN if i == 0 else f"{BENCH_RUN}-{i + 1}"
            found = store.list_runs()
            done = [r for r in (found.to_dicts() if found.height else [])
                    if r["name"] == name and r.get("status") == "finished" and r["steps"] == shape_steps]
            if done:
                rid = done[0]["run_id"]
                infos.append({"run_id": rid, "steps": shape_steps, "reused": True,
                              "rollouts": store.count_rollouts(rid)})
            else:
                infos.append(_bench_run(store, name, i, rollouts, eval_every, eval_prompts, eval_samples))
    return {**infos[0], "run_ids": [x["run_id"] for x in infos]}


def _bench_run(store, name: str, seed: int, rollouts: int, eval_every: int, eval_prompts: int,
               eval_samples: int) -> dict:
    import numpy as np

    from workbench.store.synthetic import Shape, SyntheticRun

    shape = Shape(**BENCH_SHAPE)
    steps = -(-rollouts // shape.rollouts_per_step)
    cfg = {"name": name, "allocator": {"name": "uniform", "params": {}}, "synthetic": BENCH_SHAPE}
    run_id = store.create_run(name, cfg, seed=seed, status="running")
    gen = SyntheticRun(run_id, shape, seed=seed)
    rng = np.random.default_rng(1 + seed)
    hidden = rng.beta(0.8, 0.8, size=eval_prompts)
    store.add_prompts(run_id, [{"prompt_id": f"p{i:05d}", "split": "train", "level": 1,
                                "text": f"synthetic prompt {i}", "answer": "0", "metadata": {}}
                               for i in range(shape.prompt_pool)])
    for step in range(steps):
        rec = gen.step(step)
        if step >= steps // 2:  # a regime change for the curves' marks
            half = shape.rollouts_per_step // 2
            rec.metrics.update({"allocator": "multistage", "budget": half})
        if step % eval_every == 0 or step == steps - 1:
            lift = min(0.3, step / max(steps, 1) * 0.3)
            p = np.clip(hidden + lift, 0, 1)
            correct = rng.binomial(eval_samples, p)
            rec.evals = [{"prompt_id": f"e{i:03d}", "level": 1, "samples": eval_samples,
                          "correct": int(c), "greedy_correct": bool(c > eval_samples // 2),
                          "mean_length": 200.0} for i, c in enumerate(correct)]
        store.write_step(rec)
    store.set_run_status(run_id, "finished")
    return {"run_id": run_id, "steps": steps, "reused": False, "rollouts": store.count_rollouts(run_id)}


def time_prompt_table(store_path: Path | str, run_ids: list[str], *, repeats: int = 5) -> dict:
    """Median, p95 and worst wall milliseconds (and median CPU ms) of the prompt table of two runs:
    `workbench.analysis.compare_runs` at each run's end, on a store handle opened once, after one
    warm-up call (what the Compare prompts page computes before it draws)."""
    from workbench.analysis import compare_runs
    from benchmarks.app_bench import quantile
    from workbench.store import open_store

    with open_store(store_path, read_only=True) as store:
        rows = compare_runs(store, run_ids).frame.height
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            compare_runs(store, run_ids)
            times.append((time.perf_counter() - t0) * 1000.0)
            cpu.append((time.process_time() - c0) * 1000.0)
    return {"runs": len(run_ids), "prompts": rows, "median_ms": round(statistics.median(times), 1),
            "p95_ms": round(quantile(times, 0.95), 1), "max_ms": round(max(times), 1),
            "median_cpu_ms": round(statistics.median(cpu), 1)}


def _medians(pages: dict[str, dict], key: str) -> dict[str, float]:
    return {name: stats[key]["median"] for name, stats in pages.items()}


def bench_app_result(path: Path | str, info: dict, *, repeats: int, chosen: list[str] | None, s3: bool) -> dict:
    """The pages (and the prompt table) timed on the store at `path`; with `s3`, also on its copy in a
    bucket (`workbench store copy`), side by side (benchmarks/app_bench.py)."""
    from benchmarks.app_bench import copy_to_bucket, ratios, s3_server, time_pages as time_all

    load_start = round(os.getloadavg()[0], 1)
    if not s3:
        pages = time_all({"local": str(path)}, repeats=repeats, pages=chosen)["local"]
        return {"prompt_table": time_prompt_table(path, info["run_ids"], repeats=repeats), "pages": pages,
                **_old_fields(pages), "load_avg_1m_start": load_start}
    catalog = Path(f"{path}-s3-catalog") / "catalog.sqlite"
    with s3_server() as bucket:
        url = f"s3://{bucket}/bench-app-{info['rollouts']}-{int(time.time())}"
        copied = copy_to_bucket(Path(path), bucket, url.split("/", 3)[3], catalog)
        timed = time_all({"local": str(path), "s3": url}, repeats=repeats, pages=chosen, catalog=str(catalog))
        os.environ["WORKBENCH_CATALOG"], saved = str(catalog), os.environ.get("WORKBENCH_CATALOG")
        try:
            table_s3 = time_prompt_table(url, info["run_ids"], repeats=repeats)
        finally:
            if saved is None:
                os.environ.pop("WORKBENCH_CATALOG", None)
            else:
                os.environ["WORKBENCH_CATALOG"] = saved
    table = time_prompt_table(path, info["run_ids"], repeats=repeats)
    return {"prompt_table": table, "pages": timed["local"], **_old_fields(timed["local"]),
            "s3": {"store": url, "catalog": str(catalog), "copy": copied, "pages": timed["s3"],
                   **_old_fields(timed["s3"]), "prompt_table": table_s3},
            "s3_over_local": ratios(timed["local"], timed["s3"]), "load_avg_1m_start": load_start}


def _old_fields(pages: dict[str, dict]) -> dict[str, dict[str, float]]:
    """The medians under the names the bench has always printed."""
    return {"page_ms": _medians(pages, "cold"), "page_cpu_ms": _medians(pages, "cold_cpu"),
            "page_ms_cached": _medians(pages, "cached"), "page_cpu_ms_cached": _medians(pages, "cached_cpu")}
