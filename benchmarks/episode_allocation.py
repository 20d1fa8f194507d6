"""`workbench bench episode-allocation`: allocation inside episodes (issue #41) against uniform episodes, on the
organism's tool task (`configs/organism-tools.toml`) at the same model-token budget per step, over seeds.

    workbench bench episode-allocation --json                     # 3 seeds x 3 arms, 40 steps each
    workbench bench episode-allocation --seeds 0,1,2,3,4 --steps 60 --json

Arms: "uniform" (whole episodes), "roc" (GRPO-RoC, `rollout.episodes.roc_oversample = 2`: a grant is priced at
twice its tokens, so it keeps half the grants of uniform at the same budget), "arpo" (ARPO branching,
`rollout.episodes.arpo_branch = true`, the code's constants), "arpo_hard" (the same with
`rollout.episodes.arpo_advantage = "hard"`; not run unless asked with --arms), "aepo" (AEPO: `aepo_branch` with
its probe split and penalised rule, `algorithm.loss = "aepo_clip"`, `algorithm.entropy_advantage = 0.2`). Uniform
always runs (every difference is paired with it by seed). Reported:
- per arm and seed: held-out pass@1 at step 0 and at the end (the run's evaluation: every held-out prompt x
  `eval.samples`), model tokens and episodes; across seeds the end pass@1 minus uniform's (paired by seed)
  with its 90% t-interval;
- RoC's claim: the tool error rate (failed / calls) of the correct episodes trained on (RoC: the kept ones;
  uniform: all correct ones), per seed and the paired difference with its interval;
- ARPO's observation, on the uniform runs' stored episodes: per assistant turn that follows a tool result,
  the mean entropy of its first k tokens minus the episode's first turn's (k = 10 and 20), quantiles over
  those turns and the share above 0;
- the store bytes the decision columns add per episode: each run's rollouts written as Parquet (zstd) with
  and without the decision columns, `filter_kept` and the `decision` map (and the allocations with and
  without RoC's appended reason), against the episode's whole record (its rollouts row, turns and tool
  calls), in percent.
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

import numpy as np

from benchmarks.episodes_learning import CONFIG, held_out_pass1, t_interval
from workbench.store.schema import DECISION_FIELDS

ARMS = {"uniform": {}, "roc": {"rollout.episodes.roc_oversample": 2}, "arpo": {"rollout.episodes.arpo_branch": True},
        "arpo_hard": {"rollout.episodes.arpo_branch": True, "rollout.episodes.arpo_advantage": "hard"},
        "aepo": {"rollout.episodes.aepo_branch": True, "algorithm.loss": "aepo_clip",
                 "algorithm.entropy_advantage": 0.2}}
DEFAULT_ARMS = ("uniform", "roc", "arpo", "aepo")
DECISION_COLUMNS = ("filter_kept", "decision")
"""The stored columns of the decisions (the named fields readers add, `DECISION_FIELDS`, are read out of `decision`)."""


def _one(arm: str, seed: int, store_dir: str, steps: int, budget: int, threads: int) -> dict[str, Any]:
    import polars as pl

    from workbench.control.launch import resolve_config
    from workbench.engine import run
    from workbench.store import open_store

    over = {"steps": steps, "allocator.budget_kind": "tokens", "allocator.budget": budget,
            "allocator.prompts_per_step": 32, "eval.every": steps, "eval.at_start": True, "checkpoint.every": 0,
            "seed": seed, "model.threads": threads, **ARMS[arm]}
    cfg = resolve_config(str(CONFIG), over, name=f"alloc-{arm}-s{seed}")
    t = time.perf_counter()
    rid = run(cfg, store=store_dir)
    wall = time.perf_counter() - t
    with open_store(store_dir) as st:
        steps_rows = st.run_steps(rid).sort("step").to_dicts()
        evals = st.evals(rid)
        rows = st.rollouts(rid, limit=1_000_000)
        keys = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows.to_dicts()]
        eps = st.episodes(rid, keys) if arm == "uniform" else {}
        turns = st.episode_turns(rid)
        calls = st.episode_tool_calls(rid)
        alloc = st.allocations(rid)
    start, end = held_out_pass1(evals)
    trained = rows.filter(pl.col("correct") & (pl.col("filter_kept").fill_null(True)))
    out = {"run_id": rid, "seconds": round(wall, 1), "pass1_start": round(start, 4),
           "pass1_end": round(end, 4),
           "model_tokens": int(sum(r["metrics"].get("rollout/tokens_generated", 0) for r in steps_rows)),
           "episodes": rows.height, "episodes_trained": int(rows["filter_kept"].fill_null(True).sum()),
           "correct_trained_tool_calls": int(trained["tool_calls"].sum()),
           "correct_trained_tool_errors": int(trained["tool_errors"].sum())}
    out["correct_trained_tool_error_rate"] = round(out["correct_trained_tool_errors"] /
                                                   max(out["correct_trained_tool_calls"], 1), 4)
    if arm in ("arpo", "arpo_hard", "aepo"):
        out["branches"] = int(rows["parent_idx"].is_not_null().sum())
    out["decision_bytes_pct"] = decision_bytes(rows, turns, calls, alloc)
    if eps:
        out["entropy_deltas"] = {k: _deltas(list(eps.values()), k) for k in (10, 20)}
    return out


def _deltas(episodes: list, k: int) -> list[float]:
    from workbench.rollout.shapes.episodes import entropy_deltas

    return [round(x, 5) for x in entropy_deltas(episodes, k)]


def _parquet_bytes(frame: Any) -> int:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(frame.to_arrow(), buf, compression="zstd")
    return buf.tell()


def decision_byte_counts(rows: Any, turns: Any, calls: Any, alloc: Any,
                         columns: tuple[str, ...] = DECISION_COLUMNS) -> tuple[int, int]:
    """(bytes the decision `columns` and RoC's reason text add, bytes of the episodes' whole record without
    them): each frame written as Parquet (zstd); a column null in every row counts as absent."""
    import polars as pl

    rows = rows.drop([c for c in DECISION_FIELDS if c in rows.columns])  # read out of `decision`, not stored
    present = [c for c in columns if c in rows.columns and rows[c].null_count() < rows.height]
    without = _parquet_bytes(rows.drop(present))
    added = _parquet_bytes(rows) - without
    plain = alloc.with_columns(pl.col("reason").str.replace(r"; roc: .*$", ""))
    added += _parquet_bytes(alloc) - _parquet_bytes(plain)
    return added, without + _parquet_bytes(turns) + _parquet_bytes(calls) + _parquet_bytes(plain)


def decision_bytes(rows: Any, turns: Any, calls: Any, alloc: Any) -> float:
    """What the decision columns (and RoC's reason text) add, in percent of the episodes' whole record."""
    added, whole = decision_byte_counts(rows, turns, calls, alloc)
    return round(100.0 * added / max(whole, 1), 3)


def _quantiles(x: list[float]) -> dict[str, float] | None:
    if not x:
        return None
    q = np.quantile(np.asarray(x), [0.1, 0.25, 0.5, 0.75, 0.9])
    return {"n": len(x), **{f"q{p}": round(float(v), 4) for p, v in zip((10, 25, 50, 75, 90), q)},
            "share_above_0": round(float(np.mean(np.asarray(x) > 0)), 4)}


def bench_episode_allocation(store_dir: str, *, seeds: tuple[int, ...] = (0, 1, 2), steps: int = 40,
                             budget: int = 1024, threads: int = 1,
                             arms: tuple[str, ...] = DEFAULT_ARMS) -> dict[str, Any]:
    """Every arm of `arms` (and uniform) for every seed (module docstring); one JSON-able dict."""
    from workbench.errors import ConfigError

    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise ConfigError(f"bench episode-allocation: --arms: unknown {', '.join(bad)}; valid: {', '.join(ARMS)}")
    arms = ("uniform",) + tuple(a for a in dict.fromkeys(arms) if a != "uniform")
    runs: dict[str, dict[int, dict[str, Any]]] = {arm: {} for arm in arms}
    for seed in seeds:
        for arm in arms:
            runs[arm][seed] = _one(arm, seed, store_dir, steps, budget, threads)
    uni = runs["uniform"]
    summary: dict[str, Any] = {}
    for arm in arms:
        ends = [runs[arm][s]["pass1_end"] for s in seeds]
        summary[f"{arm}_pass1_end_mean"] = round(float(np.mean(ends)), 4)
        summary[f"{arm}_pass1_end_ci90"] = t_interval(ends)
        summary[f"{arm}_model_tokens_mean"] = round(float(np.mean([runs[arm][s]["model_tokens"] for s in seeds])))
        summary[f"{arm}_decision_bytes_pct_max"] = max(runs[arm][s]["decision_bytes_pct"] for s in seeds)
        if arm != "uniform":
            diff = [runs[arm][s]["pass1_end"] - uni[s]["pass1_end"] for s in seeds]
            summary[f"{arm}_minus_uniform_mean"] = round(float(np.mean(diff)), 4)
            summary[f"{arm}_minus_uniform_ci90"] = t_interval(diff)
    if "roc" in arms:
        err = [runs["roc"][s]["correct_trained_tool_error_rate"] - uni[s]["correct_trained_tool_error_rate"]
               for s in seeds]
        summary["roc_minus_uniform_correct_tool_error_rate_mean"] = round(float(np.mean(err)), 4)
        summary["roc_minus_uniform_correct_tool_error_rate_ci90"] = t_interval(err)
    deltas = {s: uni[s].pop("entropy_deltas") for s in seeds}  # per turn: summarised, not listed
    for k in (10, 20):
        summary[f"entropy_after_tool_minus_first_turn_k{k}"] = _quantiles([x for s in seeds for x in deltas[s][k]])
    return {"config": "configs/organism-tools.toml", "seeds": list(seeds), "steps": steps,
            "budget_model_tokens_per_step": budget, "load": list(os.getloadavg()), "summary": summary,
            **{arm: {str(s): v for s, v in runs[arm].items()} for arm in arms}}
