"""NeMo-RL logs: prompt/response split by token_loss_mask, behaviour log-probs, evals from val dumps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from workbench.errors import DataError
from workbench.integrations import import_path

NEMO = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_rl"


def test_tokens_logprobs_and_groups(store):
    out = import_path(store, "nemo-rl", NEMO)
    assert (out["steps_imported"], out["eval_steps_imported"], out["rollouts"]) == (2, 2, 24)
    rid = out["run_id"]
    lines = [json.loads(x) for x in (NEMO / "train_data_step1.jsonl").read_text().splitlines()]
    got = store.rollouts(rid, step_min=1, step_max=1, limit=100).sort(["prompt_id", "idx"])
    want = []
    for line in lines:
        n = line["input_lengths"][0]
        mask = line["token_loss_mask"][0][:n]
        pos = [i for i, m in enumerate(mask) if m]
        ids = [line["token_ids"][0][i] for i in pos]
        lps = [line["generation_logprobs"][0][i] for i in pos]
        want.append((line["content"][0][-1], tuple(ids), line["rewards"][0], round(sum(lps), 4),
                     line["advantages"][0][pos[0]]))
    rows = [(r["response"], tuple(r["token_ids"]), r["reward"], round(r["logprob_sum"], 4), r["advantage"])
            for r in got.iter_rows(named=True)]
    assert sorted(rows) == sorted(want)
    assert (got["length"] == got["token_ids"].list.len()).all()
    assert got.group_by("prompt_id").len()["len"].to_list() == [4, 4, 4]
    step = store.run_steps(rid).filter(pl.col("step") == 1)
    assert step["tokens_generated"][0] == sum(len(w[1]) for w in want)
    prompts = set(store.prompts(rid).filter(pl.col("split") == "train")["text"])
    assert {line["content"][0][0] for line in lines} <= prompts and len(prompts) == 6


def test_val_dump_evals(store):
    out = import_path(store, "nemo-rl", NEMO)
    evals = store.evals(out["run_id"])
    assert sorted(evals["step"].unique().to_list()) == [0, 2]
    lines = [json.loads(x) for x in (NEMO / "val_data_step2.jsonl").read_text().splitlines()]
    correct = sum(line["rewards"][0] > 0 for line in lines)
    got = evals.filter(pl.col("step") == 2)
    assert got["samples"].sum() == len(lines) and got["correct"].sum() == correct
    assert got.height == 2


def test_unwrapped_rewards_is_bad_input(store, tmp_path):
    folder = tmp_path / "logs"
    shutil.copytree(NEMO, folder)
    path = folder / "train_data_step2.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[2])
    obj["rewards"] = "one"
    lines[2] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"train_data_step2\.jsonl:3: 'rewards'"):
        import_path(store, "nemo-rl", folder)
    out = import_path(store, "nemo-rl", folder, skip_bad=True)
    assert out["steps_imported"] == 1 and out["skipped_rows"] == 1 and out["rollouts"] == 11
