"""Schema 15 -> 16 (issue #41): the decisions of allocation inside episodes move from eight columns of their
own into rollouts.decision; every value written before is kept and read back under its name, the eight
columns are gone, and a reason the map cannot hold stops the migration with nothing changed."""

from __future__ import annotations

import math

import pytest

from workbench.errors import DataError, StoreError
from workbench.store import StepRecord, open_store, schema
from workbench.store.records import decision_array

OLD = (("filter_penalty", "FLOAT"), ("filter_reason", "VARCHAR"), ("branch_entropy_before", "FLOAT"),
       ("branch_entropy_after", "FLOAT"), ("branch_draw", "FLOAT"), ("branch_rounds", "INTEGER"),
       ("branch_split", "INTEGER"), ("branch_split_dh", "FLOAT"))
ROWS = [  # idx -> the schema-15 columns set in that row (the rest null)
    {},
    {"filter_penalty": 0.5, "filter_reason": "wrong_not_sampled"},
    {"filter_penalty": 0.0, "filter_reason": "whole_group"},
    {"branch_entropy_before": 0.3125, "branch_entropy_after": 0.75, "branch_draw": 0.21875},
    {"branch_entropy_before": 1.0, "branch_entropy_after": 0.5, "branch_draw": 0.875, "branch_rounds": 2,
     "branch_split": 5, "branch_split_dh": -0.25, "filter_penalty": 1.5, "filter_reason": "correct_high_penalty"},
]
KEPT = [None, False, True, None, False]


def _schema_15_store(path, rows=ROWS, kept=KEPT) -> str:
    """A store as schema 15 wrote it: the eight decision columns, no `decision`, rows in them."""
    with open_store(path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "x", "reward": 0.0, "length": 1}]))

        def as_schema_15(cur):
            cur.execute("ALTER TABLE rollouts DROP COLUMN decision")
            for name, typ in OLD:
                cur.execute(f"ALTER TABLE rollouts ADD COLUMN {name} {typ}")
            for i, (row, k) in enumerate(zip(rows, kept)):
                names = ["run_id", "step", "stage", "prompt_id", "idx", "filter_kept", *row]
                cur.execute(f"INSERT INTO rollouts ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                            [rid, 2, 0, "p", i, k, *row.values()])
            cur.execute("UPDATE meta SET value = '15' WHERE key = 'schema_version'")

        st._lake.write(as_schema_15, "a store as schema 15 left it")
    return rid


def test_a_schema_15_store_keeps_every_decision_under_its_name(tmp_path):
    rid = _schema_15_store(tmp_path)
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 16
        stored = set(st._lake.read("DESCRIBE rollouts")["column_name"].to_list())
        assert "decision" in stored and not stored & {name for name, _ in OLD}
        rows = st.rollouts(rid, step_min=2, limit=10).sort("idx")
        assert rows["filter_kept"].to_list() == KEPT
        for name, _ in OLD:
            assert rows[name].to_list() == [r.get(name) for r in ROWS], name
        assert rows["branch_rounds"].dtype.is_integer() and rows["filter_reason"].dtype == rows["response"].dtype
        raw = st._lake.read("SELECT idx, decision FROM rollouts WHERE step = 2 ORDER BY idx")["decision"].to_list()
        assert raw[0] is None  # a row without a decision has no map, not an empty one
        assert raw[1] == {"penalty": 0.5, "reason": 4.0}  # the reason by its index in FILTER_REASONS
        # the named fields, picked one at a time
        picked = st.rollouts(rid, step_min=2, columns=["branch_split", "filter_reason"], limit=10)
        assert picked.columns == ["branch_split", "filter_reason"]  # in the stable order, by idx
        assert picked["filter_reason"].to_list() == [r.get("filter_reason") for r in ROWS]


def test_a_reason_the_map_cannot_hold_stops_the_migration_and_loses_nothing(tmp_path):
    rows = [{"filter_penalty": 0.5, "filter_reason": "hand_picked"}]
    _schema_15_store(tmp_path, rows, [True])
    with pytest.raises(StoreError, match=r"hand_picked.*step 2.*nothing was migrated"):
        open_store(tmp_path)
    import duckdb  # the store as it was, read past the workbench: schema 15, the row and its columns

    con = duckdb.connect()
    con.execute("LOAD ducklake; LOAD sqlite")
    con.execute(f"ATTACH 'ducklake:sqlite:{tmp_path / 'catalog.sqlite'}' AS old (DATA_PATH '{tmp_path / 'data'}', "
                "READ_ONLY)")
    assert con.execute("SELECT value FROM old.meta WHERE key = 'schema_version'").fetchone()[0] == "15"
    assert con.execute("SELECT filter_reason, filter_penalty FROM old.rollouts WHERE step = 2").fetchall() == [
        ("hand_picked", 0.5)]


def test_rows_name_their_decisions_or_give_the_map_and_a_bad_one_is_named(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("new", {}, seed=0)
        base = {"stage": 0, "prompt_id": "p", "response": "x", "reward": 0.0, "length": 1}
        st.write_step(StepRecord(rid, 1, {"rollout/count": 2}, [
            {**base, "idx": 0, "filter_kept": True, "filter_reason": "correct_low_penalty", "filter_penalty": 0.0},
            {**base, "idx": 1, "decision": {"draw": 0.5, "entropy_after": 0.25}}]))
        rows = st.rollouts(rid).sort("idx")
        assert rows["filter_reason"].to_list() == ["correct_low_penalty", None]
        assert rows["branch_draw"].to_list() == [None, 0.5]
        with pytest.raises(DataError, match=r"row 1: filter_reason 'kept_by_hand'"):
            st.write_step(StepRecord(rid, 2, {"rollout/count": 2}, [
                {**base, "idx": 0}, {**base, "idx": 1, "filter_reason": "kept_by_hand"}]))
        with pytest.raises(DataError, match=r"row 0: gives both decision and \['branch_draw'\]"):
            st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
                {**base, "idx": 0, "branch_draw": 0.5, "decision": {"draw": 0.5}}]))
        assert st.count_rollouts(rid) == 2  # nothing of the refused steps went in


def test_the_map_holds_each_row_s_decided_keys_in_one_pass():
    nan = math.nan
    got = decision_array({"filter_penalty": [0.5, None, 1.0, nan], "branch_draw": [nan, nan, 0.25, None],
                          "filter_reason": ["wrong_sampled", None, None, None], "branch_rounds": [None, 3, None, None]},
                         4).to_pylist()
    assert got == [[("penalty", 0.5), ("reason", 3.0)], [("rounds", 3.0)], [("penalty", 1.0), ("draw", 0.25)], None]
    assert decision_array({}, 2).to_pylist() == [None, None]
