"""pass@k against direct combinatorics; vectorised equals the loop; curves with bootstrap intervals."""

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.analysis import (
    bootstrap_mean_ci,
    pass_at_k,
    pass_at_k_by_k,
    pass_at_k_curve,
    sharpening_vs_gain,
    with_pass_at_k,
)


def comb_pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_small_n_exhaustive_against_math_comb():
    for n in range(1, 13):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(comb_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_edge_cases():
    assert pass_at_k(16, 0, 1) == 0.0 and pass_at_k(16, 0, 16) == 0.0  # c = 0
    assert pass_at_k(16, 16, 1) == 1.0  # c = n
    assert pass_at_k(16, 10, 7) == 1.0  # k > n - c: every k-subset holds a correct sample
    assert pass_at_k(16, 1, 16) == 1.0  # k = n with one correct
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)  # pass@1 is the pass rate
    assert isinstance(pass_at_k(4, 2, 2), float)


def test_large_n_is_stable():
    # C(1000, 500) overflows a float; the product form does not.
    want = 1.0 - math.comb(700, 500) / math.comb(1000, 500)
    assert pass_at_k(1000, 300, 500) == pytest.approx(want, rel=1e-9)
    assert 0.0 < pass_at_k(100_000, 1, 3) == pytest.approx(3e-5, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30))
def test_vectorised_equals_loop(rows):
    n = np.array([r[0] for r in rows])
    c = np.array([round(r[1] * r[0]) for r in rows])
    k = np.array([max(1, round(r[2] * r[0])) for r in rows])
    got = pass_at_k(n, c, k)
    loop = [comb_pass_at_k(int(a), int(b), int(d)) for a, b, d in zip(n, c, k)]
    assert got.shape == n.shape
    # float64 on both sides: a product of at most 40 factors in [0, 1] carries < 40 x 1.1e-16 of rounding,
    # so 1e-12 holds on any IEEE machine (this is not a float32 comparison)
    np.testing.assert_allclose(got, loop, atol=1e-12)


def test_broadcast_scalar_k_and_chunking(monkeypatch):
    import workbench.analysis.passk as mod

    monkeypatch.setattr(mod, "_CHUNK", 7)  # force many chunks
    n = np.full(50, 20)
    c = np.arange(50) % 21
    # float64, at most 20 factors: rounding < 20 x 1.1e-16, far inside 1e-12 on any machine
    np.testing.assert_allclose(pass_at_k(n, c, 3), [comb_pass_at_k(20, int(x), 3) for x in c], atol=1e-12)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_invalid_inputs(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _evals():
    rng = np.random.default_rng(0)
    rows = []
    for run in ["a", "b"]:
        for step in [0, 10]:
            for p in range(30):
                n = 8 if p < 25 else 4
                rows.append({"run_id": run, "step": step, "prompt_id": f"p{p}", "level": p % 3, "samples": n,
                             "correct": int(rng.binomial(n, 0.2 + 0.3 * (step > 0) + 0.1 * (run == "b")))})
    return pl.DataFrame(rows)


def test_with_pass_at_k_nulls_where_too_few_samples():
    out = with_pass_at_k(_evals(), [1, 8])
    assert out["pass@1"].null_count() == 0
    assert out["pass@8"].null_count() == 2 * 2 * 5
    row = out.row(0, named=True)
    assert row["pass@8"] == pytest.approx(comb_pass_at_k(row["samples"], row["correct"], 8))


def test_curve_means_and_intervals():
    ev = _evals()
    curve = pass_at_k_curve(ev, [1, 4, 8], n_boot=400, seed=1)
    assert curve.height == 2 * 2 * 3
    for r in curve.iter_rows(named=True):
        g = ev.filter((pl.col("run_id") == r["run_id"]) & (pl.col("step") == r["step"]) & (pl.col("samples") >= r["k"]))
        vals = [comb_pass_at_k(s, c, r["k"]) for s, c in zip(g["samples"], g["correct"])]
        assert r["pass_at_k"] == pytest.approx(sum(vals) / len(vals))
        assert r["prompts"] == len(vals)
        assert r["ci_low"] <= r["pass_at_k"] <= r["ci_high"]
        assert (r["ci_low"] < r["ci_high"]) == (len(set(vals)) > 1)
    # pass@k grows with k within a (run, step)
    for _, g in curve.group_by(["run_id", "step"]):
        assert g.sort("k")["pass_at_k"].is_sorted()
    assert curve.equals(pass_at_k_curve(ev, [1, 4, 8], n_boot=400, seed=1))
    by_level = pass_at_k_curve(ev, [1], by=["run_id", "step", "level"], n_boot=50)
    assert by_level.height == 2 * 2 * 3


def test_bootstrap_interval_covers_and_narrows():
    rng = np.random.default_rng(3)
    small, big = rng.random(20), rng.random(2000)
    lo_s, hi_s = bootstrap_mean_ci(small, n_boot=500)
    lo_b, hi_b = bootstrap_mean_ci(big, n_boot=500)
    assert lo_s < small.mean() < hi_s and lo_b < big.mean() < hi_b
    assert hi_b - lo_b < (hi_s - lo_s) / 3


def test_pass_at_k_by_k():
    ev = _evals()
    out = pass_at_k_by_k(ev)
    assert out["k"].max() == 4  # the smallest sample count in each group
    one = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 0) & (pl.col("k") == 1))["pass_at_k"][0]
    g = ev.filter((pl.col("run_id") == "a") & (pl.col("step") == 0))
    assert one == pytest.approx((g["correct"] / g["samples"]).mean())


def test_sharpening_vs_gain():
    ev = pl.DataFrame({
        "run_id": ["r"] * 8, "level": [1, 1, 2, 2] * 2,
        "step": [0] * 4 + [5] * 4,
        "prompt_id": ["a", "b", "c", "d"] * 2,
        "samples": [4] * 8,
        "correct": [0, 2, 1, 0,   # step 0
                    1, 4, 0, 0],  # step 5: a newly solved, c lost
    })
    out = sharpening_vs_gain(ev, k=4).row(0, named=True)
    assert (out["step_from"], out["step_to"], out["prompts"]) == (0, 5, 4)
    assert out["pass1_from"] == pytest.approx(3 / 16) and out["pass1_to"] == pytest.approx(5 / 16)
    assert out["passk_from"] == pytest.approx(0.5) and out["passk_to"] == pytest.approx(0.5)
    assert (out["newly_solved"], out["lost"]) == (1, 1)
    lvl = sharpening_vs_gain(ev, k=2, by=["run_id", "level"]).sort("level")
    assert lvl["newly_solved"].to_list() == [1, 0] and lvl["lost"].to_list() == [0, 1]
    assert lvl["passk_to"][0] == pytest.approx((comb_pass_at_k(4, 1, 2) + 1.0) / 2)
