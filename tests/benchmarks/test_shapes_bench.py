"""`workbench bench shapes`: bad options named, medians over alternating rounds, the real model's runs sized."""

import pytest

from workbench.errors import ConfigError


def test_bench_shapes_refuses_bad_options_naming_them():
    from benchmarks.shapes_bench import run_bench

    with pytest.raises(ConfigError, match="--shape: 'forest'"):
        run_bench(shapes=("forest",))
    with pytest.raises(ConfigError, match="--steps"):
        run_bench(steps=1)
    with pytest.raises(ConfigError, match="--organism"):
        run_bench(organism="huge")
    with pytest.raises(ConfigError, match="--group and --prompts-per-step go together"):
        run_bench(organism="smollm2", group=4)
    with pytest.raises(ConfigError, match="--max-new-tokens: 0"):
        run_bench(organism="smollm2", max_new_tokens=0)
    with pytest.raises(ConfigError, match="--allocator: 'greedy'"):
        run_bench(allocator="greedy")
    with pytest.raises(ConfigError, match="--rounds: 0"):
        run_bench(rounds=0)


def test_bench_shapes_takes_medians_over_alternating_rounds():
    from benchmarks.shapes_bench import _over_rounds

    rows = [{"generate_s_per_rollout": t, "wall_s": 10.0 * t, "reused_share": r, "load_avg": [1.0, 2.0]}
            for t, r in ((1.0, 0.5), (3.0, 0.7), (2.0, 0.6))]
    out = _over_rounds(rows)
    assert out["generate_s_per_rollout"] == 2.0 and out["reused_share"] == 0.6 and out["wall_s"] == 20.0
    assert [r["generate_s_per_rollout"] for r in out["rounds"]] == [1.0, 3.0, 2.0]
    assert _over_rounds(rows[:1]) == rows[0]


def test_bench_shapes_sizes_the_real_models_runs():
    from benchmarks.shapes_bench import SHAPES, _config, _sizes

    cfg = _config("smollm2", 3, 2, 0, SHAPES["tree-latr"], _sizes(4, 2, 32)).to_dict()
    assert cfg["model"]["path"] == "smollm2" and cfg["rollout"]["shape"] == "tree"
    assert cfg["allocator"]["params"] == {"n": 4} and cfg["allocator"]["budget"] == 8
    assert cfg["allocator"]["prompts_per_step"] == 2 and cfg["task"]["train_size"] == 2
    assert cfg["sampling"]["max_new_tokens"] == 32
    assert cfg["eval"]["every"] == 0 and cfg["eval"]["at_start"] is False
    tracked = _config("small", 3, 16, 0, SHAPES["speculative-exact"], _sizes(None, None, None, "value_tracker"))
    assert tracked.to_dict()["allocator"]["name"] == "value_tracker"
    assert tracked.to_dict()["allocator"]["params"]["n"] == 4  # the tiny run's group
