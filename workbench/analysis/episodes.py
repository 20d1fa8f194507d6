"""Episode analyses: what multi-turn rollouts did with their tools, and ARPO's observation that the
model's entropy rises right after a tool result (Dong et al. 2025, arXiv 2507.19849, Fig. 1).

    from workbench.analysis.episodes import entropy_after_tools, episode_stats
    turns = store.episode_turns(run_id, step_min=0, step_max=50)
    entropy_after_tools(turns, k=10)    # one row per tool result that the model went on after
    episode_stats(store.episode_tool_calls(run_id), rollouts)  # calls, errors, turns per step
    episodes_by_step(store.run_steps(run_id))   # the run's `episodes/...` step metrics, one column each

The entropy of a window is the mean of its tokens' entropies (nats); ARPO compares the first k tokens
after a tool result (k = 10-50 in the paper, 20 in its code) with the first k of the episode's first
assistant turn (its "initial entropy").
"""

from __future__ import annotations

import polars as pl

KEY = ["run_id", "step", "stage", "prompt_id", "idx"]

EPISODE_METRICS = {"episodes/call_rate": "call_rate", "episodes/tool_error_rate": "tool_error_rate",
                   "episodes/turn_limit_rate": "turn_limit_rate", "episodes/tool_calls": "tool_calls",
                   "episodes/turns": "turns", "episodes/model_tokens": "model_tokens",
                   "episodes/tool_tokens": "tool_tokens", "episodes/tool_s": "tool_s",
                   "episodes/entropy_after_tool_delta": "entropy_after_tool_delta"}
"""The episodes' step metrics (workbench/metrics.py) and their columns in `episodes_by_step`."""


def episodes_by_step(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step of a steps frame that recorded episode metrics: `step` and one Float64 column per
    `EPISODE_METRICS` entry (null where a step did not record it); empty for a run without episodes."""
    from workbench.analysis.terms import metric_columns

    if steps.is_empty() or "step" not in steps.columns or "metrics" not in steps.columns:
        return pl.DataFrame()
    wide = pl.concat([steps.select("step"), metric_columns(steps, EPISODE_METRICS)], how="horizontal")
    return wide.filter(pl.col("call_rate").is_not_null()).sort("step")


def entropy_after_tools(turns: pl.DataFrame, k: int = 10) -> pl.DataFrame:
    """One row per assistant turn that follows a tool turn: the mean entropy of its first `k` tokens
    (`h_after`), the mean entropy of the first `k` tokens of its episode's first assistant turn
    (`h_first`), their difference `dh` (> 0: the model is less sure after the tool's result, ARPO's
    observation) and the turn. Turns are `Store.episode_turns` rows (any order)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    key = [c for c in KEY if c in turns.columns]
    cols = ["turn", "role", "token_entropy", *key]
    if turns.is_empty():
        return pl.DataFrame(schema={**{c: turns.schema[c] for c in key}, "turn": pl.Int32, "h_first": pl.Float64,
                                    "h_after": pl.Float64, "dh": pl.Float64})
    t = (turns.select(cols).sort([*key, "turn"])
         .with_columns(prev_role=pl.col("role").shift(1).over(key),
                       h=pl.col("token_entropy").list.head(k).list.mean()))
    assistant = t.filter((pl.col("role") == "assistant") & pl.col("h").is_not_null())
    first = (assistant.group_by(key).agg(pl.col("h").sort_by("turn").first().alias("h_first"),
                                         pl.col("turn").min().alias("first_turn")))
    after = assistant.filter(pl.col("prev_role") == "tool").select([*key, "turn", pl.col("h").alias("h_after")])
    out = after.join(first, on=key, how="inner").filter(pl.col("turn") > pl.col("first_turn"))
    return (out.select([*key, "turn", "h_first", "h_after"])
            .with_columns(dh=pl.col("h_after") - pl.col("h_first")).sort([*key, "turn"]))


def episode_stats(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Per step over a run's episodes (rows of `rollouts` with `turns`): episodes, the mean tool calls,
    the tool-call error rate (failed calls / calls), the mean turns, model and tool tokens, and the share
    of episodes that called a tool at all."""
    ep = rollouts.filter(pl.col("turns").is_not_null())
    return (ep.group_by("step").agg(
        episodes=pl.len(),
        calls_per_episode=pl.col("tool_calls").mean(),
        tool_error_rate=(pl.col("tool_errors").sum() / pl.col("tool_calls").sum()).fill_nan(None),
        call_rate=(pl.col("tool_calls") > 0).mean(),
        turns=pl.col("turns").mean(),
        model_tokens=pl.col("length").mean(),
        tool_tokens=pl.col("tool_tokens").mean(),
    ).sort("step"))
