"""The SQL console reaches the store's tables and nothing else (R4): file readers, COPY, ATTACH,
INSTALL, LOAD, SET, PRAGMA are refused with one clear line, through `Store.sql` and `workbench query`,
while ordinary queries (joins, aggregates, list functions) keep working."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workbench.errors import StoreError
from workbench.store import open_store
from workbench.store.console import check_console_sql, refusal

SECRET = "top-secret-line"

FORBIDDEN = [
    ("SELECT content FROM read_text('{secret}')", "read_text()"),
    ("SELECT * FROM read_csv('{secret}')", "read_csv()"),
    ("SELECT * FROM read_csv_auto('{secret}')", "read_csv_auto()"),
    ("SELECT * FROM read_json('{secret}')", "read_json()"),
    ("SELECT * FROM read_blob('{secret}')", "read_blob()"),
    ("SELECT * FROM read_parquet('{secret}')", "read_parquet()"),
    ("SELECT * FROM glob('/*')", "glob()"),
    ("SELECT * FROM '{secret}'", "reading the file"),
    ("SELECT * FROM runs JOIN '{secret}' ON true", "reading the file"),
    ('SELECT "read_text"(\'{secret}\')', "read_text()"),
    ("select /* x */ content from READ_TEXT('{secret}')", "read_text()"),
    ("COPY runs TO '{out}'", "COPY is refused"),
    ("COPY (SELECT 1) TO '{out}' (FORMAT csv)", "COPY is refused"),
    ("EXPLAIN ANALYZE COPY runs TO '{out}'", "COPY is refused"),
    ("ATTACH '{out}' AS other", "ATTACH is refused"),
    ("DETACH lake", "DETACH is refused"),
    ("INSTALL httpfs", "INSTALL is refused"),
    ("FORCE INSTALL httpfs", "FORCE is refused"),
    ("LOAD httpfs", "LOAD is refused"),
    ("SET enable_external_access = true", "SET is refused"),
    ("SET lock_configuration = false", "SET is refused"),
    ("RESET threads", "RESET is refused"),
    ("PRAGMA version", "PRAGMA is refused"),
    ("CALL pragma_version()", "CALL is refused"),
    ("IMPORT DATABASE '{dir}'", "IMPORT is refused"),
    ("EXPORT DATABASE '{dir}'", "EXPORT is refused"),
    ("DELETE FROM runs", "DELETE is refused"),
    ("DROP TABLE runs", "DROP is refused"),
    ("SELECT 1; SELECT 2", "exactly one statement"),
    ("", "empty"),
]


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    path = tmp_path_factory.mktemp("outside") / "secret.txt"
    path.write_text(f"{SECRET}\n")
    return path


def _fill(sql: str, secret, tmp_path) -> str:
    return sql.format(secret=secret, out=tmp_path / "out.csv", dir=tmp_path)


@pytest.mark.parametrize("sql, expected", FORBIDDEN)
def test_forbidden_statements_refused_with_one_line(small_store, secret, tmp_path, sql, expected):
    path, run_id = small_store
    query = _fill(sql, secret, tmp_path)
    with open_store(path, read_only=True) as store:
        with pytest.raises(StoreError) as info:
            store.sql(query)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message and SECRET not in message
    assert not (tmp_path / "out.csv").exists()


def test_engine_barrier_holds_without_the_statement_check(small_store, secret, monkeypatch):
    """DuckDB's own lockdown refuses files outside the store even when the statement check lets a
    query through (a reader the check does not know, or one hidden in `query()`)."""
    import workbench.store.console as console

    path, _ = small_store
    monkeypatch.setattr(console, "refusal", lambda q: None)
    with open_store(path) as store:  # a writable Store: user SQL still runs on the locked connection
        for query in (f"SELECT content FROM read_text('{secret}')",
                      f"SELECT * FROM query('SELECT content FROM read_text(''{secret}'')')",
                      "SET enable_external_access = true", "LOAD httpfs"):
            with pytest.raises(StoreError) as info:
                store.sql(query)
            assert SECRET not in str(info.value)
        setting = store.sql("SELECT current_setting('enable_external_access') AS v")["v"][0]
        assert setting is False or str(setting).lower() == "false"
        assert store.count_rollouts(store.list_runs()["run_id"][0]) == 48  # the store's own reads work


def test_ordinary_queries_still_work(small_store):
    path, run_id = small_store
    with open_store(path, read_only=True) as store:
        n = store.sql("SELECT count(*) AS n FROM rollouts WHERE run_id = ?", [run_id])["n"][0]
        assert n == 48
        joined = store.sql(
            "WITH r AS (SELECT step, avg(reward) AS reward FROM rollouts GROUP BY step) "
            "SELECT s.step, r.reward, list_max(list(x.entropy_max)) AS emax "
            "FROM steps s JOIN r USING (step) JOIN rollouts x USING (run_id, step) "
            "GROUP BY s.step, r.reward ORDER BY s.step")
        assert joined["step"].to_list() == [0, 1, 2]
        lists = store.sql("SELECT len(token_entropy) AS n, list_sum(token_entropy) AS s, "
                          "list_filter(token_entropy, e -> e > 0.5) AS hi FROM rollouts LIMIT 5")
        assert lists.height == 5 and (lists["n"] > 0).all()
        assert store.sql("DESCRIBE rollouts").height > 10
        assert store.sql("SELECT 'from ''x.csv''' AS a")["a"][0] == "from 'x.csv'"
        assert store.sql("EXPLAIN SELECT * FROM runs").height >= 1
        assert store.sql("FROM runs SELECT name")["name"][0] == "sec"


@pytest.mark.parametrize("sql", ["SELECT 'read_text(x)' AS a", "SELECT 1 AS glob_count",
                                 "SELECT * FROM runs -- COPY runs TO 'x'", "WITH t AS (SELECT 1 AS a) SELECT * FROM t"])
def test_check_allows_lookalikes(sql):
    assert refusal(sql) is None
    check_console_sql(sql)


def test_workbench_query_cannot_read_outside_the_store(small_store, secret, tmp_path):
    path, _ = small_store
    env = {**os.environ, "WORKBENCH_STORE": str(path)}
    for query in (f"select content from read_text('{secret}')", f"COPY runs TO '{tmp_path / 'out.csv'}'"):
        proc = subprocess.run([sys.executable, "-m", "workbench.cli", "query", query],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 1
        assert SECRET not in proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "refused" in lines[0]
    assert not (tmp_path / "out.csv").exists()
