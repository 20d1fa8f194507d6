"""In a real browser (Debian's chromium through Playwright, against `workbench app`): the Rollouts page's
export button downloads the rows that `workbench export`, run as a command, writes for the same filters (a
step range and a verdict from the page's URL), each byte for byte, as JSON lines and as Parquet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from test_browser import CHROMIUM, IDLE, _goto, _rerun, app_server, browser  # noqa: F401 - browser: a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """Four steps of 6 rollouts logged through the SDK (rewards 0, 0.5, 1 per prompt)."""
    path = tmp_path_factory.mktemp("browser-export") / "store"
    run = workbench.init(store=path, name="export-me", heartbeat_s=0, guards=False, commit_window_s=0)
    for step in range(4):
        run.log_rollouts(step, prompts=["A", "A", "A", "B", "B", "B"],
                         responses=[f"s{step}-{i}" for i in range(6)], rewards=[0.0, 0.5, 1.0] * 2,
                         token_ids=[[1, 2, i] for i in range(6)], token_logprobs=[[-0.5, -0.25, -1.0]] * 6)
    run.finish()
    return path, run.run_id


@pytest.fixture(scope="module")
def server(lake):
    root, _ = lake
    with app_server(root, root.parent / "app.log") as url:
        yield url


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_button_downloads_what_the_command_writes(lake, server, browser, tmp_path, fmt):
    root, run_id = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    _goto(page, f"{server}/rollouts?run={run_id}&steps=1-2&verdict=correct")
    assert page.locator(IDLE).count() == 1
    body = page.locator("[data-testid='stMain']").inner_text()
    assert "8 rollouts match" in body, body[:3000]  # steps 1-2, reward >= 0.5: two a prompt a step, two prompts
    page.get_by_text("export these rollouts").click()
    if fmt != "jsonl":
        _rerun(page, page.locator("[data-testid='stRadio']").filter(has_text="format").get_by_text(fmt, exact=True).click)
        assert page.get_by_role("button", name=f"download data.{fmt}").count() == 1
    with page.expect_download(timeout=120_000) as caught:
        page.get_by_role("button", name=f"download data.{fmt}").click()
    got = tmp_path / f"page.{fmt}"
    caught.value.save_as(got)
    page.close()
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "export", run_id, str(tmp_path / "cli"),
                           "--format", fmt, "--step-min", "1", "--step-max", "2", "--verdict", "correct",
                           "--store", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = (tmp_path / "cli" / f"data.{fmt}").read_bytes()
    # the same rows, byte for byte each; their order is DuckDB's (an export streams, unsorted: sorting 1M
    # rows with their token lists would hold them in memory), which parallel scans may vary run to run
    if fmt == "jsonl":
        assert sorted(got.read_bytes().splitlines()) == sorted(expected.splitlines())
        assert len(expected.splitlines()) == 8
    else:
        import pyarrow.parquet as pq

        key = [("step", "ascending"), ("stage", "ascending"), ("prompt_id", "ascending"), ("idx", "ascending")]
        a, b = pq.read_table(got), pq.read_table(tmp_path / "cli" / f"data.{fmt}")
        assert a.schema == b.schema and a.sort_by(key).to_pylist() == b.sort_by(key).to_pylist()
