"""The `prompt_outcomes` summary (one row per run x step x prompt, written in each step's transaction):
equal to the same counts taken over the stored rollouts, for one step and for a group commit of several
runs' steps; filled for the rollouts of a store from before it (schema 12); dropped with a rollback and
moved with an archived attempt; and the Compare prompts reader answers from it as from the rollouts,
falling back to the rollouts where a row has no stored verdict."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from workbench.store import StepRecord, open_store, schema
from workbench.store.synthetic import Shape, SyntheticRun

SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=3, tokens=5, prompt_pool=6, blocks=1)
KEYS = ["run_id", "step", "prompt_id"]


def _from_rollouts(st) -> pl.DataFrame:
    """The summary as the migration computes it, from the stored rollouts."""
    return st.sql(f"{schema.PROMPT_OUTCOMES_SELECT} FROM rollouts GROUP BY run_id, step, prompt_id").sort(KEYS)


def _stored(st) -> pl.DataFrame:
    return st.sql("SELECT * FROM prompt_outcomes").sort(KEYS)


def _files(st) -> list[str]:
    return st._lake.read("SELECT data_file FROM ducklake_list_files('lake', 'prompt_outcomes')")["data_file"].to_list()


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns and a.height == b.height > 0
    for col in a.columns:
        if a[col].dtype == pl.Float64:  # means of float32 values: summed in another order
            assert ((a[col] - b[col]).abs() <= 1e-6 * (1 + b[col].abs())).all(), col
        else:
            assert a[col].to_list() == b[col].to_list(), col


def _rows(step: int) -> list[dict]:
    """A step of two prompts: p0 with verdicts (one correct), p1 with a row whose verdict is missing."""
    return [{"stage": 0, "prompt_id": "p0", "idx": 0, "reward": 1.0, "correct": True, "length": 4, "entropy_mean": 0.5},
            {"stage": 0, "prompt_id": "p0", "idx": 1, "reward": 0.0, "correct": False, "length": 2},
            {"stage": 1, "prompt_id": "p0", "idx": 2, "reward": 0.25, "correct": False, "length": 6, "entropy_mean": 1.5},
            {"stage": 0, "prompt_id": "p1", "idx": 0, "reward": 1.0, "length": 3},
            {"stage": 0, "prompt_id": "p1", "idx": 1, "reward": 0.0, "correct": False, "length": 5}][: 5 if step else 3]


def test_the_writer_summarises_each_step_as_the_rollouts_say(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("one", {}, seed=0)
        st.write_step(StepRecord(rid, 0, {"rollout/count": 3}, _rows(0)))
        st.write_step(StepRecord(rid, 1, {"rollout/count": 5}, _rows(1)))
        a, b = SyntheticRun("", SMALL, seed=1), SyntheticRun("", SMALL, seed=2)
        ra, rb = st.create_run("a", {}, seed=1), st.create_run("b", {}, seed=2)
        a.run_id, b.run_id = ra, rb
        st.write_steps([a.step(0), b.step(0), a.step(1)])  # one commit: run_id and step as columns
        stored, computed = _stored(st), _from_rollouts(st)
    _same(stored, computed)
    mine = stored.filter(pl.col("run_id") == rid).to_dicts()
    assert [(r["step"], r["prompt_id"], r["rollouts"], r["judged"], r["correct"]) for r in mine] == [
        (0, "p0", 3, 3, 1), (1, "p0", 3, 3, 1), (1, "p1", 2, 1, 0)]
    assert mine[0]["reward_sum"] == 1.25 and mine[0]["length_mean"] == 4.0 and mine[0]["entropy_mean"] == 1.0
    assert stored.filter(pl.col("run_id") == ra).height == 2 * SMALL.prompts_per_step


def test_an_arrow_step_without_verdicts_or_lengths_is_summarised_with_nulls(tmp_path):
    table = pa.table({"stage": [0, 0], "prompt_id": ["q", "q"], "idx": [0, 1], "reward": [0.5, None]})
    with open_store(tmp_path) as st:
        rid = st.create_run("bare", {}, seed=0)
        st.write_step(StepRecord(rid, 3, {"rollout/count": 2}, table))
        (row,) = _stored(st).to_dicts()
    assert (row["rollouts"], row["judged"], row["correct"], row["reward_sum"]) == (2, 0, 0, 0.5)
    assert row["length_mean"] is None and row["entropy_mean"] is None


def test_a_schema_12_store_gains_the_summary_of_its_rollouts(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        gen = SyntheticRun(rid, SMALL, seed=3)
        st.write_steps([gen.step(0), gen.step(1)])
        st.write_step(StepRecord(rid, 2, {"rollout/count": 5}, _rows(2)))

        def as_schema_13(cur):
            # a store of schema 13 has no option for the table (its rows went to Parquet files)
            cur.execute("CALL lake.set_option('data_inlining_row_limit', 0, table_name => 'prompt_outcomes')")
            cur.execute("DROP TABLE prompt_outcomes")
            cur.execute("UPDATE meta SET value = '13' WHERE key = 'schema_version'")

        st._lake.write(as_schema_13, "a store as schema 13 left it")
        assert "prompt_outcomes" not in st.sql("SELECT table_name FROM duckdb_tables()")["table_name"].to_list()
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 14
        _same(_stored(st), _from_rollouts(st))
        assert _stored(st).height == 2 * SMALL.prompts_per_step + 2
        files = _files(st)
        wide = SyntheticRun(rid, Shape(prompts_per_step=40, rollouts_per_prompt=2, tokens=3, prompt_pool=50, blocks=1))
        st.write_step(wide.step(3))  # and the writer goes on adding to it, inlined in the catalog (40 rows)
        _same(_stored(st), _from_rollouts(st))
        assert _files(st) == files


def test_rollback_and_an_archived_attempt_take_the_summary_with_the_rollouts(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("r", {}, seed=0)
        gen = SyntheticRun(rid, SMALL, seed=4)
        for step in range(4):
            st.write_step(gen.step(step))
        st.rollback_run(rid, 2)
        assert _stored(st)["step"].unique().sort().to_list() == [0, 1, 2]
        attempt = st.archive_attempt(rid, 0, "a guard's rollback")
        stored = _stored(st)
        _same(stored, _from_rollouts(st))
    assert stored.filter(pl.col("run_id") == attempt)["step"].unique().sort().to_list() == [1, 2]
    assert stored.filter(pl.col("run_id") == rid)["step"].unique().to_list() == [0]


def test_the_prompt_reader_answers_from_the_summary_as_from_the_rollouts(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("r", {}, seed=0)
        gen = SyntheticRun(rid, SMALL, seed=5)
        st.write_steps([gen.step(s) for s in range(6)])
        for lo, hi, to_date in ((2, 4, True), (2, 4, False), (0, 5, True), (5, 5, True)):
            _same(st.prompt_outcomes(rid, lo, hi, to_date=to_date).sort("prompt_id"),
                  st.rollout_outcomes(rid, lo, hi, to_date=to_date).sort("prompt_id"))
        # a summarised row without a stored verdict: the run's rule judges the reward, from the rollouts
        old = st.create_run("no-verdicts", {"correctness": {"rule": "reward>=0.25"}}, seed=0)
        st.write_step(StepRecord(old, 0, {"rollout/count": 5}, _rows(1)))
        read = st.prompt_outcomes(old, 0, 0).sort("prompt_id")
        assert read.to_dicts() == st.rollout_outcomes(old, 0, 0).sort("prompt_id").to_dicts()
    assert read["correct"].to_list() == [1, 1]  # p1's unjudged reward 1.0 counts under the rule
