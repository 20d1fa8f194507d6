"""`workbench bench import`: a generated verl dump imported into a fresh store."""


def test_bench_import_small(tmp_path):
    from benchmarks.import_bench import bench_import

    out = bench_import(3000, prompts_per_step=64, group=8, response_chars=200, workdir=str(tmp_path))
    assert out["rollouts"] == out["stored_rollouts"] == 3000 and out["steps"] == 6
    assert out["rollouts_per_s"] > 0 and out["bytes_per_rollout"] > 0
    assert 0 < out["parse_s"] and 0 < out["write_s"] and out["parse_s"] + out["write_s"] <= out["seconds"] + 0.05
