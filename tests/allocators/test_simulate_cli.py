"""The offline simulator and the commands that print it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from workbench.allocators import available_allocators
from workbench.allocators.registry import shipped_allocators
from workbench.allocators.simulate import SimConfig, simulate, simulate_one
from workbench.cli import app
from workbench.errors import ConfigError

runner = CliRunner()
SMALL = SimConfig(population=128, prompts_per_step=16, steps=12)


def test_simulator_measures_and_learns():
    row = simulate_one("uniform", {}, SMALL, seed=0)
    assert row["rollouts_per_step"] == 16 * 8
    assert row["budget_used_frac"] == pytest.approx(1 / 1.5)
    assert 0.0 < row["zero_signal_frac"] < 1.0
    # uniform: informative groups per 1k rollouts = (1 - zero-signal share) * 1000 / 8
    assert row["informative_per_1k"] == pytest.approx((1 - row["zero_signal_frac"]) * 125)
    assert row["pass_mean_end"] > row["pass_mean_start"]
    assert simulate_one("uniform", {}, SMALL, seed=0) == {**row, "seconds": pytest.approx(row["seconds"], abs=10)}


def test_filters_remove_zero_signal_from_updates():
    by = {r["allocator"]: r for r in simulate(["uniform", "multistage", "dynamic_sampling"], SMALL, seeds=1)}
    assert by["uniform"]["dropped_groups_per_step"] == 0
    assert by["multistage"]["dropped_groups_per_step"] > 0
    # DARS's second stage rescues hard prompts: fewer zero-signal groups than uniform
    assert by["multistage"]["zero_signal_frac"] < by["uniform"]["zero_signal_frac"]
    # DAPO keeps drawing until the batch is full of informative groups
    assert by["dynamic_sampling"]["informative_groups_per_step"] > by["uniform"]["informative_groups_per_step"]


def test_token_budget_and_bad_config():
    row = simulate_one("knapsack", {}, SimConfig(population=64, prompts_per_step=8, steps=5, budget_kind="tokens"), 0)
    assert 0 < row["budget_used_frac"] <= 1.0
    with pytest.raises(ConfigError, match="budget_kind"):
        SimConfig(budget_kind="seconds")
    with pytest.raises(ConfigError, match="prompts_per_step"):
        SimConfig(population=4, prompts_per_step=8)


def test_bench_allocators_simulate_json():
    result = runner.invoke(app, ["bench", "allocators", "--simulate", "--json", "--seeds", "1", "--steps", "4"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["allocator"] for r in rows] == available_allocators()
    for r in rows:
        assert {"zero_signal_frac", "informative_per_1k", "budget_used_frac"} <= set(r)
        assert 0.0 <= r["budget_used_frac"] <= 1.0 and 0.0 <= r["zero_signal_frac"] <= 1.0


def test_bench_allocators_subset_and_errors():
    result = runner.invoke(app, ["bench", "allocators", "--simulate", "--json", "--seeds", "1", "--steps", "2",
                                 "--allocators", "uniform,knapsack"])
    assert [r["allocator"] for r in json.loads(result.output)] == ["uniform", "knapsack"]
    result = runner.invoke(app, ["bench", "allocators", "--simulate", "--allocators", "nope"])
    assert result.exit_code != 0 and "valid: adaptive_stop" in str(result.exception)
    # the real comparison checks its arguments before it builds or runs anything
    result = runner.invoke(app, ["bench", "allocators", "--json", "--allocators", "uniform,nope"])
    assert result.exit_code != 0 and "nope" in str(result.exception)
    result = runner.invoke(app, ["bench", "allocators", "--json", "--seeds", "0"])
    assert result.exit_code != 0 and "seeds" in str(result.exception)


def test_allocators_list_and_show():
    result = runner.invoke(app, ["allocators", "list", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == available_allocators()
    ms = next(r for r in rows if r["name"] == "multistage")
    assert {"name": "n_max", "type": "int", "default": 32, "doc": "Most rollouts a prompt gets over both stages (N_max)."} in ms["params"]
    result = runner.invoke(app, ["allocators", "show", "multistage"])
    assert result.exit_code == 0 and "arXiv:2508.13755" in result.output and "n_max (int, default 32)" in result.output


def test_docs_cover_every_allocator():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "allocators.md").read_text()

    # Other test modules may register throw-away allocators; the docs cover the shipped ones.
    shipped = shipped_allocators()
    assert len(shipped) >= 10
    for name in shipped:
        assert f"`{name}`" in text
    assert "TemperatureController" in text
