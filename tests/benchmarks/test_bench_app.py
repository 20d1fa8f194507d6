"""`workbench bench app`: the dashboard's pages timed on a synthetic store built once, then reused (and on
its copy in a bucket); the bench's quantiles."""

import json
import os

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.dashboard import PAGES

runner = CliRunner()


def test_bench_app_builds_then_reuses_a_store(tmp_path):
    store = tmp_path / "bench"
    args = ["bench", "app", "--rollouts", "2048", "--repeats", "1", "--store", str(store), "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out["rollouts"] == 2048 and out["store_info"]["rollouts"] == 2048
    assert out["store_info"]["reused"] is False
    assert set(out["page_ms"]) == set(PAGES) and all(v > 0 for v in out["page_ms"].values())
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
    from benchmarks import app_bench

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(StoreError, match=r"no AWS_ENDPOINT_URL is set and moto's server is not installed"):
        with app_bench.s3_server():
            pass


def test_bench_quantiles_match_numpy():
    import numpy as np

    from benchmarks.app_bench import quantile, summary

    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0]
    for q in (0.5, 0.95, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))
    out = summary(values)
    assert out["median"] == 5.5 and out["p95"] == pytest.approx(9.55, abs=0.051) and out["max"] == 10.0
