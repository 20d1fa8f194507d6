"""`workbench app` (the Streamlit command line and the store it passes) and `workbench bench app`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.commands import app as app_cmd

runner = CliRunner()


def test_app_command_starts_streamlit_on_the_store(monkeypatch, tmp_path):
    seen = {}

    def fake_exec(path, argv, env):
        seen["argv"], seen["env"] = argv, env
        assert path == argv[0]

    monkeypatch.setattr(app_cmd.os, "execve", fake_exec)
    result = runner.invoke(app, ["app", "--store", str(tmp_path), "--port", "8765", "--headless"])
    assert result.exit_code == 0, result.output
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "streamlit", "run"] and Path(argv[4]) == app_cmd.SERVE  # main.py behind the gate
    assert argv[argv.index("--server.port") + 1] == "8765"
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"  # this machine only, unless told
    assert argv[argv.index("--server.headless") + 1] == "true"
    assert argv[argv.index("--client.toolbarMode") + 1] == "viewer"  # the toolbar has no 'Deploy' button
    assert argv[-3:] == ["--", "--store", str(tmp_path.resolve())]
    assert seen["env"]["WORKBENCH_STORE"] == str(tmp_path.resolve())


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_app_refuses_a_path_that_is_not_a_store(tmp_path, kind):
    """A file, or a folder of other things, is refused with one line before any server starts (a
    server would outlive the timeout)."""
    import subprocess
    import sys

    path = tmp_path / "passwd"
    if kind == "file":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    else:
        path.mkdir()
        (path / "notes.txt").write_text("not a store\n")
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "app", "--store", str(path), "--headless",
                          "--port", "8766"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and str(path) in out.stderr


def test_every_page_is_timed():
    pages = {p.stem for p in (app_cmd.APP_DIR / "app_pages").glob("*.py")}
    assert {Path(p).stem for p in app_cmd.PAGES.values()} == pages


def test_bench_app_builds_then_reuses_a_store(tmp_path):
    store = tmp_path / "bench"
    args = ["bench", "app", "--rollouts", "2048", "--repeats", "1", "--store", str(store), "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out["rollouts"] == 2048 and out["store_info"]["rollouts"] == 2048
    assert out["store_info"]["reused"] is False
    assert set(out["page_ms"]) == set(app_cmd.PAGES) and all(v > 0 for v in out["page_ms"].values())
    # the prompt table of the store's two runs (same prompt pool): every prompt drawn in either run
    table = out["prompt_table"]
    assert table["runs"] == 2 and len(out["store_info"]["run_ids"]) == 2 and table["median_ms"] > 0
    assert 0 < table["prompts"] <= 7_500
    again = runner.invoke(app, [*args, "--pages", "compare-prompts"])
    assert json.loads(again.stdout)["store_info"]["reused"] is True
    assert set(json.loads(again.stdout)["page_ms"]) == {"compare-prompts"}


@pytest.mark.slow  # a moto server in a subprocess, the store copied into it, one page timed on both: ~20 s
def test_bench_app_s3_times_the_store_and_its_copy_side_by_side(tmp_path, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "WORKBENCH_CATALOG"):
        monkeypatch.delenv(name, raising=False)
    args = ["bench", "app", "--rollouts", "2048", "--repeats", "2", "--store", str(tmp_path / "b"), "--s3",
            "--pages", "rollouts", "--json"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    s3 = res["s3"]
    assert s3["store"].startswith("s3://workbench-bench/bench-app-2048-")
    assert s3["copy"]["rows"]["rollouts"] == 4096 and s3["copy"]["files"] >= 2
    for side in (res["pages"]["rollouts"], s3["pages"]["rollouts"]):
        for key in ("cold", "cached", "cold_cpu"):
            assert 0 < side[key]["median"] <= side[key]["p95"] <= side[key]["max"]
    assert res["page_ms"] == {"rollouts": res["pages"]["rollouts"]["cold"]["median"]}  # the old fields stay
    assert res["s3_over_local"]["rollouts"]["cold_p95"] > 0
    assert s3["prompt_table"]["prompts"] == res["prompt_table"]["prompts"] > 0
    assert "AWS_ENDPOINT_URL" not in os.environ and "AWS_SECRET_ACCESS_KEY" not in os.environ  # the bench's own


def test_bench_app_s3_without_a_server_or_moto_says_so(monkeypatch):
    import importlib.util

    from workbench.errors import StoreError
    from workbench.experiments import app_bench

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(StoreError, match=r"no AWS_ENDPOINT_URL is set and moto's server is not installed"):
        with app_bench.s3_server():
            pass


def test_bench_quantiles_match_numpy():
    import numpy as np

    from workbench.experiments.app_bench import quantile, summary

    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0]
    for q in (0.5, 0.95, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))
    out = summary(values)
    assert out["median"] == 5.5 and out["p95"] == pytest.approx(9.55, abs=0.051) and out["max"] == 10.0
