"""`workbench bench episodes-speed` at its smallest, on the small tools organism: both ways decode the
same rows in alternated rounds, and what it reports is consistent with what it measured (never a
timing's value)."""

from __future__ import annotations

import pytest

from benchmarks.episodes_speed import bench_episodes_speed


def test_episodes_and_single_turn_side_by_side(store_dir, tiny_tools_config):
    out = bench_episodes_speed(str(store_dir), config=tiny_tools_config(), prompts=6, samples=2, rounds=3)
    assert out["prompts"] == 6 and out["rows"] == 12 and len(out["rounds"]) == 3
    assert [r["first"] for r in out["rounds"]] == ["episodes", "single", "same_tokens"]
    for r in out["rounds"]:
        assert r["episode_tokens"] >= 12 and r["single_tokens"] >= 12  # at least one token a row
        # the like-for-like side decodes exactly the episodes' tokens, row by row (the same seeds gave
        # the same episodes in the untimed pass)
        assert r["same_counts"] is True and r["same_tokens"] == r["episode_tokens"]
        assert r["episode_decode_s"] > 0 and r["tool_blocked_s"] >= 0 and r["single_s"] > 0 and r["same_s"] > 0
        assert r["episode_tok_s"] == pytest.approx(r["episode_tokens"] / r["episode_decode_s"], rel=1e-2, abs=0.1)
        assert r["ratio_same_tokens"] == pytest.approx(r["episode_tok_s"] / r["same_tok_s"], abs=2e-3)
        assert r["ratio_turn_capped"] == pytest.approx(r["episode_tok_s"] / r["single_tok_s"], abs=2e-3)
        assert r["cpu_ratio_same_tokens"] == pytest.approx(r["episode_cpu_tok_s"] / r["same_cpu_tok_s"], abs=2e-3)
    for key in ("ratio_same_tokens", "ratio_turn_capped", "cpu_ratio_same_tokens"):
        ratios = [r[key] for r in out["rounds"]]
        assert min(ratios) <= out[f"median_{key}"] <= max(ratios)
    added, own = out["tool_added_ms"], out["tool_sandbox_ms"]
    assert added["calls"] == own["calls"] == sum(r["calls"] for r in out["rounds"])
    if added["calls"]:  # a call's added time holds its sandbox round trip
        assert 0 <= added["p50"] <= added["p95"] <= added["max"] and added["max"] >= own["max"] >= 0


def test_a_config_without_tools_is_refused(store_dir, tiny_config):
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="must set rollout.shape = \"episodes\" and \\[tools\\]"):
        bench_episodes_speed(str(store_dir), config=tiny_config(), prompts=2, samples=1, rounds=1)
