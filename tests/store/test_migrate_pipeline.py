"""A schema-4 store (before the asynchronous pipeline's columns) opens, gains the columns, and keeps
its rows, the new columns null in them."""

from __future__ import annotations

from workbench.store import open_store, schema

NEW = {"rollouts": ["version_start", "version_end", "segments", "staleness", "is_weight_mean"],
       "allocations": ["stats_version"]}


def test_a_schema_4_store_gains_the_pipeline_columns(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)

        def as_schema_4(cur):
            cur.execute(f"INSERT INTO allocations (run_id, step, stage, prompt_id) VALUES ('{rid}', 1, 0, 'p')")
            for table, cols in NEW.items():
                for col in cols:
                    cur.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
            cur.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")

        st._lake.write(as_schema_4, "a store as schema 4 left it")
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION
        rows = st.sql("SELECT * FROM allocations")
        assert rows.height == 1 and rows["stats_version"].null_count() == 1
        cols = st.sql("SELECT * FROM rollouts LIMIT 0").columns
    assert set(NEW["rollouts"]) <= set(cols)
