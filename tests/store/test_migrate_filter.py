"""Schema 12 -> 13 (issue #41): a store written before episode filters gains rollouts.filter_kept,
filter_penalty and filter_reason, null in the rows it had, and keeps them."""

from __future__ import annotations

from workbench.store import StepRecord, open_store, schema


def test_a_schema_12_store_gains_the_filter_columns(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2}]))

        def as_schema_12(cur):
            for name in ("filter_kept", "decision"):  # schema 16 packed the rest into decision
                cur.execute(f"ALTER TABLE rollouts DROP COLUMN {name}")
            cur.execute("UPDATE meta SET value = '12' WHERE key = 'schema_version'")

        st._lake.write(as_schema_12, "a store as schema 12 left it")
        assert "filter_kept" not in st._lake.read("DESCRIBE rollouts")["column_name"].to_list()
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 13
        st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "7", "reward": 0.0, "length": 1,
             "filter_kept": False, "filter_penalty": 1.5, "filter_reason": "wrong_not_sampled"}]))
        rows = st.rollouts(rid).sort("step")
        assert rows["response"].to_list() == ["12", "7"]
        assert rows["filter_kept"].to_list() == [None, False]
        assert rows["filter_penalty"].to_list() == [None, 1.5]
        assert rows["filter_reason"].to_list() == [None, "wrong_not_sampled"]
