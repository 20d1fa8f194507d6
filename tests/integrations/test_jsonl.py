"""The generic JSONL/Parquet importer through a field map."""

from __future__ import annotations

import json

import polars as pl
import pytest

from workbench.errors import DataError
from workbench.integrations import import_path

MAP = {"prompt": "question", "response": "completion", "reward": "score", "step": "iter"}


def _rows(steps=(0, 1, 2)):
    out = []
    for it in steps:
        for q in range(3):
            for j in range(4):
                out.append({"question": f"q{q}?", "completion": f"a{j}", "score": float((q + j + it) % 2), "iter": it})
    return out


def test_jsonl_with_map_and_growing_file(store, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows((0, 1))))
    out = import_path(store, "jsonl", path, options={"map": MAP})
    assert (out["steps_imported"], out["rollouts"]) == (2, 24)
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in _rows((2,))))
    again = import_path(store, "jsonl", path, options={"map": MAP})
    assert again["run_id"] == out["run_id"] and (again["steps_imported"], again["first_step"]) == (1, 2)
    steps = store.run_steps(out["run_id"])
    assert steps["step"].to_list() == [0, 1, 2] and steps["prompts"].to_list() == [3, 3, 3]


def test_parquet_with_map(store, tmp_path):
    path = tmp_path / "r.parquet"
    pl.DataFrame(_rows()).write_parquet(path)
    out = import_path(store, "jsonl", path, options={"map": MAP})
    assert (out["steps_imported"], out["rollouts"]) == (3, 36)
    assert store.rollouts(out["run_id"], limit=1)["response"][0] == "a0"


def test_map_errors_and_missing_key(store, tmp_path):
    from workbench.integrations.jsonl import parse_map

    with pytest.raises(DataError, match="'step' is required"):
        parse_map("prompt=question,response=completion,reward=score")
    with pytest.raises(DataError, match="unknown field 'rewrd'"):
        parse_map("prompt=q,response=c,reward=s,step=i,rewrd=x")
    path = tmp_path / "r.jsonl"
    rows = _rows((0,))
    del rows[5]["score"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"r\.jsonl:6: 'score': missing key"):
        import_path(store, "jsonl", path, options={"map": MAP})


def test_import_options_are_read_from_the_format_registry():
    """`workbench import`'s flags: each format reads the options its registry entry names, parsed there;
    a flag it does not read, or a required one left out, is one line naming the flag."""
    from workbench.integrations import import_options

    with pytest.raises(DataError, match=r"^--val-dir: the trl format does not read it \(its options: "
                                        r"--reward-weights, --tokenizer, --correct-if\)"):
        import_options("trl", {"val_dir": "somewhere", "map": None})
    with pytest.raises(DataError, match=r"^--map is required for the jsonl format: field=key pairs"):
        import_options("jsonl", {"map": None, "correct_if": "reward>0"})
    got = import_options("jsonl", {"map": "prompt=question,response=completion,reward=score,step=iter",
                                   "correct_if": "reward >= 1", "tokenizer": None})
    assert got == {"map": MAP, "correct_if": "reward>=1"}
    assert import_options("trl", {"reward_weights": "correct=1,digits=0.5"}) == {
        "reward_weights": {"correct": 1.0, "digits": 0.5}}
    with pytest.raises(DataError, match=r"^--reward-weights 'digits': expected column=weight"):
        import_options("trl", {"reward_weights": "correct=1,digits"})
