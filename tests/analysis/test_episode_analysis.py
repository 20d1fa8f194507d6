"""Episode analyses on hand-computed cases: the entropy of the first k tokens after a tool result against
the episode's first assistant turn (ARPO's observation), and the per-step tool statistics."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.analysis.episodes import entropy_after_tools, episode_stats
from workbench.episodes import Episode, ToolCall, Turn, episode_rows


def _turns() -> pl.DataFrame:
    ep = Episode([Turn("user", "q", token_ids=[1]),
                  Turn("assistant", "c", token_ids=[1, 2, 3], entropy=[0.2, 0.4, 0.9], tool_calls=[ToolCall("t", "x")]),
                  Turn("tool", "r", token_ids=[4]),
                  Turn("assistant", "a", token_ids=[5, 6, 7], entropy=[1.0, 0.6, 0.1])])
    plain = Episode([Turn("user", "q", token_ids=[1]), Turn("assistant", "a", token_ids=[2], entropy=[0.5])])
    rows = []
    for idx, e in enumerate((ep, plain)):
        rows += episode_rows(e, {"run_id": "r", "step": 1, "stage": 0, "prompt_id": "p", "idx": idx})[0]
    return pl.DataFrame(rows)


def test_entropy_after_a_tool_result_against_the_first_turn_by_hand():
    out = entropy_after_tools(_turns(), k=2)
    assert out.height == 1 and out["idx"].to_list() == [0] and out["turn"].to_list() == [3]
    assert out["h_first"][0] == pytest.approx(0.3) and out["h_after"][0] == pytest.approx(0.8)
    assert out["dh"][0] == pytest.approx(0.5)
    assert entropy_after_tools(_turns(), k=10)["dh"][0] == pytest.approx((1.7 / 3) - 0.5)
    assert entropy_after_tools(_turns().clear()).is_empty()
    with pytest.raises(ValueError, match="k must be >= 1"):
        entropy_after_tools(_turns(), k=0)


def test_episode_stats_per_step():
    rollouts = pl.DataFrame({"step": [1, 1, 1, 2], "turns": [4, 2, None, 6], "tool_calls": [1, 0, None, 2],
                             "tool_errors": [1, 0, None, 0], "tool_tokens": [3, 0, None, 6], "length": [5, 2, 3, 9]})
    out = episode_stats(rollouts).to_dicts()
    assert out[0] == {"step": 1, "episodes": 2, "calls_per_episode": 0.5, "tool_error_rate": 1.0, "call_rate": 0.5,
                      "turns": 3.0, "model_tokens": 3.5, "tool_tokens": 1.5}
    assert out[1]["tool_error_rate"] == 0.0 and out[1]["call_rate"] == 1.0


def test_episodes_by_step_reads_the_episode_metrics_and_nothing_else():
    from workbench.analysis.episodes import episodes_by_step

    plain = pl.DataFrame({"step": [1, 2, 3], "metrics": [{"rollout/reward_mean": 0.5}] * 3})
    assert episodes_by_step(plain).is_empty()  # a run without episodes: no rows (not one row of nulls)
    mixed = pl.DataFrame({"step": [2, 1, 3], "metrics": [
        {"episodes/call_rate": 0.5, "episodes/tool_error_rate": 0.25}, {"episodes/call_rate": 0.25}, {"x": 1.0}]})
    out = episodes_by_step(mixed)
    assert out["step"].to_list() == [1, 2] and out["call_rate"].to_list() == [0.25, 0.5]
    assert out["tool_error_rate"].to_list() == [None, 0.25] and out["model_tokens"].null_count() == 2
