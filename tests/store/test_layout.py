"""The store's file layout (sorted tables) and the migration of a store from before it: a real schema-1
store (tables created with the schema-1 column lists) opens as the current schema with its rows kept."""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa

from workbench.store import StepRecord, open_store, schema
from workbench.store.connection import Lake, local_location
from workbench.store.maintenance import compact
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL

# columns added by the migrations (1 -> 2: runs.source, rollouts.worker, rollouts.token_logprobs; later
# ones too): a schema-1 store lacks them
_V2_COLUMNS: dict[str, set[str]] = {}
for _, _statements in schema.MIGRATIONS.values():
    for _sql in _statements if isinstance(_statements, list) else []:
        if _m := re.match(r"ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+)", _sql):
            _V2_COLUMNS.setdefault(_m.group(1), set()).add(_m.group(2))


def _data_files(store, table: str) -> list[str]:
    return store._lake.read(f"SELECT data_file FROM ducklake_list_files('lake', '{table}')")["data_file"].to_list()


def _file_rows(store, path: str, columns: str) -> list[tuple]:
    return store._lake.read(f"SELECT {columns} FROM read_parquet(?)", [path]).rows()


def test_rollouts_are_written_sorted_by_the_page_order(store):
    run_id = store.create_run("sorted", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    records = [syn.step(s) for s in (1, 0)]  # steps out of order, prompts in sampling order
    for r in records:
        r.rollouts = r.rollouts.take(pa.array(range(r.rollouts.num_rows - 1, -1, -1)))  # reversed
    store.write_steps(records)
    files = _data_files(store, "rollouts")
    assert len(files) == 1
    rows = _file_rows(store, files[0], "step, stage, prompt_id, idx")
    assert rows == sorted(rows)
    assert [r[0] for r in rows] == [0] * 16 + [1] * 16


def test_compaction_sorts_prompt_stats_by_prompt_and_allocations_by_step(store):
    run_id = store.create_run("alloc", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    for s in range(6):
        store.write_step(syn.step(s))
    compact(store, older_than_s=0)
    files = _data_files(store, "prompt_stats")
    assert len(files) == 1
    rows = _file_rows(store, files[0], "prompt_id, step")
    assert len(rows) == 6 * SMALL.prompts_per_step and rows == sorted(rows)
    (alloc,) = _data_files(store, "allocations")
    rows = _file_rows(store, alloc, "step, stage, prompt_id")
    assert len(rows) == 6 * SMALL.prompts_per_step and rows == sorted(rows)
    history = store.prompt_history(run_id, rows[0][2])
    assert history["step"].to_list() == sorted(history["step"].to_list()) and history.height >= 1


def _create_schema_1(path) -> None:
    """A store exactly as workbench with schema 1 created it (its column lists, its options)."""
    lake = Lake(local_location(path, create=True))
    try:
        def create(cur: duckdb.DuckDBPyConnection) -> None:
            for table, cols in schema.TABLES.items():
                keep = [f"{n} {t}" for n, t in cols if n not in _V2_COLUMNS.get(table, set())]
                cur.execute(f"CREATE TABLE {table} ({', '.join(keep)})")

        def fill(cur: duckdb.DuckDBPyConnection) -> None:
            for table, limit in schema.INLINE_ROW_LIMIT.items():
                cur.execute(f"CALL lake.set_option('data_inlining_row_limit', {limit}, table_name => '{table}')")
            cur.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('created_by', 'workbench')")
            cur.execute("INSERT INTO runs (run_id, name, status, seed, config) VALUES ('old-run', 'old', "
                        "'finished', 3, '{\"lr\": 0.1}')")
            cur.execute("INSERT INTO steps (run_id, step, loss) VALUES ('old-run', 0, 1.5), ('old-run', 1, 1.25)")
            cur.execute("INSERT INTO rollouts (run_id, step, stage, prompt_id, idx, response, token_ids, reward) "
                        "SELECT 'old-run', i // 8, 0, 'p' || (i % 4), i % 8, 'r' || i, [i, i + 1], (i % 2)::FLOAT "
                        "FROM range(16) t(i)")

        lake.write(create, "create a schema-1 store")
        lake.write(fill, "fill it")
    finally:
        lake.close()


def test_a_schema_1_store_migrates_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old"
    _create_schema_1(path)
    with open_store(path) as store:
        assert store.schema_version == schema.SCHEMA_VERSION
        assert store.run("old-run")["config"] == {"lr": 0.1}
        assert store.run("old-run")["source"] is None
        assert store.run_steps("old-run")["loss"].to_list() == [1.5, 1.25]
        page = store.rollouts("old-run", limit=100)
        assert page.height == 16 and page["worker"].null_count() == 16
        assert page["token_ids"].to_list()[:3] == [[0, 1], [4, 5], [1, 2]]  # (step, stage, prompt_id, idx) order
        # the migrated store takes new steps with the new columns, sorted as a new store's
        rows = pa.table({"prompt_id": ["b", "a"], "idx": [0, 0], "worker": ["ray-1", "ray-0"],
                         "token_logprobs": pa.array([[-0.5], [-0.25]], pa.list_(pa.float32()))})
        store.write_step(StepRecord("old-run", 2, {"train/loss": 1.0}, rows))
        got = store.rollouts("old-run", step_min=2, limit=10)
        assert got["worker"].to_list() == ["ray-0", "ray-1"]
    with open_store(path) as again:  # the migration ran once; a second open changes nothing
        assert again.schema_version == schema.SCHEMA_VERSION
        assert again.count_rollouts("old-run") == 18


def test_migration_sorts_new_files_of_an_old_store(tmp_path):
    path = tmp_path / "old"
    _create_schema_1(path)
    with open_store(path) as store:
        rows = pa.table({"prompt_id": ["z", "m", "a"], "idx": [2, 1, 0]})
        store.write_step(StepRecord("old-run", 5, {}, rows))
        store.write_step(StepRecord("old-run", 6, {}, rows))
        compact(store, older_than_s=0)
        # files written before the migration added columns keep their order (DuckLake merges files
        # of one table schema only); the new steps' file is sorted
        total = 0
        for path_ in _data_files(store, "rollouts"):
            got = _file_rows(store, path_, "step, stage, prompt_id, idx")
            total += len(got)
            if any(r[0] >= 5 for r in got):
                assert got == sorted(got) and len(got) == 6
        assert total == 22 and store.count_rollouts("old-run") == 22


def _encodings(store, path: str) -> dict[str, str]:
    frame = store._lake.read("SELECT path_in_schema, encodings FROM parquet_metadata(?)", [path])
    return dict(zip(frame["path_in_schema"].to_list(), frame["encodings"].to_list()))


def test_data_files_use_parquet_2_encodings(store):
    """Entropy floats byte-stream-split, token ids delta-coded (the smaller, faster-to-write layout)."""
    run_id = store.create_run("v2", {}, seed=1)
    store.write_step(SyntheticRun(run_id, SMALL, seed=1).step(0))
    (path,) = _data_files(store, "rollouts")
    enc = _encodings(store, path)
    assert "BYTE_STREAM_SPLIT" in enc["token_entropy, list, element"]
    assert "DELTA_BINARY_PACKED" in enc["token_ids, list, element"]


def test_migration_turns_parquet_2_on_for_new_files_of_an_old_store(tmp_path):
    path = tmp_path / "old"
    _create_schema_1(path)
    with open_store(path) as store:
        before = set(_data_files(store, "rollouts"))
        assert before and all("DELTA_BINARY_PACKED" not in _encodings(store, p)["token_ids, list, element"] for p in before)
        rows = pa.table({"prompt_id": ["a"] * 64, "idx": list(range(64)),
                         "token_ids": [[3, 4, i] for i in range(64)]})
        store.write_step(StepRecord("old-run", 5, {}, rows))  # enough rows for a Parquet file (not inlined)
        (new,) = set(_data_files(store, "rollouts")) - before
        assert "DELTA_BINARY_PACKED" in _encodings(store, new)["token_ids, list, element"]
        assert store.rollouts("old-run", limit=100).height == 80  # old and new files read alike
