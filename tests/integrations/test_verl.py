"""verl dumps: what lands where, idempotence, new step files, bad lines, --skip-bad."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from workbench.errors import DataError
from workbench.integrations import import_path

VERL = Path(__file__).resolve().parents[1] / "fixtures" / "verl"


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_import_maps_every_field(store):
    out = import_path(store, "verl", VERL / "rollouts", options={"val_dir": str(VERL / "validation")})
    assert out["steps_imported"] == 3 and out["rollouts"] == 48 and out["eval_steps_imported"] == 2
    run = store.run(out["run_id"])
    assert run["status"] == "imported" and run["source"] == "verl"
    assert run["config"]["import"]["path"] == str((VERL / "rollouts").resolve())

    lines = _lines(VERL / "rollouts" / "2.jsonl")
    got = store.rollouts(out["run_id"], step_min=2, step_max=2, limit=100)
    assert got.height == len(lines) == 16
    # every (prompt text, response, score) of the file is stored once, in groups of 4 by prompt text
    want = sorted((r["output"], r["score"]) for r in lines)
    assert sorted(zip(got["response"].to_list(), got["reward"].to_list())) == want
    assert sorted(got.group_by("prompt_id").len()["len"].to_list()) == [4, 4, 4, 4]
    assert sorted(got["idx"].unique().to_list()) == [0, 1, 2, 3]

    prompts = store.prompts(out["run_id"])
    by_text = dict(zip(prompts["text"].to_list(), prompts["answer"].to_list()))
    for r in lines:
        assert by_text[r["input"]] == r["gts"]

    steps = store.run_steps(out["run_id"]).filter(pl.col("step") == 2)
    scores = [r["score"] for r in lines]
    assert steps["rollouts"][0] == 16 and steps["prompts"][0] == 4
    assert steps["reward_mean"][0] == pytest.approx(sum(scores) / 16)
    groups = {}
    for r in lines:
        groups.setdefault(r["input"], set()).add(r["score"])
    zero = sum(len(v) == 1 for v in groups.values()) / len(groups)
    assert steps["zero_signal_frac"][0] == pytest.approx(zero)
    alloc = store.allocations(out["run_id"], step=2)
    assert alloc.height == 4 and set(alloc["granted"].to_list()) == {4} and set(alloc["allocator"]) == {"verl"}


def test_validation_dump_becomes_evals_with_acc(store):
    out = import_path(store, "verl", VERL / "rollouts", options={"val_dir": str(VERL / "validation")})
    evals = store.evals(out["run_id"])
    assert sorted(evals["step"].unique().to_list()) == [0, 3]
    lines = _lines(VERL / "validation" / "3.jsonl")
    want: dict[str, list[int]] = {}
    for r in lines:
        want.setdefault(r["input"], []).append(int(r["acc"]))
    got = evals.filter(pl.col("step") == 3).join(store.prompts(out["run_id"]), on="prompt_id")
    assert sorted(zip(got["text"], got["samples"], got["correct"])) == sorted(
        (k, len(v), sum(v)) for k, v in want.items())
    from workbench.analysis import pass_at_k_curve

    curve = pass_at_k_curve(evals, [1, 5], n_boot=50)
    assert set(curve["k"].to_list()) == {1, 5} and curve.filter(pl.col("k") == 5)["prompts"].to_list() == [3, 3]


def test_importing_twice_adds_nothing_and_new_step_adds_only_it(store, verl_copy):
    first = import_path(store, "verl", verl_copy / "rollouts")
    again = import_path(store, "verl", verl_copy / "rollouts")
    assert again["run_id"] == first["run_id"] and again["steps_imported"] == 0 and again["rollouts"] == 0
    text = (verl_copy / "rollouts" / "3.jsonl").read_text().replace('"step": 3', '"step": 4')
    (verl_copy / "rollouts" / "4.jsonl").write_text(text)
    third = import_path(store, "verl", verl_copy / "rollouts")
    assert third["run_id"] == first["run_id"]
    assert (third["steps_imported"], third["first_step"], third["rollouts"]) == (1, 4, 16)
    assert store.count_rollouts(first["run_id"]) == 64
    assert len(store.list_runs()) == 1
    other = import_path(store, "verl", verl_copy / "rollouts", name="another")
    assert other["run_id"] != first["run_id"] and other["steps_imported"] == 4


@pytest.mark.parametrize("mutate, key", [
    (lambda o: o.pop("score"), "score"),
    (lambda o: o.update(output=17), "output"),
    (lambda o: o.update(score="high"), "score"),
])
def test_bad_line_names_file_line_and_key_and_writes_nothing_of_that_step(store, verl_copy, mutate, key):
    path = verl_copy / "rollouts" / "2.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[6])
    mutate(obj)
    lines[6] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        import_path(store, "verl", verl_copy / "rollouts")
    msg = str(err.value)
    assert f"2.jsonl:7:" in msg and repr(key) in msg and "\n" not in msg
    runs = store.list_runs()
    assert len(runs) == 1
    rid = runs["run_id"][0]
    assert store.run_steps(rid)["step"].to_list() == [1]  # step 1 is whole, step 2 not at all
    assert store.count_rollouts(rid, step_min=2) == 0


def test_malformed_json_line(store, verl_copy):
    path = verl_copy / "rollouts" / "1.jsonl"
    lines = path.read_text().splitlines()
    lines[3] = lines[3][:25]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"1\.jsonl:4: malformed JSON"):
        import_path(store, "verl", verl_copy / "rollouts")


def test_skip_bad_imports_the_rest_and_counts(store, verl_copy):
    path = verl_copy / "rollouts" / "2.jsonl"
    lines = path.read_text().splitlines()
    for i in (1, 5):
        obj = json.loads(lines[i])
        del obj["score"]
        lines[i] = json.dumps(obj)
    lines[9] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    out = import_path(store, "verl", verl_copy / "rollouts", skip_bad=True)
    assert out["steps_imported"] == 3 and out["rollouts"] == 48 - 3 and out["skipped_rows"] == 3
    reasons = {s["reason"]: s["count"] for s in out["skipped"]}
    assert reasons["'score': missing key"] == 2
    assert sum(v for k, v in reasons.items() if k.startswith("malformed JSON")) == 1
    assert store.count_rollouts(out["run_id"], step_min=2, step_max=2) == 13


def test_tokenizer_option_counts_response_tokens(store, tmp_path):
    from workbench.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path / "tok")
    out = import_path(store, "verl", VERL / "rollouts", options={"tokenizer": str(tmp_path / "tok")})
    got = store.rollouts(out["run_id"], limit=100)
    assert got["length"].to_list() == got["response"].str.len_chars().to_list()  # one token per character
    steps = store.run_steps(out["run_id"])
    assert steps["tokens_generated"].sum() == got["length"].sum()
