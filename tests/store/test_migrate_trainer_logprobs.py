"""A schema-8 store (before the trainer's per-token log-probabilities) opens, gains
`rollouts.token_trainer_logprobs`, and keeps its rows, the new column null in them."""

from __future__ import annotations

from workbench.store import StepRecord, open_store, schema


def test_a_schema_8_store_gains_the_trainer_logprobs_column(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2,
             "token_logprobs": [-0.5, -0.25]}]))

        def as_schema_8(cur):
            cur.execute("ALTER TABLE rollouts DROP COLUMN token_trainer_logprobs")
            cur.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")

        st._lake.write(as_schema_8, "a store as schema 8 left it")
        assert "token_trainer_logprobs" not in st.sql("SELECT * FROM rollouts LIMIT 0").columns
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 9
        rows = st.rollouts(rid)
    assert rows.height == 1 and rows["token_trainer_logprobs"].null_count() == 1
    assert rows["token_logprobs"].to_list() == [[-0.5, -0.25]]
