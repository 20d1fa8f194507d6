"""Runs compared prompt by prompt (`workbench.analysis.compare_runs` / `compare_steps`) on a real store
holding hand-made runs whose per-prompt counts are known: the pass rates, the matching of an imported
run's hashed ids by text, the basis points and windows, the change labels, and the interval against
Newcombe's published example and a plain-Python loop."""

from __future__ import annotations

import math

import polars as pl
import pytest

from workbench.analysis import compare_runs, compare_steps
from workbench.analysis.prompts import diff_interval, wilson
from workbench.errors import DataError
from workbench.store import StepRecord, open_store

TEXTS = {"p0": "1+1=", "p1": "2+2=", "p2": "3+3=", "p3": "9*9="}


def _run(store, name, outcomes, *, ids=None, tokens_per_rollout=4, evals=None, source=None):
    """A run whose step s gives prompt p the rewards outcomes[s][p] (a list of 0/1), prompts stored under
    `ids` (prompt -> stored id; default the prompt's own name). `evals`: step -> {prompt: (samples, correct)}."""
    ids = ids or {p: p for p in TEXTS}
    run_id = store.create_run(name, {"allocator": {"name": name}}, seed=0, source=source)
    store.add_prompts(run_id, [{"prompt_id": ids[p], "split": "eval" if p == "p3" else "train", "level": i,
                                "text": t, "answer": "", "metadata": {"data_source": "toy"}}
                               for i, (p, t) in enumerate(TEXTS.items())])
    for step, per_prompt in enumerate(outcomes):
        rows = [{"stage": 0, "prompt_id": ids[p], "idx": i, "response": str(r), "reward": float(r),
                 "verdict": "correct" if r else "wrong", "length": tokens_per_rollout}
                for p, rewards in per_prompt.items() for i, r in enumerate(rewards)]
        ev = [{"prompt_id": ids[p], "level": 3, "samples": n, "correct": c}
              for p, (n, c) in (evals or {}).get(step, {}).items()]
        metrics = {"rollout/count": len(rows), "rollout/prompts": len(per_prompt),
                   "rollout/tokens_generated": tokens_per_rollout * len(rows)}
        store.write_step(StepRecord(run_id, step, metrics, rows, evals=ev))
    return run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A: never solves p0, solves p1 always, p2 half. B (an import: ids hashed, text the same): learns p0,
    loses p1, p2 unchanged, and generates twice A's tokens per rollout."""
    path = tmp_path_factory.mktemp("prompts") / "store"
    a_steps = [{"p0": [0] * 8, "p1": [1] * 8, "p2": [1, 0] * 4} for _ in range(6)]
    b_steps = [{"p0": [0] * 8, "p1": [1] * 8, "p2": [1, 0] * 4}] * 2 + \
              [{"p0": [1] * 8, "p1": [0] * 8, "p2": [0, 1] * 4} for _ in range(4)]
    held = {0: {"p3": (16, 2)}, 5: {"p3": (16, 4)}}
    held_b = {0: {"p3": (16, 2)}, 5: {"p3": (16, 15)}}
    hashed = {p: f"h{i:04x}" for i, p in enumerate(TEXTS)}
    with open_store(path) as store:
        a = _run(store, "uniform", a_steps, evals=held)
        b = _run(store, "trl-import", b_steps, ids=hashed, tokens_per_rollout=8, evals=held_b, source="trl")
    return path, a, b


def test_pass_rates_differences_and_labels(runs):
    path, a, b = runs
    with open_store(path) as store:
        cmp = compare_runs(store, [a, b], basis="end", window=3)
    sides = cmp.sides.to_dicts()
    assert [(s["letter"], s["step"], s["step_min"], s["step_max"]) for s in sides] == [("A", 5, 3, 5), ("B", 5, 3, 5)]
    assert sides[1]["matched"] == 4 and sides[1]["match_rate"] == 1.0 and sides[1]["matched_by"] == "text"
    rows = {r["prompt"]: r for r in cmp.frame.to_dicts()}
    p0, p1, p2, p3 = (rows[TEXTS[p]] for p in ("p0", "p1", "p2", "p3"))
    assert (p0["prompt_id_A"], p0["prompt_id_B"]) == ("p0", "h0000")
    assert (p0["rollouts_A"], p0["correct_A"], p0["pass_A"], p0["pass_B"]) == (24, 0, 0.0, 1.0)
    assert p0["change_B"] == "learned by B, never by A" and p0["diff_B_lo"] > 0
    assert p1["change_B"] == "lost by B" and p1["diff_B"] == -1.0 and p1["diff_B_hi"] < 0
    assert p2["change_B"] == "no clear change" and p2["diff_B"] == 0.0
    assert p2["diff_B_lo"] < 0 < p2["diff_B_hi"]
    # a held-out prompt: only evaluated (step 5 is in the window), labelled from its held-out rates
    assert (p3["pass_A"], p3["eval_pass_A"], p3["eval_pass_B"]) == (None, 4 / 16, 15 / 16)
    assert p3["change_B"] == "better in B"
    assert (p3["split"], p3["level"], p3["tag"]) == ("eval", 3, "toy")
    # sorted by the difference, largest gain first
    assert cmp.frame["prompt"][0] == TEXTS["p3"] or cmp.frame["diff_B"][0] == 1.0


def test_bases_pick_comparable_points(runs):
    path, a, b = runs
    with open_store(path) as store:
        by_tokens = compare_runs(store, [a, b], basis="tokens", window=1).sides
        by_step = compare_runs(store, [a, b], basis="step", at=2, window=1).sides
    # A generates 96 tokens a step, B 192: B reaches A's 576 tokens (A's end) at its step 2
    assert by_tokens["tokens"].to_list() == [576, 576]
    assert by_tokens["step"].to_list() == [5, 2]
    assert by_step["step"].to_list() == [2, 2] and by_step["step_min"].to_list() == [2, 2]


def test_before_and_after_in_one_run(runs):
    path, _, b = runs
    with open_store(path) as store:
        cmp = compare_steps(store, b, before=1, after=5, window=2)
    assert cmp.sides["label"].to_list() == ["step 1", "step 5"]
    rows = {r["prompt"]: r for r in cmp.frame.to_dicts()}
    assert rows[TEXTS["p0"]]["change_B"] == "learned by B, never by A"
    assert rows[TEXTS["p1"]]["change_B"] == "lost by B"


def test_match_rate_counts_prompts_the_other_run_lacks(tmp_path):
    with open_store(tmp_path / "store") as store:
        a = _run(store, "a", [{"p0": [1, 0]}])
        other = {"p0": "x0", "p1": "x1", "p2": "x2", "p3": "x3"}
        b = _run(store, "b", [{"p0": [1, 1]}], ids=other)
        store.add_prompts(b, [{"prompt_id": "x9", "split": "train", "level": 0, "text": "7+7=", "answer": "",
                               "metadata": {}}])
        sides = compare_runs(store, [a, b]).sides
    assert sides["prompts"].to_list() == [4, 5]
    assert sides["matched"].to_list() == [4, 4]
    assert sides["match_rate"][1] == pytest.approx(0.8)


def test_bad_input_names_the_argument(runs):
    path, a, b = runs
    with open_store(path) as store:
        with pytest.raises(DataError, match="basis 'epoch'"):
            compare_runs(store, [a, b], basis="epoch")
        with pytest.raises(DataError, match="two or more runs"):
            compare_runs(store, [a])
        with pytest.raises(DataError, match="labels"):
            compare_runs(store, [a, b], labels=["only one"])


def _wilson_loop(c, n, z=1.959963984540054):
    p = c / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_interval_matches_newcombe_and_a_plain_loop():
    # Newcombe (1998), Statistics in Medicine 17:873, table II, example (a): 56/70 vs 48/80, method 10
    frame = pl.DataFrame({"ca": [48, 0, 5, 3], "na": [80, 10, 7, 40], "cb": [56, 10, 0, 33], "nb": [70, 10, 9, 41]})
    d, lo, hi = diff_interval(pl.col("ca"), pl.col("na"), pl.col("cb"), pl.col("nb"))
    out = frame.select(d.alias("d"), lo.alias("lo"), hi.alias("hi"))
    assert out["d"][0] == pytest.approx(0.2)
    assert (round(out["lo"][0], 4), round(out["hi"][0], 4)) == (0.0524, 0.3339)
    for row, (ca, na, cb, nb) in zip(out.iter_rows(named=True), frame.iter_rows()):
        la, ua = _wilson_loop(ca, na)
        lb, ub = _wilson_loop(cb, nb)
        pa, pb = ca / na, cb / nb
        assert row["lo"] == pytest.approx(pb - pa - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2), rel=1e-6)
        assert row["hi"] == pytest.approx(pb - pa + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2), rel=1e-6)
    lo_w, hi_w = wilson(pl.lit(0), pl.lit(0))
    assert pl.select(lo_w.alias("lo"), hi_w.alias("hi")).row(0) == (None, None)


def test_an_imported_trl_run_lines_up_with_ours_by_text(tmp_path):
    """Real TRL completion logs (two reward functions) imported, beside a run of ours that stored the same
    prompts under its own ids: every prompt matches by text, and the counts are the import's."""
    from pathlib import Path

    from workbench.integrations import import_path

    trl = Path(__file__).resolve().parents[1] / "fixtures" / "trl"
    with open_store(tmp_path / "store") as store:
        imported = import_path(store, "trl", trl, options={"reward_weights": {"correct": 1.0, "digits_only": 0.5}})
        rid = imported["run_id"]
        texts = store.prompts(rid).filter(pl.col("split") == "train")
        ours = store.create_run("ours", {"allocator": {"name": "uniform"}}, seed=0)
        own_ids = {pid: f"ours-{i}" for i, pid in enumerate(texts["prompt_id"])}
        store.add_prompts(ours, [{"prompt_id": own_ids[p], "split": "train", "level": 0, "text": t, "answer": "",
                                  "metadata": {}} for p, t in zip(texts["prompt_id"], texts["text"])])
        rows = [{"stage": 0, "prompt_id": own_ids[p], "idx": 0, "response": "0", "reward": 1.0, "length": 1}
                for p in texts["prompt_id"]]
        store.write_step(StepRecord(ours, 0, {"rollout/count": len(rows), "rollout/tokens_generated": len(rows)}, rows))
        cmp = compare_runs(store, [rid, ours], window=100)
        last = int(store.run_steps(rid)["step"].max())
        before_after = compare_steps(store, rid, 1, last, window=1)
        outcomes = store.prompt_outcomes(rid, 0, last)
    assert cmp.sides["match_rate"].to_list() == [1.0, 1.0] and cmp.sides["matched_by"][1] == "text"
    trained = cmp.frame.filter(pl.col("rollouts_A") > 0)
    assert trained.height == outcomes.height
    assert (trained["prompt_id_A"] != trained["prompt_id_B"]).all()
    assert trained["rollouts_A"].sum() == outcomes["rollouts"].sum()
    assert before_after.sides["step"].to_list() == [1, last]
