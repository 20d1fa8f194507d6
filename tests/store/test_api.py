"""The Store API: write a step, read it back through every reader, controls, rollback, schema."""

from __future__ import annotations

import pyarrow as pa
import pytest

from workbench.errors import DataError, StoreError
from workbench.store import StepRecord, open_store, schema
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL


def test_write_step_round_trip(filled):
    store, run_id, records = filled
    steps = store.run_steps(run_id)
    assert steps["step"].to_list() == [0, 1, 2]
    assert steps["rollouts"].to_list() == [16, 16, 16]
    metrics = dict(steps["metrics"][0])
    assert metrics["train/loss"] == pytest.approx(records[0].metrics["train/loss"])
    assert steps["loss"][0] == pytest.approx(records[0].metrics["train/loss"])
    assert steps["allocator"][0] == "uniform"
    page = store.rollouts(run_id, limit=100)
    assert page.height == 48
    first = records[0].rollouts.sort_by([("prompt_id", "ascending"), ("idx", "ascending")])
    got = page.filter(page["step"] == 0)
    assert got["token_ids"].to_list() == first.column("token_ids").to_pylist()
    assert got["token_entropy"][0].to_list() == pytest.approx(first.column("token_entropy")[0].as_py())
    assert store.count_rollouts(run_id) == 48
    assert store.allocations(run_id, step=1).height == 4
    assert store.prompt_stats(run_id).height == 12


def test_rollout_filters_paging_and_order(filled):
    store, run_id, _ = filled
    everything = store.rollouts(run_id, limit=1000)
    keys = everything.select(["step", "stage", "prompt_id", "idx"]).rows()
    assert keys == sorted(keys)
    pages = [store.rollouts(run_id, limit=10, offset=o) for o in range(0, 48, 10)]
    assert sum((p.select(["step", "stage", "prompt_id", "idx"]).rows() for p in pages), []) == keys
    correct = store.rollouts(run_id, verdict="correct", limit=1000)
    assert set(correct["reward"].to_list()) <= {1.0}
    assert store.count_rollouts(run_id, verdict="correct") == correct.height
    window = store.rollouts(run_id, step_min=1, step_max=1, entropy_min=0.1, entropy_max=0.5, limit=1000)
    assert set(window["step"].to_list()) <= {1}
    assert all(0.1 <= e <= 0.5 for e in window["entropy_mean"].to_list())
    some = store.rollouts(run_id, columns=["reward", "prompt_id"], limit=3)
    assert some.columns == ["reward", "prompt_id"]
    with pytest.raises(DataError, match="bogus"):
        store.rollouts(run_id, bogus=1)
    with pytest.raises(DataError, match="nope"):
        store.rollouts(run_id, columns=["nope"])


@pytest.mark.parametrize("filters", [{}, {"verdict": "correct", "step_min": 1}])
def test_every_page_is_the_plain_order_by_limit_offset(filled, filters):
    """The step-window paging returns exactly what ORDER BY ... LIMIT ... OFFSET over the run does,
    at every offset and limit, pages crossing step boundaries and past the end included."""
    store, run_id, _ = filled
    keys = ["step", "stage", "prompt_id", "idx"]
    where = " AND ".join(["run_id = ?"] + [{"verdict": "verdict = ?", "step_min": "step >= ?",
                                             "step_max": "step <= ?"}[k] for k in filters])
    total = store.count_rollouts(run_id, **filters)
    for limit in (0, 7, 17):
        for offset in sorted({0, 15, 17, max(total - 2, 0), total + 5}):
            want = store.sql(f"SELECT step, stage, prompt_id, idx FROM rollouts WHERE {where} "
                             "ORDER BY step, stage, prompt_id, idx LIMIT ? OFFSET ?",
                             [run_id, *filters.values(), limit, offset])
            got = store.rollouts(run_id, limit=limit, offset=offset, **filters)
            assert got.select(keys).rows() == want.rows(), (limit, offset)


def test_filter_values_are_bound_not_spliced(filled):
    store, run_id, _ = filled
    assert store.rollouts(run_id, prompt_id="x' OR '1'='1").height == 0
    assert store.rollouts("x' OR '1'='1").height == 0


def test_prompt_history_joins_allocations_and_stats(filled):
    store, run_id, records = filled
    prompt_id = records[1].allocations[0]["prompt_id"]
    history = store.prompt_history(run_id, prompt_id)
    seen = [i for i, r in enumerate(records) if any(a["prompt_id"] == prompt_id for a in r.allocations)]
    assert history["step"].to_list() == seen
    assert history["granted"].to_list() == [4] * len(seen)
    assert history["alpha"].null_count() == 0


def test_duplicate_step_refused_and_rollback(filled):
    store, run_id, records = filled
    with pytest.raises(StoreError, match="step 2 .* already"):
        store.write_step(records[2])
    store.add_event(run_id, "info", "checkpoint", "saved", step=2)
    store.rollback_run(run_id, 0)
    assert store.run_steps(run_id)["step"].to_list() == [0]
    assert store.count_rollouts(run_id) == 16
    assert store.allocations(run_id)["step"].unique().to_list() == [0]
    events = store.events(run_id)
    assert events.filter(events["step"] == 2)["rolled_back"].to_list() == [True]
    store.write_step(records[1])  # the step can be written again after the rollback
    assert store.run_steps(run_id)["step"].to_list() == [0, 1]


def test_runs_status_heartbeat(store):
    run_id = store.create_run("my run/1", {"a": [1, 2]}, seed=3, code_version="abc")
    assert run_id.startswith("my-run-1-")
    store.set_run_status(run_id, "running", pid=123)
    store.heartbeat(run_id)
    row = store.run(run_id)
    assert row["status"] == "running" and row["pid"] == 123 and row["config"] == {"a": [1, 2]}
    assert row["heartbeat_at"] >= row["created_at"]
    store.set_run_status(run_id, "failed", error="boom")
    assert store.run(run_id)["error"] == "boom"
    assert store.list_runs()["run_id"].to_list() == [run_id]
    with pytest.raises(DataError, match="status 'weird'"):
        store.set_run_status(run_id, "weird")
    with pytest.raises(StoreError, match="unknown run 'nope'"):
        store.set_run_status("nope", "running")
    with pytest.raises(StoreError, match="unknown run"):
        store.run("nope")


def test_controls_lifecycle(store):
    run_id = store.create_run("c", {}, seed=0)
    first = store.add_control(run_id, "pause", {}, who="dashboard")
    second = store.add_control(run_id, "set_budget", {"rollouts": 256})
    assert second == first + 1
    pending = store.pending_controls(run_id)
    assert [p["control_id"] for p in pending] == [first, second]
    assert pending[1]["args"] == {"rollouts": 256}
    store.resolve_control(first, "applied", step=4)
    store.resolve_control(second, "rejected", reason="budget below group size")
    assert store.pending_controls(run_id) == []
    table = store.controls(run_id)
    assert table["status"].to_list() == ["applied", "rejected"]
    assert table["applied_step"].to_list() == [4, None]
    with pytest.raises(StoreError, match="already applied"):
        store.resolve_control(first, "rejected")
    with pytest.raises(StoreError, match="unknown control 999"):
        store.resolve_control(999, "applied")



def test_reads_of_an_empty_table_answer_its_empty_frame_until_a_row_lands(store, tmp_path):
    """controls/events/alerts are read with `read_sparse`: the empty answer keeps the query's columns
    and types, and a row written since (by this handle or another process's) is seen at once."""
    run_id = store.create_run("c", {}, seed=0)
    first = store.controls(run_id)
    again = store.controls(run_id)  # answered from the probe: no row in the table
    assert again.is_empty() and again.schema == first.schema and "control_id" in again.columns
    assert any("FROM controls" in query for query in store._lake._empty)  # the probe answers it
    assert store.events(run_id).schema == store.events(run_id).schema
    assert store.alerts(run_id).is_empty()
    with open_store(tmp_path / "store") as other:  # a writer on another handle
        other.add_control(run_id, "pause", {})
        other.add_event(run_id, "info", "note", "hello")
    assert store.controls(run_id)["command"].to_list() == ["pause"]
    assert not any("FROM controls" in query for query in store._lake._empty)
    assert store.events(run_id)["message"].to_list() == ["hello"]
    assert store.controls("another-run").is_empty()  # the table has rows now: the query runs

def test_rows_checked_against_schema(store):
    run_id = store.create_run("bad", {}, seed=0)
    table = pa.table({"prompt_id": ["a"], "idx": [0], "rewrd": [1.0]})
    with pytest.raises(DataError, match="rewrd"):
        store.write_step(StepRecord(run_id, 0, {}, table))
    with pytest.raises(DataError, match="allocations row 0.*granted_typo"):
        store.write_step(StepRecord(run_id, 0, {}, [], allocations=[{"granted_typo": 1}]))
    with pytest.raises(DataError, match="metric 'note'"):
        store.write_step(StepRecord(run_id, 0, {"note": "hi"}, []))
    assert store.run_steps(run_id).height == 0


def test_rollouts_as_list_of_dicts_and_prompts(store):
    run_id = store.create_run("dicts", {}, seed=0)
    rows = [{"prompt_id": "q1", "idx": i, "stage": 0, "token_ids": [1, 2, i], "reward": float(i % 2),
             "response": f"r{i}"} for i in range(3)]
    prompts = [{"prompt_id": "q1", "text": "1+1=", "answer": "2", "level": 1, "metadata": {"src": "t"}}]
    store.write_step(StepRecord(run_id, 0, {"train/loss": 1.0}, rows, prompts=prompts))
    store.write_step(StepRecord(run_id, 1, {}, [], prompts=prompts))  # the same prompt is not stored twice
    assert store.rollouts(run_id)["token_ids"].to_list() == [[1, 2, 0], [1, 2, 1], [1, 2, 2]]
    assert store.prompts(run_id)["text"].to_list() == ["1+1="]
    store.write_evals(run_id, 1, [{"prompt_id": "q1", "samples": 8, "correct": 3}])
    assert store.evals(run_id)["correct"].to_list() == [3]


def test_sql_is_read_only(filled):
    store, run_id, _ = filled
    out = store.sql("SELECT count(*) AS n FROM rollouts WHERE run_id = ?", [run_id])
    assert out["n"][0] == 48
    for statement in ["DELETE FROM rollouts", "INSERT INTO meta VALUES ('a', 'b')", "DROP TABLE runs",
                      "COPY rollouts TO 'x.csv'", "ATTACH ':memory:' AS m", "CALL ducklake_expire_snapshots('lake')",
                      "SELECT 1; DELETE FROM runs", "UPDATE runs SET status = 'x'"]:
        with pytest.raises(StoreError):
            store.sql(statement)
    with pytest.raises(StoreError):  # a SELECT that calls a writing table function hits the read-only attachment
        store.sql("SELECT * FROM ducklake_expire_snapshots('lake', older_than => now())")
    assert store.count_rollouts(run_id) == 48


def test_newer_schema_refused_older_migrated(tmp_path, monkeypatch):
    path = tmp_path / "s"
    with open_store(path) as s:
        s._lake.write(lambda cur: cur.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'"), "t")
    with pytest.raises(StoreError, match="schema version 99, newer"):
        open_store(path)
    with open_store(tmp_path / "old") as s:
        assert s.schema_version == schema.SCHEMA_VERSION
    # a next version that adds a column: opening the old store migrates it
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    monkeypatch.setitem(schema.MIGRATIONS, schema.SCHEMA_VERSION - 1,
                        ("add runs.note", ["ALTER TABLE runs ADD COLUMN note VARCHAR"]))
    with open_store(tmp_path / "old") as s:
        assert s.schema_version == schema.SCHEMA_VERSION
        assert "note" in s.list_runs().columns


def test_read_only_store_refuses_writes(filled, tmp_path):
    store, run_id, _ = filled
    with open_store(store.location.root, read_only=True) as ro:
        assert ro.count_rollouts(run_id) == 48
        with pytest.raises(StoreError, match="read-only"):
            ro.heartbeat(run_id)


def test_reopen_keeps_data(tmp_path):
    path = tmp_path / "s"
    with open_store(path) as s:
        run_id = s.create_run("x", {}, seed=0)
        s.write_step(SyntheticRun(run_id, SMALL).step(0))
    with open_store(path) as s:
        assert s.count_rollouts(run_id) == 16


def test_threads_option_caps_duckdb_threads(tmp_path):
    with open_store(str(tmp_path / "s"), threads=1) as st:
        assert st.sql("SELECT current_setting('threads') AS t")["t"][0] == 1
        run_id = st.create_run("t", {}, seed=0)
        assert st.run(run_id)["name"] == "t"
    for bad in (0, -2, 1.5, True):
        with pytest.raises(StoreError, match="threads"):
            open_store(str(tmp_path / "s"), threads=bad)


def test_second_store_in_one_process_keeps_the_first_working(tmp_path):
    """Opening and closing another Store on the same directory while the first commits on a thread
    (the engine's background writer vs its control hooks, a dashboard, a test) must not drop the
    first one's SQLite locks ("disk I/O error")."""
    import threading

    errors: list[BaseException] = []
    with open_store(str(tmp_path / "s")) as first:
        run_id = first.create_run("a", {}, seed=0)
        run = SyntheticRun(run_id, SMALL, seed=3)

        def write() -> None:
            try:
                for step in range(1, 13):
                    first.write_step(run.step(step))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        t = threading.Thread(target=write)
        t.start()
        while t.is_alive():
            with open_store(str(tmp_path / "s")) as other:
                other.add_control(run_id, "pause", {})
        t.join()
        assert not errors, errors[0]
        assert first.run_steps(run_id)["step"].to_list() == list(range(1, 13))
