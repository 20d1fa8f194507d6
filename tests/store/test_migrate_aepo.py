"""Schema 14 -> 15 (issue #41, AEPO): a store written before gains rollouts.branch_rounds, branch_split and
branch_split_dh, null in the rows it had, and keeps them."""

from __future__ import annotations

from workbench.store import StepRecord, open_store, schema

NEW = ("branch_rounds", "branch_split", "branch_split_dh")


def test_a_schema_14_store_gains_the_aepo_columns(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2}]))

        def as_schema_14(cur):
            cur.execute("ALTER TABLE rollouts DROP COLUMN decision")  # schema 16 packed them into decision
            for name, typ in (("filter_penalty", "FLOAT"), ("filter_reason", "VARCHAR"),
                              ("branch_entropy_before", "FLOAT"), ("branch_entropy_after", "FLOAT"),
                              ("branch_draw", "FLOAT")):  # schema 12's, still columns at 14
                cur.execute(f"ALTER TABLE rollouts ADD COLUMN {name} {typ}")
            cur.execute("UPDATE meta SET value = '14' WHERE key = 'schema_version'")

        st._lake.write(as_schema_14, "a store as schema 14 left it")
        assert "branch_split_dh" not in st._lake.read("DESCRIBE rollouts")["column_name"].to_list()
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 15
        st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "7", "reward": 0.0, "length": 1,
             "branch_rounds": 2, "branch_split": 5, "branch_split_dh": -0.25}]))
        rows = st.rollouts(rid).sort("step")
        assert rows["response"].to_list() == ["12", "7"]
        assert rows["branch_rounds"].to_list() == [None, 2]
        assert rows["branch_split"].to_list() == [None, 5]
        assert rows["branch_split_dh"].to_list() == [None, -0.25]
