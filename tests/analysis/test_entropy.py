"""Entropy helpers against hand-computed values on a small rollouts-shaped frame."""

import polars as pl
import pytest

from workbench.analysis import (
    detect_entropy_collapse,
    entropy_by_correctness,
    entropy_by_position,
    entropy_by_step,
    forking_token_counts,
    forking_tokens,
    token_entropies,
)

ROWS = [  # run, step, prompt, idx, reward, token ids, entropies
    ("a", 0, "p0", 0, 1.0, [5, 6, 2], [1.0, 2.0, 3.0]),
    ("a", 0, "p0", 1, 0.0, [7, 2], [4.0, 0.0]),
    ("a", 1, "p0", 0, 1.0, [5], [0.5]),
    ("a", 1, "p1", 0, 0.0, [8, 9, 2], [2.0, 6.0, 1.0]),
    ("a", 1, "p1", 1, 0.0, [8], None),  # logged without per-token entropy
    ("b", 0, "p0", 0, 1.0, [5, 2], [1.0, 1.0]),
]


def _frame():
    return pl.DataFrame(
        {"run_id": [r[0] for r in ROWS], "step": [r[1] for r in ROWS], "stage": [0] * len(ROWS),
         "prompt_id": [r[2] for r in ROWS], "idx": [r[3] for r in ROWS], "reward": [r[4] for r in ROWS],
         "token_ids": [r[5] for r in ROWS], "token_entropy": [r[6] for r in ROWS]},
        schema_overrides={"token_ids": pl.List(pl.Int32), "token_entropy": pl.List(pl.Float32)},
    )


def test_token_entropies_explodes_with_positions():
    t = token_entropies(_frame())
    assert t.height == 3 + 2 + 1 + 3 + 2
    row = t.filter((pl.col("run_id") == "a") & (pl.col("step") == 1) & (pl.col("prompt_id") == "p1")).sort("position")
    assert row["position"].to_list() == [0, 1, 2]
    assert row["token_id"].to_list() == [8, 9, 2]
    assert row["entropy"].to_list() == [2.0, 6.0, 1.0]


def test_entropy_by_step():
    out = entropy_by_step(_frame(), quantiles=(0.5,))
    a0 = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 0)).row(0, named=True)
    assert a0["entropy_mean"] == pytest.approx(10.0 / 5)
    assert a0["entropy_q50"] == pytest.approx(2.0)
    assert a0["tokens"] == 5 and a0["rollouts"] == 2
    a1 = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 1)).row(0, named=True)
    assert a1["entropy_mean"] == pytest.approx(9.5 / 4) and a1["rollouts"] == 2


def test_entropy_by_position():
    out = entropy_by_position(_frame())
    a = out.filter(pl.col("run_id") == "a")
    assert a["position"].to_list() == [0, 1, 2]
    assert a["entropy_mean"].to_list() == pytest.approx([(1 + 4 + 0.5 + 2) / 4, (2 + 0 + 6) / 3, (3 + 1) / 2])
    assert a["tokens"].to_list() == [4, 3, 2]
    assert entropy_by_position(_frame(), max_position=0)["position"].unique().to_list() == [0]


def test_entropy_by_correctness():
    out = entropy_by_correctness(_frame(), by=["run_id"])
    a_ok = out.filter((pl.col("run_id") == "a") & pl.col("correct")).row(0, named=True)
    a_bad = out.filter((pl.col("run_id") == "a") & ~pl.col("correct")).row(0, named=True)
    assert a_ok["entropy_mean"] == pytest.approx((1 + 2 + 3 + 0.5) / 4)
    assert a_ok["rollout_entropy_mean"] == pytest.approx((2.0 + 0.5) / 2)
    assert a_bad["entropy_mean"] == pytest.approx((4 + 0 + 2 + 6 + 1) / 5)
    assert a_bad["rollouts"] == 2 and a_bad["tokens"] == 5


def test_forking_tokens_and_counts():
    forks = forking_tokens(_frame(), top_frac=0.25)
    a = forks.filter(pl.col("run_id") == "a")
    # run a's 9 token entropies; the 0.75 quantile (linear) is 3.0: tokens with 3.0, 4.0, 6.0 qualify.
    assert a["threshold"][0] == pytest.approx(3.0)
    assert sorted(a["entropy"].to_list()) == [3.0, 4.0, 6.0]
    counts = forking_token_counts(forks, decode=lambda i: f"t{i}")
    ca = counts.filter(pl.col("run_id") == "a")
    assert sorted(ca["token_id"].to_list()) == [2, 7, 9]
    assert ca["share"].sum() == pytest.approx(1.0)
    assert set(ca["text"].to_list()) == {"t2", "t7", "t9"}
    with pytest.raises(ValueError, match="top_frac"):
        forking_tokens(_frame(), top_frac=0.0)


def test_detect_entropy_collapse():
    steps = pl.DataFrame({
        "run_id": ["x"] * 8 + ["y"] * 8,
        "step": list(range(8)) * 2,
        "entropy_mean": [2.0, 1.5, 0.9, 1.2, 0.9, 0.8, 0.7, 0.6,   # below 1.0 from step 4 on (and at 2)
                         2.0, 0.9, 0.9, 1.1, 0.9, 0.9, 1.1, 0.9],  # never three in a row
    })
    out = detect_entropy_collapse(steps, fraction=0.5, patience=3).sort("run_id")
    x, y = out.row(0, named=True), out.row(1, named=True)
    assert x["collapsed"] and x["collapse_step"] == 4 and x["detected_step"] == 6 and x["threshold"] == 1.0
    assert not y["collapsed"] and y["collapse_step"] is None and y["final"] == 0.9
    base2 = detect_entropy_collapse(steps, fraction=0.5, patience=3, baseline_steps=2).sort("run_id")
    assert base2["initial"].to_list() == pytest.approx([1.75, 1.45])
    with pytest.raises(ValueError):
        detect_entropy_collapse(steps, fraction=1.5)
