"""verl's v1-trainer dumps (written by verl's own code, see tests/fixtures/verl/README.md): groups are
verl's uids, not prompt texts; eval samples are sessions; the rule given at import decides correctness
where the dump logs no verdict, and every reader (steps, analysis, replay, the dashboard's data) counts
the same rollouts correct as a plain loop over the files does."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from workbench.errors import DataError
from workbench.integrations import import_path

V1 = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "v1"


@pytest.fixture
def store(tmp_path):
    from workbench.store import open_store

    with open_store(tmp_path / "store") as s:
        yield s


def lines(folder: Path) -> dict[int, list[dict]]:
    return {int(p.stem): [json.loads(x) for x in p.read_text().splitlines()] for p in sorted(folder.glob("*.jsonl"))}


def plain_groups(rows: list[dict]) -> dict[str, list[dict]]:
    """verl's grouping, as its trainer keys the batch: the uid less its last two `_` parts."""
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["uid"].rsplit("_", 2)[0]].append(r)
    return dict(out)


def plain_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0


def test_the_same_prompt_twice_in_a_batch_stays_two_groups(store):
    rid = import_path(store, "verl", V1 / "rollouts")["run_id"]
    for step, rows in lines(V1 / "rollouts").items():
        groups = plain_groups(rows)
        allocs = store.allocations(rid).filter(pl.col("step") == step)
        assert sorted(allocs["granted"].to_list()) == sorted(len(g) for g in groups.values())
        steps = store.run_steps(rid).filter(pl.col("step") == step).row(0, named=True)
        assert steps["prompts"] == len(groups)
        zero = sum(len({r["score"] for r in g}) == 1 for g in groups.values())
        assert steps["zero_signal_frac"] == pytest.approx(zero / len(groups))
    step1 = store.allocations(rid).filter(pl.col("step") == 1)["prompt_id"].to_list()
    twice = [p for p in step1 if p.endswith("~1")]
    assert len(twice) == 1 and twice[0][:-2] in step1  # 12+30= twice: <id> and <id>~1, 4 rollouts each
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    assert texts[twice[0]] == texts[twice[0][:-2]] == "12+30="
    assert store.run(rid)["config"]["allocator"]["params"]["n"] == 4
    # step 2 holds a two-output session: its group has 5 rollouts (each output is trained on)
    assert sorted(store.allocations(rid).filter(pl.col("step") == 2)["granted"].to_list()) == [4, 4, 5]


def test_validation_counts_sessions_and_reads_acc_then_the_rule(store):
    rid = import_path(store, "verl", V1 / "rollouts", options={"val_dir": str(V1 / "validation")})["run_id"]
    evals = store.evals(rid)
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    for step, rows in lines(V1 / "validation").items():
        sessions: dict[str, dict] = {}
        for r in rows:  # keys sorted: the session's last output wins, as verl's own metrics take it
            sessions[r["uid"].rsplit("_", 1)[0]] = r
        want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in sessions.values():
            ok = r["acc"] if r["acc"] is not None else r["score"] >= 0.5
            want[r["input"]][0] += 1
            want[r["input"]][1] += int(ok)
        got = evals.filter(pl.col("step") == step)
        assert {texts[p]: [n, c] for p, n, c in got.select("prompt_id", "samples", "correct").iter_rows()} == want
    assert any(r["gts"] is None for rows in lines(V1 / "validation").values() for r in rows)
    answers = dict(zip(store.prompts(rid)["text"], store.prompts(rid)["answer"]))
    assert answers["20+22="] is None and answers["3+4="] == "7"


def test_correct_if_is_checked_kept_and_not_changed_on_a_later_import(store, tmp_path):
    with pytest.raises(DataError, match=r"--correct-if 'score>1'.*reward OP NUMBER"):
        import_path(store, "verl", V1 / "rollouts", options={"correct_if": "score>1"})
    rid = import_path(store, "verl", V1 / "rollouts", name="lenient", options={"correct_if": "reward > 0"})["run_id"]
    assert store.run(rid)["config"]["correctness"]["rule"] == "reward>0"
    rolls = store.rollouts(rid, limit=1000)
    assert rolls.filter(pl.col("reward") > 0)["correct"].all()  # the format bonus alone counts, as asked
    with pytest.raises(DataError, match="imported with the rule 'reward>0'"):
        import_path(store, "verl", V1 / "rollouts", name="lenient", options={"correct_if": "reward>=1"})
    assert import_path(store, "verl", V1 / "rollouts", name="lenient")["steps_imported"] == 0


def test_partial_rewards_every_reader_counts_the_same_rollouts_correct(store, tmp_path, monkeypatch):
    """A run with a 0.1 format bonus: rewards 0.1 are not correct (the default rule), and the steps
    table, the analysis (zero-signal, all-correct groups, pass@k), the replay and the dashboard's
    data functions agree with a plain loop over the files."""
    from workbench.analysis import efficiency
    from workbench.analysis.passk import with_pass_at_k
    from workbench.analysis.replay import load_run, logged_result, replay_run

    rid = import_path(store, "verl", V1 / "rollouts", options={"val_dir": str(V1 / "validation")})["run_id"]
    train = lines(V1 / "rollouts")
    assert any(abs(r["score"] - 0.1) < 1e-6 for rows in train.values() for r in rows)
    plain = {step: [(sum(r["score"] >= 0.5 for r in g), len(g), len({r["score"] for r in g}) == 1)
                    for g in plain_groups(rows).values()] for step, rows in train.items()}

    rolls = store.rollouts(rid, limit=1000).with_columns(pl.lit(rid).alias("run_id"))
    assert rolls["correct"].to_list() == (rolls["reward"] >= 0.5).to_list()
    per_step = efficiency.zero_signal_by_step(rolls)
    metrics = store.run_steps(rid)
    for step, groups in plain.items():
        row = per_step.filter(pl.col("step") == step).row(0, named=True)
        assert row["zero_signal_groups"] == sum(z for _, _, z in groups)
        assert row["all_correct_groups"] == sum(c == n for c, n, _ in groups)
        assert row["all_wrong_groups"] == sum(c == 0 for c, _, _ in groups)
        m = metrics.filter(pl.col("step") == step)["metrics"].to_list()[0]
        m = m if isinstance(m, dict) else {kv["key"]: kv["value"] for kv in m}
        assert m["rollout/frac_all_correct"] == pytest.approx(sum(c == n for c, n, _ in groups) / len(groups))

    frames = load_run(store, rid)
    logged = logged_result(frames.allocations, frames.rollouts)
    assert logged["informative_groups"].to_list() == [sum(not z for _, _, z in plain[s]) for s in sorted(plain)]
    replayed = replay_run(store, rid, "uniform", {"n": 4}, frames=frames, steps=[1]).groups
    assert sorted(replayed["correct"].to_list()) == sorted(c for c, _, _ in plain[1])

    evals = with_pass_at_k(store.evals(rid), [1, 2])
    for n, c, p1, p2 in evals.select("samples", "correct", "pass@1", "pass@2").iter_rows():
        assert p1 == pytest.approx(plain_pass_at_k(n, c, 1)) and p2 == pytest.approx(plain_pass_at_k(n, c, 2))

    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "store"))
    _dashboard_agrees(store, rid, plain, evals)


def _dashboard_agrees(store, rid: str, plain: dict, evals: pl.DataFrame) -> None:
    """The data the Allocation, Prompt, Rollouts and Run pages show, through the app's own readers."""
    pytest.importorskip("streamlit")
    import streamlit as st

    from app import data, derive, rollout_view

    st.cache_data.clear()
    st.cache_resource.clear()
    for step, groups in plain.items():
        table = derive.group_pass_rates(data.step_rewards(rid, step, step))  # Allocation page
        assert sorted(table["correct"].to_list()) == sorted(c for c, _, _ in groups)
        assert int(table["zero_signal"].sum()) == sum(z for _, _, z in groups)
    pid = store.allocations(rid).filter(pl.col("step") == 1)["prompt_id"][0]
    visits = derive.prompt_visits(data.prompt_rollout_outcomes(rid, pid))  # Prompt page
    rows = data.rollouts(rid, (("prompt_id", pid),), 100, 0).to_dicts()  # Rollouts page
    want = sum(bool(r["correct"]) for r in rows)
    assert int(visits["correct"].sum()) == want
    header = rollout_view.group_header(1, pid, [r for r in rows if r["step"] == 1], None)
    assert f" {sum(r['correct'] for r in rows if r['step'] == 1)}/" in header
    passk = data.passk(rid)  # Run page: pass@1 per evaluated step, the mean over prompts of c / n
    for step in (0, 2):
        at = evals.filter(pl.col("step") == step)
        got = passk.filter((pl.col("step") == step) & (pl.col("k") == 1))["pass_at_k"][0]
        assert got == pytest.approx(float((at["correct"] / at["samples"]).mean()))


def test_the_older_dump_groups_by_text_and_takes_acc_as_the_verdict(store):
    """`RayPPOTrainer`'s dump (no uid): rows of one prompt text are one group, so the prompt drawn twice
    in the batch is one group of 8 (the documented limit of that format); `acc` is the verdict, over
    any rule given at import."""
    folder = V1.parent / "ray_trainer" / "rollouts"
    rid = import_path(store, "verl", folder, options={"correct_if": "reward>0"})["run_id"]
    assert sorted(store.allocations(rid)["granted"].to_list()) == [4, 8]
    rows = lines(folder)[1]
    rolls = store.rollouts(rid, limit=100)
    texts = dict(zip(store.prompts(rid)["prompt_id"], store.prompts(rid)["text"]))
    got = sorted((texts[p], r, c) for p, r, c in rolls.select("prompt_id", "response", "correct").iter_rows())
    assert got == sorted((x["input"], x["output"], x["acc"]) for x in rows)
    assert any(x["score"] > 0 and not x["acc"] for x in rows)  # a format bonus alone: acc says wrong
