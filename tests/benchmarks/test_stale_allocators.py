"""`workbench bench async-allocators`: the allocation simulator with stale statistics on a profile's warm start."""

import pytest


def test_bench_async_allocators_on_a_profile_warm_start():
    from benchmarks.stale_allocators import bench_stale_allocators

    out = bench_stale_allocators(allocators=("uniform", "selective"), etas=(0, 1), seeds=2, steps=8)
    assert set(out["by_eta"]) == {"0", "1"} and out["warm_start_rates"] == 192
    row = out["by_eta"]["1"]["selective"]
    assert row["saving_ci90"][0] <= row["saving_ci90"][1] and 0 <= row["final_pass"] <= 1
    assert out["by_eta"]["0"]["uniform"]["uniform_eta0_saving"] == pytest.approx(1.0)
