"""TRL completion logs, on files real TRL wrote (tests/fixtures/trl, made by tests/fixtures/trl/make.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from workbench.errors import DataError
from workbench.integrations import import_path

TRL = Path(__file__).resolve().parents[1] / "fixtures" / "trl"
FILES = sorted((TRL / "completions").glob("completions_*.parquet"))
pytestmark = pytest.mark.skipif(not FILES, reason="the real-TRL fixture tests/fixtures/trl/completions/ "
                                "is not there yet (make it with tests/fixtures/trl/make.py)")
WEIGHTS = {"correct": 1.0, "digits_only": 0.5}


def test_import_real_trl_files(store):
    out = import_path(store, "trl", TRL, options={"reward_weights": WEIGHTS})  # output_dir: finds completions/
    assert out["steps_imported"] == len(FILES)
    rid = out["run_id"]
    assert store.run(rid)["source"] == "trl"
    for f in FILES:
        want = pl.from_arrow(pq.read_table(f))
        step = int(want["step"][0])
        got = store.rollouts(rid, step_min=step, step_max=step, limit=1000)
        assert got.height == want.height
        reward = want["correct"] + 0.5 * want["digits_only"]
        assert sorted(zip(got["response"], got["reward"].round(5), got["advantage"].round(5))) == sorted(
            zip(want["completion"], reward.round(5), want["advantage"].cast(pl.Float32).round(5)))
        # groups: rows with the same prompt (TRL repeats each prompt num_generations times in a row)
        sizes = want.group_by("prompt").len()["len"]
        assert sorted(got.group_by("prompt_id").len()["len"].to_list()) == sorted(sizes.to_list())
    answers = store.prompts(rid).select("text", "answer")
    first = pl.from_arrow(pq.read_table(FILES[0])).select(pl.col("prompt").alias("text"), "answer").unique()
    assert first.join(answers, on="text", suffix="_got").filter(pl.col("answer") != pl.col("answer_got")).height == 0


def test_default_weights_are_one(store):
    out = import_path(store, "trl", TRL / "completions")
    got = store.rollouts(out["run_id"], limit=5000)
    want = pl.concat([pl.from_arrow(pq.read_table(f)) for f in FILES])
    assert got["reward"].sum() == pytest.approx((want["correct"] + want["digits_only"]).sum(), rel=1e-5)


def test_missing_reward_column_named(store, tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    shutil.copy(FILES[0], folder / FILES[0].name)
    with pytest.raises(DataError, match=r"reward column 'accuracy' is not in the file"):
        import_path(store, "trl", folder, options={"reward_weights": {"accuracy": 1.0}})


def test_truncated_parquet_is_bad_input(store, tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    for f in FILES:
        shutil.copy(f, folder / f.name)
    bad = folder / FILES[-1].name
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(DataError, match="not a readable Parquet file"):
        import_path(store, "trl", folder, options={"reward_weights": WEIGHTS})
    out = import_path(store, "trl", folder, options={"reward_weights": WEIGHTS}, skip_bad=True)
    assert out["steps_imported"] == 0 and out["skipped_files"] == 1  # the good steps went in before the error
    assert store.run_steps(out["run_id"]).height == len(FILES) - 1


def test_conversational_prompts_and_completeness_rule(store, tmp_path):
    """TRL also logs conversations (lists of {role, content}); they are stored as text. A Parquet file
    cut short does not count as complete for --follow."""
    from workbench.integrations.common import StepFile
    from workbench.integrations.trl_files import looks_complete

    folder = tmp_path / "completions"
    folder.mkdir()
    conv = [[{"role": "system", "content": "Add."}, {"role": "user", "content": f"{i}+1="}] for i in range(2)]
    rows = {"step": [5] * 4, "prompt": [conv[0], conv[0], conv[1], conv[1]],
            "completion": [[{"role": "assistant", "content": c}] for c in ("1", "2", "2", "3")],
            "accuracy": [0.0, 1.0, 1.0, 0.0], "advantage": [-1.0, 1.0, 1.0, -1.0]}
    path = folder / "completions_00005.parquet"
    pl.DataFrame(rows).write_parquet(path)
    assert looks_complete(StepFile(5, path))
    out = import_path(store, "trl", folder)
    got = store.rollouts(out["run_id"], limit=10)
    assert sorted(got["response"].to_list()) == ["1", "2", "2", "3"]
    assert got.group_by("prompt_id").len()["len"].to_list() == [2, 2]
    texts = store.prompts(out["run_id"])["text"].to_list()
    assert "system: Add.\nuser: 0+1=" in texts
    cut = folder / "completions_00006.parquet"
    cut.write_bytes(path.read_bytes()[:-10])
    assert not looks_complete(StepFile(6, cut))
