"""R2 load, the CI version: three runs, the dashboard's pages, a notebook-style reader and live control on
one store for 2 minutes: no failed commit, no reader error, no torn read, every rejection intended."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_two_minutes_of_load_on_one_store(organism_models, tmp_path):
    from workbench.experiments.soak import bench_soak

    out = bench_soak(2.0, models=organism_models, workdir=tmp_path / "soak")
    assert out["failed_commits"] == 0, out["errors"]
    assert out["reader_errors"] == 0, out["errors"]
    assert out["torn_reads"] == 0, out["errors"]
    assert out["control_api_errors"] == 0, out["errors"]
    assert out["reader_queries"] >= 50 and out["steps_committed"] >= 30  # it did run under load
    assert out["controls_applied"] >= 5
    assert out["controls_rejected"] == out["controls_rejected_intended"]
    assert out["controls_pending"] == 0
    assert set(out["final_status"].values()) == {"stopped"}
