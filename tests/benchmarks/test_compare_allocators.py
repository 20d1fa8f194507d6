"""The real allocator comparison: runs on the small organism at one token budget, its summary
arithmetic, and the report files."""

from __future__ import annotations

import json

import pytest

from benchmarks.compare import compare, summarise, tokens_to_reach, write_report
from workbench.errors import ConfigError, WorkbenchError
from workbench.store import open_store


def _run(name, curve, zs=0.5):
    return {"run_id": name, "seed": 0, "minutes": 1.0, "curve": curve, "tokens_per_step": [10], "zero_signal_frac": zs}


def _curve(*points):
    return [{"step": 10 * i, "tokens": t, "pass1": p1, "pass8": min(1.0, p1 + 0.2)} for i, (t, p1) in enumerate(points)]


def test_tokens_to_reach_interpolates_between_evaluations():
    c = _curve((0, 0.2), (100, 0.3), (200, 0.5))
    assert tokens_to_reach(c, 0.2) == 0.0
    assert tokens_to_reach(c, 0.4) == pytest.approx(150.0)
    assert tokens_to_reach(c, 0.5) == pytest.approx(200.0)
    assert tokens_to_reach(c, 0.51) is None


def test_summary_saving_is_uniforms_tokens_over_the_allocators():
    runs = {
        "uniform": [_run("u0", _curve((0, 0.2), (1000, 0.3), (2000, 0.4)))],
        "fast": [_run("f0", _curve((0, 0.2), (400, 0.4), (800, 0.5)), zs=0.1)],
        "slow": [_run("s0", _curve((0, 0.2), (1000, 0.25), (2000, 0.3)))],
    }
    out = summarise(runs, tokens_per_step=10, seeds=1, steps=20, minutes=3.0, runs_kept=False)
    rows = {r["allocator"]: r for r in out["allocators"]}
    assert out["uniform_final_pass1"] == pytest.approx(0.4)
    assert rows["uniform"]["tokens_to_uniform_final"] == pytest.approx(2000)
    assert rows["fast"]["tokens_to_uniform_final"] == pytest.approx(400)
    assert rows["fast"]["token_saving_vs_uniform"] == pytest.approx(5.0)
    assert rows["slow"]["tokens_to_uniform_final"] is None and rows["slow"]["token_saving_vs_uniform"] is None
    assert out["best_token_saving_vs_uniform"] == pytest.approx(5.0) and out["best_allocator"] == "fast"


def test_bad_arguments_are_named(tiny_config):
    def cfg(**kw):
        return tiny_config(**{"eval__samples": 8, **kw})

    with pytest.raises(WorkbenchError, match="no-such"):
        compare(["no-such"], seeds=1, base=cfg())
    with pytest.raises(WorkbenchError, match="seeds"):
        compare(["uniform"], seeds=0, base=cfg())
    with pytest.raises(ConfigError, match="eval.every"):
        compare(["uniform"], seeds=1, base=cfg(eval__every=0))
    with pytest.raises(ConfigError, match="eval.samples"):
        compare(["uniform"], seeds=1, base=tiny_config(eval__samples=4))


def test_compare_runs_each_allocator_at_uniforms_token_budget(store_dir, tiny_config, tmp_path):
    base = tiny_config(steps=2, eval__every=1, eval__at_start=True, eval__samples=8)
    out = compare(["selective", "uniform"], seeds=1, base=base, store=store_dir)
    names = [r["allocator"] for r in out["allocators"]]
    assert names == ["uniform", "selective"], "uniform is the reference and runs first"
    assert out["tokens_per_step"] >= 1 and out["seeds"] == 1 and out["steps"] == 2
    for r in out["allocators"]:
        assert [p["step"] for p in r["curve"]] == [0, 1, 2]
        assert r["curve"][0]["tokens"] == 0 and r["curve"][-1]["tokens"] == r["final_tokens"] > 0
        assert 0 <= r["final_pass1"] <= r["final_pass8"] <= 1
        assert len(r["run_ids"]) == 1
        # held-out pass@1 by level at the first and last evaluation, matching the curve's pass@1 at both
        by_level = r["pass1_by_level"]
        assert set(by_level) == {"start", "end"} and by_level["start"] and set(by_level["start"]) == set(by_level["end"])
        with open_store(str(store_dir)) as st:
            evals = st.evals(r["run_ids"][0])
        for key, point in (("start", r["curve"][0]), ("end", r["curve"][-1])):
            at = evals.filter(evals["step"] == point["step"])
            weights = {str(lv): (at["level"] == lv).sum() for lv in at["level"].unique().to_list()}
            mean = sum(by_level[key][lv] * n for lv, n in weights.items()) / at.height
            assert mean == pytest.approx(point["pass1"], abs=1e-6)
    sel = out["allocators"][1]["run_ids"][0]
    with open_store(str(store_dir)) as st:
        steps = st.run_steps(sel)
        config = st.run(sel)["config"]
    config = json.loads(config) if isinstance(config, str) else config
    assert config["allocator"]["name"] == "selective"
    assert config["allocator"]["budget_kind"] == "tokens" and config["allocator"]["budget"] == out["tokens_per_step"]
    assert (steps["tokens_generated"] <= out["tokens_per_step"]).all(), "an allocator overspent the token budget"

    assert out["profile"] == "default" and out["seeds_by_allocator"] == {"uniform": 1, "selective": 1}
    sel_row = out["allocators"][1]
    assert len(sel_row["saving_ci90"]) == 2 and len(sel_row["final_pass1_ci90"]) == 2
    assert sel_row["final_pass1_ci90"][0] <= sel_row["final_pass1"] <= sel_row["final_pass1_ci90"][1]
    assert "best_saving_ci90" in out and 0 <= out["uniform_zero_signal_frac"] <= 1
    paths = write_report(out, tmp_path / "bench")
    assert [p.name for p in paths] == ["allocators-default.json", "allocators-default.html", "allocators-default.png",
                                       "allocators.md", "leverage.json", "leverage.png"]
    written = json.loads(paths[0].read_text())
    assert written["allocators"][0]["allocator"] == "uniform" and written["leverage"][0]["allocator"] == "selective"
    assert "## Profile `default`" in paths[3].read_text() and "| `selective` | 1 |" in paths[3].read_text()
    assert "Held-out pass@1 by level" in paths[3].read_text() and "| warm start |" in paths[3].read_text()
    assert "default" in json.loads(paths[4].read_text())["profiles"]
    assert paths[2].read_bytes()[:8] == paths[5].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_finished_run_with_the_same_config_is_reused(tmp_path):
    """`--keep-in`: a run finished in the store with exactly the comparison's config is found (an
    interrupted comparison picks up there); one with another config or not finished is not."""
    from benchmarks.compare import _config, finished_run
    from benchmarks.engine_bench import base_config

    base = base_config(["steps=4", "eval.every=2"])
    want = _config(base, "selective", 1, 500)
    assert finished_run(want, tmp_path / "none") is None
    with open_store(tmp_path) as st:
        other = st.create_run("compare-selective", _config(base, "selective", 2, 500).to_dict(), seed=2)
        crashed = st.create_run("compare-selective", want.to_dict(), seed=1)
        st.set_run_status(crashed, "crashed")
        assert finished_run(want, tmp_path) is None
        done = st.create_run("compare-selective", want.to_dict(), seed=1)
        for run_id in (other, done):
            st.set_run_status(run_id, "finished")
    found = finished_run(want, tmp_path)
    assert found is not None and found[0] == done and found[1] >= 0


def test_runs_kept_by_an_older_workbench_are_found_after_migrating_the_store(tmp_path):
    """A store kept with `--keep-in` by an older schema is migrated when the comparison opens it
    (a read-only open refuses an unmigrated store), and its finished runs are still found."""
    from benchmarks.compare import _config, finished_run
    from benchmarks.engine_bench import base_config
    from workbench.store import schema

    want = _config(base_config(["steps=4", "eval.every=2"]), "selective", 1, 500)
    with open_store(tmp_path) as st:
        done = st.create_run("compare-selective", want.to_dict(), seed=1)
        st.set_run_status(done, "finished")
        st._lake.write(lambda cur: cur.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                                               [str(schema.SCHEMA_VERSION - 1)]), "as an older workbench left it")
    with pytest.raises(Exception, match="needs a migration"):
        open_store(tmp_path, read_only=True).close()
    found = finished_run(want, tmp_path)
    assert found is not None and found[0] == done
    with open_store(tmp_path, read_only=True) as st:
        assert st.schema_version == schema.SCHEMA_VERSION


@pytest.mark.parametrize("profile", ["skewed", "long"])
def test_the_profiles_run_config_matches_its_comparison_settings(profile):
    """`configs/organism-<profile>.toml` runs what the comparison runs for that profile."""
    from pathlib import Path

    from workbench.config import load_config
    from benchmarks.compare import PROFILE_RUNS
    from benchmarks.engine_bench import base_config

    root = Path(__file__).resolve().parents[2]
    shipped = load_config(root / "configs" / f"organism-{profile}.toml")
    bench = base_config(list(PROFILE_RUNS[profile]))
    for get in (lambda c: c.steps, lambda c: c.eval.every, lambda c: c.task["profile"],
                lambda c: c.sampling.max_new_tokens, lambda c: c.allocator.prompts_per_step):
        assert get(shipped) == get(bench)
