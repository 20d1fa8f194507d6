"""`workbench bench episodes-learning`: does RL teach the organism to use its tool? The tools task
(`configs/organism-tools.toml`) trained with the calculator (episodes) and without it (the same model,
the same task, single-turn rollouts: a `<calc>` it writes is only text, and it must guess the result),
at the same model-token budget per step, over several seeds.

    workbench bench episodes-learning --json                     # 3 seeds x 2 arms, 60 steps each
    workbench bench episodes-learning --seeds 0,1,2,3,4 --steps 80 --json

Reported: per arm and seed, held-out pass@1 at step 0 and at the end (the run's own evaluation, all
held-out prompts x `eval.samples`), its rise, the model tokens spent, and per step the tool-call rate and
tool error rate (the tool arm); across seeds, the mean rise with its 90% t-interval, and the end-of-run
difference (tool - no tool) with its 90% t-interval (a paired difference: arm runs share their seed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "organism-tools.toml"

T90 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}
"""Student's t at 0.95 (a two-sided 90% interval) by degrees of freedom; 1.645 past 9."""


def t_interval(values: list[float]) -> list[float] | None:
    """The 90% t-interval of the mean of `values` (None for fewer than 2)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    half = T90.get(len(x) - 1, 1.645) * x.std(ddof=1) / np.sqrt(len(x))
    return [round(float(x.mean() - half), 4), round(float(x.mean() + half), 4)]


def arm_overrides(arm: str, steps: int, budget: int) -> dict[str, Any]:
    """The run config of one arm: the tools config, a model-token budget per step, and (no tool) the
    single-turn shape."""
    over: dict[str, Any] = {"steps": steps, "allocator.budget_kind": "tokens", "allocator.budget": budget,
                            "allocator.prompts_per_step": 64, "eval.every": steps, "eval.at_start": True,
                            "checkpoint.every": 0}
    if arm == "no_tool":  # a rollout as long as an episode's model tokens: room to write a call and guess
        over.update({"rollout.shape": "independent", "sampling.max_new_tokens": 40})
    return over


def _one(arm: str, seed: int, store_dir: str, steps: int, budget: int, threads: int,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run of `arm` (tool | no_tool) at `seed`; its figures. `extra`: more overrides (dotted keys)."""
    from workbench.control.launch import resolve_config
    from workbench.engine import run
    from workbench.store import open_store

    over = {**arm_overrides(arm, steps, budget), "seed": seed, "model.threads": threads, **(extra or {})}
    cfg = resolve_config(str(CONFIG), over, name=f"tools-{arm}-s{seed}")
    t = time.perf_counter()
    rid = run(cfg, store=store_dir)
    wall = time.perf_counter() - t
    with open_store(store_dir) as st:
        rows = st.run_steps(rid).sort("step").to_dicts()
        evals = st.evals(rid)
    start, end = held_out_pass1(evals)
    out = {"run_id": rid, "seconds": round(wall, 1), "pass1_start": round(start, 4), "pass1_end": round(end, 4),
           "rise": round(end - start, 4),
           "model_tokens": int(sum(r["metrics"].get("rollout/tokens_generated", 0) for r in rows)),
           "rollouts": int(sum(r["metrics"].get("rollout/count", 0) for r in rows))}
    if arm == "tool":
        out["call_rate"] = [round(r["metrics"].get("episodes/call_rate", 0.0), 4) for r in rows if r["step"] > 0]
        out["tool_error_rate"] = [round(r["metrics"].get("episodes/tool_error_rate", 0.0), 4)
                                  for r in rows if r["step"] > 0]
        out["entropy_after_tool_delta"] = [round(r["metrics"]["episodes/entropy_after_tool_delta"], 4)
                                           for r in rows if "episodes/entropy_after_tool_delta" in r["metrics"]]
    return out


def held_out_pass1(evals: Any) -> tuple[float, float]:
    """Held-out pass@1 at a run's first and last evaluation (its `evals` rows)."""
    import polars as pl

    by_step = evals.group_by("step").agg((pl.col("correct").sum() / pl.col("samples").sum()).alias("p")).sort("step")
    return float(by_step["p"][0]), float(by_step["p"][-1])


def bench_episodes_learning(store_dir: str, *, seeds: tuple[int, ...] = (0, 1, 2), steps: int = 60,
                            budget: int = 2560, no_tool_budget: int | None = None,
                            threads: int = 1, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both arms for every seed (module docstring); one JSON-able dict. `no_tool_budget` (default:
    `budget`) gives the arm without the tool another model-token budget: its answers are shorter and the
    allocator's estimate of a rollout's tokens starts at `sampling.max_new_tokens`, so at the same budget
    it spends fewer tokens (the JSON's `model_tokens_ratio_tool_to_no_tool`); a larger one shows the
    difference is not for want of tokens."""
    runs: dict[str, dict[int, dict[str, Any]]] = {"tool": {}, "no_tool": {}}
    for seed in seeds:
        for arm in runs:
            b = budget if arm == "tool" else (no_tool_budget or budget)
            runs[arm][seed] = _one(arm, seed, store_dir, steps, b, threads, extra)
    tool, none = runs["tool"], runs["no_tool"]
    diff = [tool[s]["pass1_end"] - none[s]["pass1_end"] for s in seeds]
    summary = {
        "tool_rise_mean": round(float(np.mean([tool[s]["rise"] for s in seeds])), 4),
        "tool_rise_ci90": t_interval([tool[s]["rise"] for s in seeds]),
        "no_tool_rise_mean": round(float(np.mean([none[s]["rise"] for s in seeds])), 4),
        "end_diff_mean": round(float(np.mean(diff)), 4), "end_diff_ci90": t_interval(diff),
        "model_tokens_ratio_tool_to_no_tool": round(sum(tool[s]["model_tokens"] for s in seeds) /
                                                    max(1, sum(none[s]["model_tokens"] for s in seeds)), 4),
    }
    summary["rise_at_least_20pt"] = all(tool[s]["rise"] >= 0.2 for s in seeds)
    ci = summary["end_diff_ci90"]
    summary["end_diff_excludes_0"] = bool(ci is not None and ci[0] > 0)
    return {"config": "configs/organism-tools.toml", "seeds": list(seeds), "steps": steps,
            "budget_model_tokens_per_step": budget, "no_tool_budget_per_step": no_tool_budget or budget, "load": list(os.getloadavg()), "summary": summary,
            "tool": {str(s): v for s, v in tool.items()}, "no_tool": {str(s): v for s, v in none.items()}}
