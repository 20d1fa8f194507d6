"""`Store.write_steps`: several whole steps in ONE transaction, all-or-nothing, checked up front."""

from __future__ import annotations


import pyarrow as pa
import pytest

from workbench.errors import DataError, StoreError
from workbench.store import StepRecord
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL, polled_counts


def _snapshot(store) -> int:
    return int(store._lake.read("SELECT max(snapshot_id) AS s FROM ducklake_snapshots('lake')")["s"][0])


def _records(run_id, steps, seed=1):
    syn = SyntheticRun(run_id, SMALL, seed=seed)
    return [syn.step(i) for i in steps]


def test_batch_is_one_snapshot_and_round_trips(store):
    run_id = store.create_run("batch", {}, seed=1)
    records = _records(run_id, range(5))
    before = _snapshot(store)
    store.write_steps(records)
    after = _snapshot(store)
    assert after == before + 1  # one commit for five steps
    assert store.run_steps(run_id)["step"].to_list() == [0, 1, 2, 3, 4]
    assert store.count_rollouts(run_id) == 5 * SMALL.rollouts_per_step
    got = store.rollouts(run_id, step_min=3, step_max=3, limit=100)
    want = records[3].rollouts.sort_by([("prompt_id", "ascending"), ("idx", "ascending")])
    assert got["token_ids"].to_list() == want.column("token_ids").to_pylist()
    assert store.allocations(run_id)["step"].unique().sort().to_list() == [0, 1, 2, 3, 4]
    # the snapshot before the commit holds none of it
    old = store._lake.read(f"SELECT count(*) AS n FROM rollouts AT (VERSION => {before}) WHERE run_id = ?",
                           [run_id])["n"][0]
    assert old == 0


def test_write_step_is_a_batch_of_one(store):
    run_id = store.create_run("one", {}, seed=1)
    before = _snapshot(store)
    store.write_step(_records(run_id, [0])[0])
    assert _snapshot(store) == before + 1
    assert store.count_rollouts(run_id) == SMALL.rollouts_per_step


def test_batch_of_several_runs_and_mixed_columns(store):
    a = store.create_run("a", {}, seed=1)
    b = store.create_run("b", {}, seed=2)
    ra = _records(a, [0, 1])
    rb = _records(b, [0])
    # one step's rollouts carry run_id and step as columns, the others leave them to the writer
    t = rb[0].rollouts
    rb[0].rollouts = t.append_column("run_id", pa.array([b] * t.num_rows)).append_column(
        "step", pa.array([0] * t.num_rows, pa.int32()))
    dicts = [{"prompt_id": "px", "idx": 0, "response": "hi", "reward": 1.0}]
    rc = StepRecord(a, 2, {"train/loss": 0.5}, dicts, prompts=[{"prompt_id": "px", "text": "q"}],
                    events=[{"level": "info", "kind": "note", "message": "m"}])
    store.write_steps(ra + rb + [rc])
    assert store.run_steps(a)["step"].to_list() == [0, 1, 2]
    assert store.run_steps(b)["step"].to_list() == [0]
    counts = store._lake.read("SELECT run_id, step, count(*) AS n FROM rollouts GROUP BY ALL ORDER BY ALL")
    assert counts.rows() == [(a, 0, 16), (a, 1, 16), (a, 2, 1), (b, 0, 16)]
    assert store.count_rollouts(b) == 16
    assert store.events(a)["kind"].to_list() == ["note"]


def test_prompt_listed_by_two_steps_of_a_batch_is_stored_once(store):
    run_id = store.create_run("p", {}, seed=1)
    prompts = [{"prompt_id": "p1", "text": "1+1", "answer": "2"}]
    store.write_steps([StepRecord(run_id, 0, {}, [], prompts=prompts),
                       StepRecord(run_id, 1, {}, [], prompts=prompts)])
    n = store._lake.read("SELECT count(*) AS n FROM prompts WHERE run_id = ?", [run_id])["n"][0]
    assert n == 1


def test_duplicate_in_batch_refused_nothing_written(store):
    run_id = store.create_run("dup", {}, seed=1)
    records = _records(run_id, [0, 1])
    before = _snapshot(store)
    with pytest.raises(DataError, match="step 1 of run .* given twice"):
        store.write_steps(records + [records[1]])
    assert _snapshot(store) == before
    assert store.run_steps(run_id).height == 0
    assert store.count_rollouts(run_id) == 0


def test_step_already_stored_refuses_whole_batch(store):
    run_id = store.create_run("dup", {}, seed=1)
    records = _records(run_id, range(4))
    store.write_steps(records[:2])
    before = _snapshot(store)
    with pytest.raises(StoreError, match="step 1 .* already in the store"):
        store.write_steps(records[2:] + [records[1]])
    assert _snapshot(store) == before
    assert store.run_steps(run_id)["step"].to_list() == [0, 1]
    # a fresh process (no tracked last step) refuses it too
    store._last_step.clear()
    with pytest.raises(StoreError, match="step 0 .* already in the store"):
        store.write_steps([records[0], records[3]])
    assert store.count_rollouts(run_id) == 2 * SMALL.rollouts_per_step
    store.write_steps(records[2:])
    assert store.run_steps(run_id)["step"].to_list() == [0, 1, 2, 3]


def test_bad_row_anywhere_refuses_whole_batch(store):
    run_id = store.create_run("bad", {}, seed=1)
    records = _records(run_id, range(3))
    records[2].allocations = [{"granted_typo": 1}]
    with pytest.raises(DataError, match="allocations row 0: unknown column"):
        store.write_steps(records)
    assert store.run_steps(run_id).height == 0
    with pytest.raises(DataError, match="record 1 is a dict"):
        store.write_steps([records[0], {"step": 1}])
    assert store.count_rollouts(run_id) == 0


def test_reader_sees_all_of_a_batch_or_none(store):
    run_id = store.create_run("atomic", {}, seed=1)
    batches = [_records(run_id, range(i * 4, i * 4 + 4), seed=i) for i in range(6)]
    per_batch = 4 * SMALL.rollouts_per_step
    with polled_counts(store, run_id) as seen:
        for batch in batches:
            store.write_steps(batch)
    assert seen
    for rollouts, steps in seen:
        assert rollouts % per_batch == 0 and steps % 4 == 0 and rollouts == steps * SMALL.rollouts_per_step
