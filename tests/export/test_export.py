"""`workbench export`: the three sets on a run logged through the SDK, their card, and refusals."""

from __future__ import annotations

import json

import datasets
import pytest

import workbench
from workbench.errors import DataError, StoreError
from workbench.export import export_run
from workbench.store import open_store


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Two steps; prompt A: rewards 1, 1 (the same text twice), 0.75, 0; prompt B: all wrong."""
    path = tmp_path_factory.mktemp("export") / "store"
    run = workbench.init(store=path, name="exp", config={"lr": 0.1}, heartbeat_s=0)
    for step in range(2):
        run.log_rollouts(step, prompts=["A"] * 4 + ["B"] * 2,
                         responses=["same", "same", f"other{step}", "bad", "b1", "b2"],
                         rewards=[1.0, 1.0, 0.75, 0.0, 0.0, 0.25], answers=["4"] * 4 + ["5"] * 2,
                         token_ids=[[1, 2]] * 6, token_logprobs=[[-0.5, -0.25]] * 6)
    run.finish()
    store = open_store(path, read_only=True)
    yield store, run.run_id
    store.close()


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_set_is_the_selection_in_chat_form(logged, tmp_path):
    store, run_id = logged
    card = export_run(store, run_id, tmp_path / "sft", fmt="both", filters={"step_min": 1})
    rows = _jsonl(tmp_path / "sft" / "data.jsonl")
    assert card["counts"] == {"rows": 6, "correct": 3, "steps": [1, 1]} and len(rows) == 6
    first = next(r for r in rows if r["response"] == "other1")
    assert first["messages"] == [{"role": "user", "content": "A"}, {"role": "assistant", "content": "other1"}]
    assert first["answer"] == "4" and first["token_ids"] == [1, 2] and first["correct"] is True
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "sft" / "data.parquet"), split="train")
    assert ds.num_rows == 6 and ds[0]["messages"][0]["role"] == "user"
    saved = json.loads((tmp_path / "sft" / "card.json").read_text())
    assert saved["source"]["run_id"] == run_id and saved["source"]["config"]["trainer"] == {"lr": 0.1}
    assert saved["selection"]["filters"] == {"step_min": 1} and "--map" in saved["reimport"]


def test_rejection_keeps_the_best_k_correct_once_each(logged, tmp_path):
    store, run_id = logged
    card = export_run(store, run_id, tmp_path / "rej", kind="rejection", k=3)
    rows = _jsonl(tmp_path / "rej" / "data.jsonl")
    # prompt A's correct responses: "same" (4 times, kept once), other0, other1; B has none correct
    assert sorted(r["response"] for r in rows) == ["other0", "other1", "same"]
    assert card["counts"]["rows"] == 3
    export_run(store, run_id, tmp_path / "rej1", kind="rejection", k=1)
    assert [r["response"] for r in _jsonl(tmp_path / "rej1" / "data.jsonl")] == ["same"]


def test_pairs_join_a_correct_and_a_wrong_response_of_one_group(logged, tmp_path):
    store, run_id = logged
    export_run(store, run_id, tmp_path / "pairs", kind="pairs", k=2)
    rows = _jsonl(tmp_path / "pairs" / "data.jsonl")
    assert len(rows) == 2  # per step, prompt A: one wrong response, so one pair; prompt B: none correct
    for row in rows:
        assert row["prompt"] == [{"role": "user", "content": "A"}]
        assert row["chosen"][0]["content"] == "same" and row["rejected"][0]["content"] == "bad"
        assert row["chosen_reward"] > row["rejected_reward"]


def test_refusals_name_the_problem(logged, tmp_path):
    store, run_id = logged
    export_run(store, run_id, tmp_path / "full")
    with pytest.raises(DataError, match="not empty; pick another folder or pass --overwrite"):
        export_run(store, run_id, tmp_path / "full")
    assert export_run(store, run_id, tmp_path / "full", overwrite=True, fmt="parquet")["counts"]["rows"] == 12
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["README.md", "card.json", "data.parquet"]
    with pytest.raises(DataError, match="tool-error"):
        export_run(store, run_id, tmp_path / "t", tool_error=True)
    with pytest.raises(DataError, match="no ';'"):
        export_run(store, run_id, tmp_path / "s", sql="true; DROP TABLE rollouts")
    with pytest.raises(DataError, match="export kind 'dpo'"):
        export_run(store, run_id, tmp_path / "k", kind="dpo")
    with pytest.raises(StoreError, match="unknown run"):
        export_run(store, "nope", tmp_path / "r")
    assert export_run(store, run_id, tmp_path / "sql", sql="reward > 0.5 AND step = 0")["counts"]["rows"] == 3


@pytest.mark.parametrize("kind", ["sft", "rejection", "pairs"])
@pytest.mark.parametrize("sql", [None, "false"])
def test_parquet_holds_the_rows_and_counts_of_the_jsonl(logged, tmp_path, kind, sql):
    """The two writers (DuckDB's JSON COPY; Arrow batches into pyarrow's Parquet writer, counted as they
    stream) give the same rows and the same card counts, an empty selection included."""
    import pyarrow.parquet as pq

    store, run_id = logged
    card = export_run(store, run_id, tmp_path / kind, kind=kind, fmt="both", k=2, sql=sql)
    rows = _jsonl(tmp_path / kind / "data.jsonl")
    table = pq.read_table(tmp_path / kind / "data.parquet")
    assert card["files"]["data.jsonl"]["rows"] == card["files"]["data.parquet"]["rows"] == len(rows) == table.num_rows
    assert (len(rows) == 0) == (sql == "false")
    key = (lambda r: (r["step"], r["chosen_idx"], r["rejected_idx"])) if kind == "pairs" else (lambda r: (r["step"], r["idx"]))
    assert sorted(rows, key=key) == sorted(table.to_pylist(), key=key)
    if rows:
        steps = [r["step"] for r in rows]
        assert card["counts"]["steps"] == [min(steps), max(steps)]
        if kind != "pairs":
            assert card["counts"]["correct"] == sum(r["correct"] for r in rows)
