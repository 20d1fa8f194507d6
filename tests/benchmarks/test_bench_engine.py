"""`workbench bench engine` without TRL installed: it measures the rest, prints JSON, and says in one
line on stderr how to add the peer (the import failure is simulated in-process)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner



@pytest.fixture
def no_trl(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError


def test_missing_peer_is_detected(no_trl):
    from benchmarks.engine_bench import missing_peer

    assert missing_peer() == "trl"


def test_bench_engine_json_without_trl(no_trl, organism_store, tiny_config, tmp_path, monkeypatch):
    from workbench.cli import app
    from workbench.config_docs import to_toml
    from benchmarks import engine_bench

    config = tmp_path / "tiny.toml"
    config.write_text(to_toml(tiny_config()))
    monkeypatch.setattr(engine_bench, "DEFAULT_CONFIG", config)
    monkeypatch.setenv("WORKBENCH_STORE", str(organism_store))
    res = CliRunner().invoke(app, ["bench", "engine", "--json", "--steps", "1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["rollouts_per_s"] > 0 and out["trl_rollouts_per_s"] is None and out["ratio_vs_trl"] is None
    assert out["logging_overhead_interleaved"]["block"] == engine_bench.INTERLEAVE_BLOCK
    cpu = out["logging_cpu"]  # the writer thread committed the logged steps: its CPU is counted
    assert cpu["writer_ms_per_step"] >= 0 and cpu["process_cpu_ms_per_step"] > 0
    assert 0 <= cpu["writer_share_pct"] < 100
    assert "pip install -e '.[trl]'" in out["trl_missing"]
    err = [line for line in res.stderr.splitlines() if "TRL" in line or "trl" in line]  # (model loading bars aside)
    assert len(err) == 1 and "trl is not installed: add the peer with: pip install -e '.[trl]'" in err[0]


def test_bench_engine_rejects_bad_options():
    from workbench.cli import app

    from workbench.errors import ConfigError

    res = CliRunner().invoke(app, ["bench", "engine", "--backend", "ray", "--workers", "1,x"])
    assert isinstance(res.exception, ConfigError) and "--workers: '1,x' is not a comma-separated" in str(res.exception)
    res = CliRunner().invoke(app, ["bench", "engine", "--backend", "vllm"])
    assert isinstance(res.exception, ConfigError) and "--backend: 'vllm' is not allowed" in str(res.exception)


def test_logging_overhead_interval_brackets_the_median_and_narrows_with_steps():
    """The bootstrap interval of `bench engine`'s logging overhead: around the median, seeded, and
    narrower on more steps of the same spread."""
    import random

    from benchmarks.engine_bench import overhead_interval

    rng = random.Random(1)
    few_on = [{"wall_s": 0.42 + rng.gauss(0, 0.03)} for _ in range(12)]
    few_off = [{"wall_s": 0.40 + rng.gauss(0, 0.03)} for _ in range(12)]
    many_on = [{"wall_s": 0.42 + rng.gauss(0, 0.03)} for _ in range(400)]
    many_off = [{"wall_s": 0.40 + rng.gauss(0, 0.03)} for _ in range(400)]
    few, many = overhead_interval(few_on, few_off), overhead_interval(many_on, many_off)
    assert few == overhead_interval(few_on, few_off)  # seeded
    for x in (few, many):
        assert x["low"] <= x["median"] <= x["high"] and x["level"] == 0.9
    assert many["high"] - many["low"] < few["high"] - few["low"]
    assert many["low"] > 0 and abs(many["median"] - 5.0) < 2.0  # a 5% overhead, resolved on 400 steps


def test_rollouts_block_logs_rollouts_in_alternate_blocks(store_dir, tiny_config):
    """`logging.rollouts_block=2`: the steps of every other block of two have rollouts in the store,
    the others none; every step has its steps row."""
    from workbench.engine import run
    from workbench.engine.loop import logs_rollouts
    from workbench.store import open_store

    cfg = tiny_config(steps=6, eval__every=0, logging__rollouts_block=2)
    run_id = run(cfg, store=str(store_dir))
    with open_store(store_dir, read_only=True) as store:
        steps = store.run_steps(run_id)["step"].to_list()
        logged = set(store.sql("SELECT DISTINCT step FROM rollouts WHERE run_id = ?", [run_id])["step"].to_list())
    assert len(steps) == 6
    assert logged == {s for s in steps if logs_rollouts(2, s)} and 0 < len(logged) < len(steps)
