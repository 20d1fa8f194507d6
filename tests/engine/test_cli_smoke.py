"""CleanRL-style smoke test: the real `workbench run` command in a subprocess with a tiny budget,
then assertions on what reached the store."""

from __future__ import annotations

import json
import subprocess
import sys

from workbench.store import open_store


def test_workbench_run_subprocess(store_dir, tiny_config, tmp_path):
    from workbench.config_docs import to_toml

    cfg = tiny_config(steps=2)
    path = tmp_path / "tiny.toml"
    path.write_text(to_toml(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", str(path), "--store", str(store_dir), "--quiet",
         "--name", "smoke", "--set", "allocator.budget=24", "--set", "allocator.params.n=3"],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    with open_store(str(store_dir)) as st:
        runs = st.list_runs()
        assert runs.height == 1
        run = runs.row(0, named=True)
        assert run["name"] == "smoke" and run["status"] == "finished"
        rid = run["run_id"]
        config = st.run(rid)["config"]
        config = config if isinstance(config, dict) else json.loads(config)
        assert config["allocator"]["budget"] == 24
        steps = st.run_steps(rid)
        assert steps["step"].to_list() == [1, 2]
        assert (steps["rollouts"] == 24).all()
        assert st.count_rollouts(rid) == 48
    assert "held-out pass@1" in out.stdout


def test_bad_config_rejected_before_anything_starts(store_dir):
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "--store", str(store_dir), "--set", "optim.lr=-1"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 1
    assert "optim.lr" in out.stderr
    assert not (store_dir / "catalog.sqlite").exists()


def test_workbench_demo_trains_with_its_progress_bar_and_says_how_to_query(store_dir, tiny_config, tmp_path):
    """The README's main job, `workbench demo` (the path with the progress bar, not `--quiet`), in a folder
    whose `configs/organism.toml` is the tiny run, without the dashboard."""
    from workbench.config_docs import to_toml

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "organism.toml").write_text(to_toml(tiny_config(eval__every=0)))
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "demo", "--no-app", "--steps", "2", "--store",
                          str(store_dir)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Query it: `workbench runs --store" in out.stdout
    with open_store(str(store_dir)) as st:
        (rid,) = st.list_runs()["run_id"].to_list()
        assert st.run(rid)["status"] == "finished" and st.run_steps(rid)["step"].to_list() == [1, 2]
