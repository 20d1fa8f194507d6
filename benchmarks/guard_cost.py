"""What the default guards cost per training step (`workbench bench guard-cost`): the watch over one
step's metrics and rollouts, timed on synthetic steps shaped like the organism's (responses of a few
tokens) and like a real model's (hundreds of tokens), beside the plain per-rollout loop they replaced
(a Python dict and a Counter of n-grams per response, each predicate evaluated row by row).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa

from workbench.guards.config import guard_set
from workbench.guards.evaluate import Context, evaluate, holds
from workbench.guards.rules import rollout_predicates
from workbench.guards.watch import Watch, repeat_frac, rollout_rows

SHAPES = {"organism": 3, "long": 400}
"""Generated tokens per response: the default organism's answers, and a real model's reasoning."""
CHARS_PER_TOKEN = 4
"""Characters per token of the long responses (a BPE tokenizer on English text)."""


def _step_table(rng: np.random.Generator, step: int, n: int, tokens: int) -> pa.Table:
    words = np.array(["the", "answer", "is", "so", "we", "add", "then", "+", "=", "12", "7", "carry"])
    chars = max(1, tokens * CHARS_PER_TOKEN) if tokens > 3 else tokens
    texts = []
    for i in range(n):
        if tokens <= 3:
            texts.append(str(int(rng.integers(0, 10 ** tokens))))
        else:
            text = " ".join(rng.choice(words, size=chars // 3))[:chars]
            texts.append(text if i % 16 else text[: chars // 2] + "!" * (chars - chars // 2))  # a few loop
    return pa.table({
        "step": pa.array([step] * n, pa.int32()), "stage": pa.array([0] * n, pa.int32()),
        "prompt_id": [f"p{i // 8}" for i in range(n)], "idx": pa.array([i % 8 for i in range(n)], pa.int32()),
        "response": texts, "length": pa.array([tokens] * n, pa.int32()),
        "reward": pa.array(rng.integers(0, 2, n).astype(np.float32)),
        "finish_reason": ["length" if i % 7 == 0 else "stop" for i in range(n)],
        "entropy_mean": pa.array(rng.uniform(0.2, 1.0, n).astype(np.float32)),
        "token_ids": pa.array([list(range(tokens))] * n, pa.list_(pa.int32())),  # what the engine's table holds too
    })


def _metrics(step: int) -> dict[str, float]:
    return {"train/loss": 0.1, "train/grad_norm": 1.0, "train/ratio_max": 1.2, "rollout/entropy_mean": 0.6,
            "rollout/length_mean": 8.0, "rollout/reward_mean": 0.4 + 0.001 * step, "rollout/zero_signal_frac": 0.3}


def _plain(table: pa.Table, guards: dict[str, Any], step: int) -> int:
    """The replaced path: a dict and a whole-response Counter per rollout, each predicate row by row."""
    rows = []
    for r in table.select(["response", "length", "reward", "finish_reason", "entropy_mean"]).to_pylist():
        text = r["response"] or ""
        rows.append(dict(length=float(r["length"] or 0), reward=r["reward"], truncated=float(r["finish_reason"] == "length"),
                         repeat_frac=repeat_frac(text, window=0), entropy_mean=r["entropy_mean"], chars=float(len(text))))
    ctx = Context({}, {})
    hits = 0
    for g in guards.values():
        for p in rollout_predicates(g.tree):
            hits += sum(1 for row in rows if holds(evaluate(p, ctx, row)))
    return hits


def guard_cost(*, rollouts_per_step: int = 512, steps: int = 12, seed: int = 0, plain_steps: int = 3) -> dict[str, Any]:
    """Median CPU seconds per step of the default guards (the columns' path the engine and the importer
    run) for each response shape, per rollout, and the plain loop's on the same steps (CPU time, not
    wall: a figure that holds on a shared machine)."""
    rng = np.random.default_rng(seed)
    guards = guard_set(())
    out: dict[str, Any] = {"rollouts_per_step": rollouts_per_step, "steps": steps, "guards": sorted(guards),
                           "load_avg_1m": round(os.getloadavg()[0], 1), "cores": os.cpu_count()}
    for shape, tokens in SHAPES.items():
        tables = [_step_table(rng, s, rollouts_per_step, tokens) for s in range(1, steps + 1)]
        watch = Watch(guards)
        times = []
        for s, table in enumerate(tables, start=1):
            t0 = time.process_time()
            watch.step(s, _metrics(s), rollout_rows(table, s))
            times.append(time.process_time() - t0)
        plain = []
        for s, table in enumerate(tables[:plain_steps], start=1):
            t0 = time.process_time()
            _plain(table, guards, s)
            plain.append(time.process_time() - t0)
        med, med_plain = statistics.median(times), statistics.median(plain)
        out[shape] = {"tokens_per_response": tokens, "chars_per_response": len(tables[0].column("response")[0].as_py()),
                      "cpu_ms_per_step": round(1000 * med, 2),
                      "cpu_us_per_rollout": round(1e6 * med / rollouts_per_step, 2),
                      "plain_cpu_ms_per_step": round(1000 * med_plain, 2), "speedup": round(med_plain / max(med, 1e-12), 1)}
    return out
