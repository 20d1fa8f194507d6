"""`workbench bench sdk`: what logging through the SDK costs a training step, measured side by side in one
process.

A plain PyTorch training step (forward and backward of an MLP over `rollouts` x `tokens` positions and an
optimizer step, sized by `--hidden` so that a step takes a realistic share of a second) runs in blocks
that alternate: a block of steps that also log the step's `rollouts` responses (token ids, per-token
entropy and log-probs, advantages, a reward term) and a block that does not. The first step of each
block is left out (it absorbs the tail of the previous block's background commit, or has none to
absorb), so a logging step is measured in the steady state: its own calls plus the writer committing
the previous steps beside it. The last step of a logging block flushes the writer, so every commit of a
block is paid inside it; `overhead_of_means` compares the mean step of the blocks (every step, the
flush included, after the first pair of blocks), the figure that a commit window cannot hide from. The rollouts are built before the clock starts (they are the trainer's
data, not the SDK's work).

Reported: median step seconds with and without logging, the overhead (ratio - 1), the process's CPU
seconds per step on each side (every thread: torch's, the writer's, DuckDB's), the median seconds of the
SDK calls on the trainer's thread, the writer thread's CPU seconds per step, and the commits.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _rollouts(rng: np.random.Generator, n: int, tokens: int, step: int) -> dict[str, Any]:
    lengths = np.clip(rng.normal(tokens, tokens / 4, n), 1, 4 * tokens).astype(np.int64)
    ids = rng.integers(0, 50_000, int(lengths.sum())).astype(np.int32)
    ent = rng.random(int(lengths.sum()), dtype=np.float32)
    cuts = np.cumsum(lengths)[:-1]
    group = 8
    prompts = [f"prompt {step}-{i // group}: what is {i // group} + {step}?" for i in range(n)]
    return {"prompts": prompts, "responses": [f"response {step}-{i} " * 20 for i in range(n)],
            "rewards": (rng.random(n) < 0.5).astype(np.float64), "token_ids": np.split(ids, cuts),
            "token_entropy": np.split(ent, cuts), "token_logprobs": np.split(-ent, cuts),
            "advantages": rng.standard_normal(n).astype(np.float32),
            "reward_terms": {"format": rng.integers(0, 2, n).astype(np.float64)}}


def bench_sdk(*, steps: int = 40, block: int = 5, rollouts: int = 512, tokens: int = 256, hidden: int = 1024,
              batch: int = 1024, store: str | None = None, seed: int = 0, device: str = "cpu",
              torch_threads: int | None = None, commit_window_s: float = 1.0) -> dict[str, Any]:
    """Run the side-by-side measurement (see the module docstring); returns the figures. `device` runs the
    training step on another torch device ("cuda"); `torch_threads` caps torch's CPU threads;
    `commit_window_s` is the SDK writer's commit window (`workbench.init(commit_window_s=...)`)."""
    import torch

    import workbench

    if torch_threads:
        torch.set_num_threads(int(torch_threads))
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, hidden, device=device)

    def train_step() -> float:
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    data = [_rollouts(rng, rollouts, tokens, s) for s in range(steps)]
    tmp = None
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-sdk-")
        store = str(Path(tmp.name) / "store")
    run = workbench.init(store=store, name="bench-sdk", config={"rollouts": rollouts, "tokens": tokens},
                         commit_window_s=commit_window_s)
    train_step()  # warm up the kernels and the allocator
    timed: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    calls: list[float] = []
    whole: dict[bool, list[float]] = {True: [], False: []}  # every step, the block's flush included
    cpu0 = run.writer_cpu_s
    logged = 0
    try:
        for s in range(steps):
            logging_on = (s // block) % 2 == 0
            t0, p0 = time.perf_counter(), time.process_time()
            loss = train_step()
            if logging_on:
                c0 = time.perf_counter()
                run.log_rollouts(s, **data[s])
                run.log_step(s, {"train/loss": loss})
                calls.append(time.perf_counter() - c0)
                logged += 1
                if (s + 1) % block == 0 or s == steps - 1:  # the block's commits land in the block
                    run.flush()
            dt = time.perf_counter() - t0
            if s >= 2 * block:  # the first pair of blocks warms up
                whole[logging_on].append(dt)
            if s % block:
                timed[logging_on].append(dt)
                cpu[logging_on].append(time.process_time() - p0)
        run.flush()
    finally:
        run.finish()
        if tmp is not None:
            tmp.cleanup()
    with_log, without = statistics.median(timed[True]), statistics.median(timed[False])
    commits = run.commits
    return {
        "device": device, "torch_threads": torch.get_num_threads(), "rollouts_per_step": rollouts, "tokens_per_rollout": tokens, "steps": steps, "block": block,
        "step_s_without_logging": round(without, 4), "step_s_with_logging": round(with_log, 4),
        "overhead": round(with_log / without - 1.0, 4),
        "step_s_mean_without_logging": round(statistics.fmean(whole[False]), 4) if whole[False] else None,
        "step_s_mean_with_logging": round(statistics.fmean(whole[True]), 4) if whole[True] else None,
        "overhead_of_means": (round(statistics.fmean(whole[True]) / statistics.fmean(whole[False]) - 1.0, 4)
                              if whole[True] and whole[False] else None),
        "commit_window_s": commit_window_s,
        "process_cpu_s_without_logging": round(statistics.median(cpu[False]), 4),
        "process_cpu_s_with_logging": round(statistics.median(cpu[True]), 4),
        "sdk_call_s_median": round(statistics.median(calls), 5) if calls else None,
        "writer_cpu_s_per_logged_step": round((run.writer_cpu_s - cpu0) / max(logged, 1), 4),
        "commits": len(commits), "steps_per_commit": round(sum(c[0] for c in commits) / max(len(commits), 1), 2),
        "commit_s_median": round(statistics.median(c[2] for c in commits), 4) if commits else None,
        "samples": {"with": len(timed[True]), "without": len(timed[False])},
        "problems": run.problems,
    }


def bench_export(rollouts: int = 1_000_000, *, kind: str = "sft", fmt: str = "jsonl", workdir: str | None = None,
                 batch_steps: int = 32, seed: int = 0, tokens: bool = True, keep_store: bool = False) -> dict[str, Any]:
    """Build a synthetic run of `rollouts` rollouts (`workbench.store.synthetic`: 512 per step, 200 tokens
    each, token ids and entropies), then run `workbench export` on it in a child process: its rollouts/s
    (the export's own clock, from the card), the child's CPU seconds (start-up included; rollouts per CPU
    second is the figure other work on the machine does not move) and peak RSS (the child's maximum
    resident set). With
    `workdir`, the store is built once as `workdir/export-store-<rollouts>` and reused by later runs
    (`keep_store`), so several kinds and formats are measured on one store."""
    from workbench.store import open_store
    from workbench.store.maintenance import compact
    from workbench.store.synthetic import Shape, SyntheticRun

    tmp = tempfile.TemporaryDirectory(prefix="bench-export-", dir=workdir)
    try:
        root = Path(tmp.name)
        store_dir = Path(workdir) / f"export-store-{rollouts}" if keep_store and workdir else root / "store"
        t0 = time.perf_counter()
        with open_store(store_dir, upkeep_every=0) as store:
            runs = store.runs_from("bench", "bench-export")
            if runs.height:  # built by an earlier run (keep_store)
                run_id = runs["run_id"][0]
            else:
                run_id = store.create_run("bench-export", {"bench": "export"}, seed, status="finished", source="bench")
                syn = SyntheticRun(run_id, Shape(), seed=seed)
                steps = -(-rollouts // Shape().rollouts_per_step)
                for start in range(0, steps, batch_steps):
                    store.write_steps([syn.step(s) for s in range(start, min(steps, start + batch_steps))])
                compact(store)
        return _export_child(run_id, root, store_dir, kind, fmt, tokens, rollouts, time.perf_counter() - t0)
    finally:
        tmp.cleanup()


def _export_child(run_id: str, root: Path, store_dir: Path, kind: str, fmt: str, tokens: bool, rollouts: int,
                  build_s: float) -> dict[str, Any]:
    """`workbench export` of the run in a child process; its figures and peak RSS."""
    import json
    import os
    import subprocess
    import sys

    t1 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "export", run_id, str(root / "out"), "--kind",
                                 kind, "--format", fmt, "--store", str(store_dir), "--json",
                                 *([] if tokens else ["--no-tokens"])], stdout=out, stderr=err)
        # the export child's own usage (RUSAGE_CHILDREN would also hold the store build's children)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t1
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"export failed: {stderr.strip()[-2000:]}")
    peak_kb, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    card = json.loads(stdout)
    seconds = sum(f["seconds"] for f in card["files"].values())
    selected = -(-rollouts // 512) * 512  # whole synthetic steps of 512
    return {"rollouts_selected": selected, "kind": kind, "format": fmt, "tokens": tokens,
            "rows_out": card["counts"]["rows"], "export_s": round(seconds, 2),
            "rollouts_per_s": round(selected / seconds, 1) if seconds else None,
            "child_wall_s": round(wall, 2), "child_cpu_s": round(cpu, 2),
            "rollouts_per_cpu_s": round(selected / cpu, 1) if cpu else None, "peak_rss_mb": round(peak_kb / 1024, 1),
            "bytes_out": sum(f["bytes"] for f in card["files"].values()), "store_build_s": round(build_s, 1)}
