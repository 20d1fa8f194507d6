"""`workbench query`, `workbench store info|compact|export`."""

from __future__ import annotations

import json

import duckdb
import polars as pl
from typer.testing import CliRunner

from workbench.cli import app
from workbench.store.maintenance import compact, export, info

runner = CliRunner()
QUERIES = [
    "SELECT step, count(*) AS n, sum(reward) AS r, sum(list_sum(token_ids)) AS t FROM rollouts GROUP BY step ORDER BY step",
    "SELECT * FROM allocations ORDER BY step, stage, prompt_id",
    "SELECT * EXCLUDE (created_at) FROM steps ORDER BY step",
    "SELECT * FROM prompt_stats ORDER BY step, prompt_id",
]


def test_query_formats_and_refusal(filled):
    store, run_id, _ = filled
    root = str(store.location.root)
    out = runner.invoke(app, ["query", "SELECT count(*) AS n FROM rollouts", "--store", root, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == [{"n": 48}]
    out = runner.invoke(app, ["query", "SELECT step, token_ids[1:2] AS t FROM rollouts ORDER BY ALL LIMIT 1",
                              "--store", root, "--format", "csv"])
    assert out.exit_code == 0 and out.output.splitlines()[0] == "step,t"
    assert out.output.splitlines()[1].startswith('0,"[')
    out = runner.invoke(app, ["query", "SELECT run_id FROM runs", "--store", root])
    assert out.exit_code == 0 and run_id in out.output
    out = runner.invoke(app, ["query", "DELETE FROM rollouts", "--store", root])
    assert out.exit_code != 0 and isinstance(out.exception, Exception)
    assert "DELETE is refused" in str(out.exception) or "read-only" in str(out.exception)
    assert store.count_rollouts(run_id) == 48


def test_info(filled):
    store, run_id, _ = filled
    out = info(store)
    assert out["tables"]["rollouts"]["rows"] == 48 and out["tables"]["rollouts"]["files"] == 3
    assert out["tables"]["steps"]["rows"] == 3 and out["schema_version"] >= 1
    cli = runner.invoke(app, ["store", "info", "--store", str(store.location.root), "--json"])
    assert cli.exit_code == 0 and json.loads(cli.output)["tables"]["allocations"]["rows"] == 12


def test_compact_keeps_query_results(filled):
    store, run_id, _ = filled
    store.rollback_run(run_id, 1)  # leaves delete files behind, which compaction folds in
    before = [store.sql(q) for q in QUERIES]
    assert info(store)["tables"]["rollouts"]["files"] == 2
    out = compact(store, older_than_s=0)
    assert out["after"]["snapshots"] < out["before"]["snapshots"]
    for q, frame in zip(QUERIES, before):
        assert store.sql(q).equals(frame), q
    tables = info(store)["tables"]
    assert tables["rollouts"]["files"] == 1  # merged
    assert tables["allocations"]["files"] == 1  # inlined rows flushed to Parquet


def test_export_duckdb_and_parquet(filled, tmp_path):
    store, run_id, _ = filled
    other = store.create_run("other", {}, seed=2)
    out = export(store, tmp_path / "all.duckdb")
    assert out["rows"]["rollouts"] == 48 and out["rows"]["runs"] == 2
    con = duckdb.connect(str(tmp_path / "all.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM rollouts").fetchone()[0] == 48
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    con.close()
    cli = runner.invoke(app, ["store", "export", "--store", str(store.location.root), "--run", run_id,
                              "--format", "parquet", "--to", str(tmp_path / "pq"), "--json"])
    assert cli.exit_code == 0, cli.output
    assert pl.read_parquet(tmp_path / "pq" / "runs.parquet")["run_id"].to_list() == [run_id]
    assert pl.read_parquet(tmp_path / "pq" / "rollouts.parquet").height == 48
    assert other not in pl.read_parquet(tmp_path / "pq" / "runs.parquet")["run_id"].to_list()
