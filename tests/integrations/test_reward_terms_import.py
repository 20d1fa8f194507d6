"""Other engines' reward parts as reward terms: TRL's per-reward-function columns (files real TRL wrote)
and verl's numeric reward-extra keys. Live TRL: test_reward_terms_trl_live.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from f32 import f32_atol
from workbench.integrations import import_path
from workbench.store import open_store

TRL = Path(__file__).resolve().parents[1] / "fixtures" / "trl"
FILES = sorted((TRL / "completions").glob("completions_*.parquet"))


def _terms(rows: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame([dict(t) for t in rows["reward_terms"].to_list()])


@pytest.mark.skipif(not FILES, reason="the real-TRL fixture tests/fixtures/trl/completions/ is not there")
def test_trl_reward_function_columns_import_as_terms(store):
    out = import_path(store, "trl", TRL, options={"reward_weights": {"correct": 1.0, "digits_only": 0.5}})
    rid = out["run_id"]
    rows = store.sql("SELECT step, response, reward, reward_terms FROM rollouts WHERE run_id = ? "
                     "ORDER BY step, stage, prompt_id, idx", [rid])
    terms = _terms(rows)
    assert terms.columns == ["correct", "digits_only"]
    np.testing.assert_allclose(rows["reward"], terms["correct"] + 0.5 * terms["digits_only"], rtol=0,
                               atol=f32_atol(1.5, 2))
    steps = store.run_steps(rid)
    for f in FILES:
        want = pl.from_arrow(pq.read_table(f))
        step = int(want["step"][0])
        m = dict(steps.filter(pl.col("step") == step)["metrics"][0])
        for name in ("correct", "digits_only"):  # each function's step mean, unweighted
            assert m[f"reward/{name}"] == pytest.approx(float(want[name].mean()), abs=1e-12)
        mine = terms.filter(rows["step"] == step)
        assert sorted(mine["digits_only"].to_list()) == sorted(want["digits_only"].to_list())


def test_verl_numeric_reward_extra_keys_import_as_terms(store, tmp_path):
    """DAPO's reward manager in verl logs `overlong_reward` (a float) and `overlong` (a bool) per response;
    `acc` is a bool, `pred` text: only the numbers become terms."""
    folder = tmp_path / "rollouts"
    folder.mkdir()
    lines = [dict(input="1+1=", output=o, gts="2", score=s + ov, step=3, acc=s > 0, pred=o,
                  overlong_reward=ov, overlong=ov < 0, format=fmt)
             for o, s, ov, fmt in [("2", 1.0, 0.0, 1.0), ("22222", 0.0, -0.5, 1), ("x", 0.0, 0.0, 0.0)]]
    (folder / "3.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = import_path(store, "verl", folder)
    rows = store.sql("SELECT response, reward, reward_terms FROM rollouts WHERE run_id = ? ORDER BY idx",
                     [out["run_id"]])
    assert [dict(t) for t in rows["reward_terms"].to_list()] == [
        {"overlong_reward": 0.0, "format": 1.0}, {"overlong_reward": -0.5, "format": 1.0},
        {"overlong_reward": 0.0, "format": 0.0}]
    m = dict(store.run_steps(out["run_id"])["metrics"][0])
    assert m["reward/overlong_reward"] == pytest.approx(-0.5 / 3) and m["reward/format"] == pytest.approx(2 / 3)
    # a bad line skipped: the slow (line by line) path keeps the same terms
    (folder / "4.jsonl").write_text("".join(json.dumps(dict(x, step=4)) + "\n" for x in lines) + "{not json\n")
    out = import_path(store, "verl", folder, skip_bad=True)
    rows4 = store.sql("SELECT reward_terms FROM rollouts WHERE run_id = ? AND step = 4 ORDER BY idx",
                      [out["run_id"]])
    assert [dict(t) for t in rows4["reward_terms"].to_list()] == [dict(t) for t in rows["reward_terms"].to_list()]
