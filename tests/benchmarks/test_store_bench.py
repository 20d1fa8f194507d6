"""`workbench bench store`: an interrupted build resumed, a PostgreSQL catalog in a temp dir, commits spaced as
the engine spaces them."""

import json

import pytest
from typer.testing import CliRunner

from workbench.cli import app

runner = CliRunner()


def test_bench_store_small(tmp_path):
    out = runner.invoke(app, ["bench", "store", "--rollouts", "1024", "--repeats", "3", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert result["rollouts"] == 1024 and result["steps"] == 2
    assert result["ingest_rollouts_per_s"] > 0 and 500 < result["bytes_per_rollout"] < 5000
    assert set(result["p95_ms"]) >= {"list_runs", "run_steps", "rollouts_page", "prompt_history", "step_allocations"}


def test_bench_store_resumes_an_interrupted_build(tmp_path):
    """A long build (10M rollouts takes hours) goes on where it stopped, writing what an
    uninterrupted build writes; a store holding another build or other runs is refused by name."""
    from workbench.errors import StoreError
    from workbench.store import open_store
    from benchmarks.store_bench import bench_store

    class Stop(Exception):
        pass

    def stop_after_two(done, total):
        if done == 2:
            raise Stop

    with pytest.raises(Stop):
        bench_store(2048, path=tmp_path / "resumed", repeats=1, progress=stop_after_two)
    out = bench_store(2048, path=tmp_path / "resumed", repeats=1)
    # progress is reported once a block of steps is committed: the build stopped after its first block
    assert 2 <= out["resumed_at_step"] < 4 and out["steps"] == 4 and out["rollouts"] == 2048
    bench_store(2048, path=tmp_path / "whole", repeats=1)
    rows = {}
    for name in ("resumed", "whole"):
        with open_store(tmp_path / name, read_only=True) as store:
            (run_id,) = store.list_runs()["run_id"].to_list()
            rows[name] = store.sql("SELECT step, prompt_id, reward, token_ids FROM rollouts "
                                   "ORDER BY step, prompt_id, idx").to_dicts()
    assert rows["resumed"] == rows["whole"] and len(rows["whole"]) == 2048
    again = bench_store(2048, path=tmp_path / "whole", repeats=1)  # finished: only timed
    assert again["resumed_at_step"] == 4 and again["ingest_rollouts_per_s"] is None
    with pytest.raises(StoreError, match="bench of 2048 rollouts"):
        bench_store(4096, path=tmp_path / "whole", repeats=1)
    with open_store(tmp_path / "other") as store:
        store.create_run("not a bench", {}, seed=0)
    with pytest.raises(StoreError, match="not a store bench"):
        bench_store(1024, path=tmp_path / "other", repeats=1)


def test_bench_store_on_a_postgres_catalog_in_a_temp_dir():
    """`workbench bench store --catalog postgres` without --path (a temp dir of its own)."""
    from benchmarks.store_bench import bench_store
    from workbench.store.pglocal import server_bin

    if server_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    out = bench_store(rollouts=2048, catalog="postgres", repeats=1, engine_steps=0)
    assert out["catalog"] == "postgres" and out["rollouts"] == 2048 and out["bytes_per_rollout"] > 0


def test_the_store_bench_spaces_commits_as_the_engine_does():
    import inspect

    from workbench.config import StoreConfig
    from benchmarks.store_bench import bench_store

    assert inspect.signature(bench_store).parameters["commit_spacing_s"].default == StoreConfig().commit_spacing_s
