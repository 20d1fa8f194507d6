"""R2 load, the CI version: three runs, the dashboard's pages, a notebook-style reader and live control on
one store for 2 minutes: no failed commit, no reader error, no torn read, every rejection intended; the
dashboard's page timings recorded per page (a person's browsing), and the runs' steps/s alone and beside it."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_two_minutes_of_load_on_one_store(organism_models, tmp_path):
    from workbench.experiments.soak import bench_soak

    out = bench_soak(2.0, models=organism_models, workdir=tmp_path / "soak", baseline_s=15)
    assert out["failed_commits"] == 0, out["errors"]
    assert out["reader_errors"] == 0, out["errors"]
    assert out["torn_reads"] == 0, out["errors"]
    assert out["control_api_errors"] == 0, out["errors"]
    assert out["reader_queries"] >= 50 and out["steps_committed"] >= 30  # it did run under load
    assert out["controls_applied"] >= 5
    assert out["controls_rejected"] == out["controls_rejected_intended"]
    assert out["controls_pending"] == 0
    assert set(out["final_status"].values()) == {"stopped"}
    pages = out["page_ms"]
    assert pages["pattern"] == "person"
    from workbench.dashboard import PAGES

    assert set(pages["pages"]) == {*PAGES, "live (refresh)"}
    timed = {name: p for name, p in pages["pages"].items() if p["n"]}
    assert all(0 < p["p50_ms"] <= p["p95_ms"] for p in timed.values()), timed
    # The pages in menu order, a second's look at each, the live page refreshed 3 times: under this load a
    # page takes 7-14 s on an idle 2-core machine and ~20 s beside other jobs (2026-12-03, dev/LOG.md), so
    # 2 minutes reach the first two to six pages. The CI form checks that what it reaches is timed; the
    # 5-minute bench judges the times (issue #34's targets).
    assert {"runs", "live"} <= set(timed), sorted(timed)
    assert pages["pages"]["live (refresh)"]["n"] >= 1
    assert 0 < pages["overall"]["p50_ms"] <= pages["overall"]["p95_ms"]
    rates = out["steps_per_s"]
    assert rates["alone"] > 0 and rates["with_dashboard"] > 0 and rates["alone_s"] == 15
