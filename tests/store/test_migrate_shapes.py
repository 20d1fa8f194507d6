"""A schema-9 store (before rollout shapes) opens, gains the rollouts' shape columns, and keeps its
rows, the new columns null in them."""

from __future__ import annotations

from workbench.store import StepRecord, open_store, schema

SHAPE = ["shape", "reused_tokens", "draft_tokens", "draft_rejected_at", "parent_idx", "branch_at"]


def test_a_schema_9_store_gains_the_shape_columns(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2}]))

        def as_schema_9(cur):
            for name in SHAPE:
                cur.execute(f"ALTER TABLE rollouts DROP COLUMN {name}")
            cur.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")

        st._lake.write(as_schema_9, "a store as schema 9 left it")
        assert not set(SHAPE) & set(st.sql("SELECT * FROM rollouts LIMIT 0").columns)
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 10
        st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "1", "reward": 0.0, "length": 1,
             "shape": "tree", "parent_idx": 0, "branch_at": 1}]))
        rows = st.rollouts(rid).sort("step")
    assert rows["response"].to_list() == ["12", "1"]
    assert rows["shape"].to_list() == [None, "tree"] and rows["branch_at"].to_list() == [None, 1]
    assert rows["reused_tokens"].null_count() == 2


def test_a_schema_10_store_gains_the_draft_mode_column(tmp_path):
    """rollouts.draft_mode (schema 11): a store from before keeps its speculative rows, their mode null."""
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2,
             "shape": "speculative", "reused_tokens": 1, "draft_tokens": 2}]))

        def as_schema_10(cur):
            cur.execute("ALTER TABLE rollouts DROP COLUMN draft_mode")
            cur.execute("UPDATE meta SET value = '10' WHERE key = 'schema_version'")

        st._lake.write(as_schema_10, "a store as schema 10 left it")
        assert "draft_mode" not in st.sql("SELECT * FROM rollouts LIMIT 0").columns
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 11
        st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "1", "reward": 0.0, "length": 1,
             "shape": "speculative", "reused_tokens": 1, "draft_tokens": 2, "draft_mode": "lenient"}]))
        rows = st.rollouts(rid).sort("step")
    assert rows["reused_tokens"].to_list() == [1, 1] and rows["draft_mode"].to_list() == [None, "lenient"]
