"""`workbench bench playground` at its smallest (one request of one sample of two tokens, idle only), on the
real SmolLM2 conversion the tests share: a finished one-step run whose step-1 snapshot was sampled, a load
time and a first request measured, and a second call reusing that run. Asserts what was measured and
stored, never a timing's value. And how the run beside is paced from its steps' record times (`step_pace`,
on given times)."""

from __future__ import annotations

import pytest


def test_the_run_pace_takes_the_steps_touching_the_requests_against_those_wholly_outside():
    from benchmarks.playground_bench import step_pace

    records = [100.0, 102.0, 104.5, 107.0, 112.0, 118.0, 121.0, 123.0]  # step seconds 2, 2.5, 2.5, 5, 6, 3, 2
    pace = step_pace(records, (108.0, 117.0), [(100.0, 104.5), (118.0, 130.0)])
    assert pace["during"] == {"steps": 2, "median_step_s": 5.5, "steps_per_s": round(1 / 5.5, 4)}  # 107-112-118
    assert pace["without"] == {"steps": 4, "median_step_s": 2.25, "steps_per_s": round(1 / 2.25, 4)}
    spanned = step_pace(records, (112.5, 113.0), [(100.0, 101.0)])  # one step outlasts the requests
    assert spanned["during"]["median_step_s"] == 6.0
    assert spanned["without"] == {"steps": 0, "median_step_s": None, "steps_per_s": None}
    assert step_pace(records[::-1], (0.0, 1.0), [(100.0, 104.5)])["without"]["steps"] == 2  # any order


@pytest.mark.slow
def test_the_playground_bench_samples_a_smollm2_checkpoint_through_the_worker(smollm2_dir, tmp_path):
    from benchmarks.playground_bench import bench_playground
    from workbench.playground.sample import available_steps
    from workbench.store import open_store

    store = tmp_path / "store"
    out = bench_playground(store, requests=1, samples=1, tokens=2, beside=False)
    assert out["checkpoint"] == 1 and (out["samples"], out["tokens"]) == (1, 2)
    assert out["checkpoint_load_s"] > 0 and out["first_request_s"] > 0
    assert out["idle"]["n"] == 1 and out["idle"]["max_s"] >= out["idle"]["median_s"] > 0
    assert "beside_run" not in out
    with open_store(store) as st:
        run = st.run(out["run_id"])
    assert run["status"] == "finished" and 1 in available_steps(store, out["run_id"])
    again = bench_playground(store, requests=1, samples=1, tokens=2, beside=False)
    assert again["run_id"] == out["run_id"]  # the snapshot is reused, not trained again
