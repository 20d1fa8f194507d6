"""In a real browser (Debian's chromium through Playwright, against `workbench app`): a run imported
from another engine opened on every page with no exception, its charts drawn, and nothing offered to
steer it; and the Runs page answering at `/runs` as well as at `/`."""

from __future__ import annotations

from pathlib import Path

import pytest

import synth
from workbench import dashboard
from test_browser import ARTIFACTS, CHROMIUM, IDLE, _goto, app_server, browser  # noqa: F401 - browser: a fixture

PAGES = [p for p in dashboard.PAGES if p not in ("alerts", "compare-prompts")]
"""The pages that pick one run with the run picker this test reads (from the one list,
`workbench.dashboard.MENU`): the Alerts page filters by run and Compare prompts lists several runs."""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("browser-imported") / "store"
    synth.fill(path, steps=4)
    return path, synth.fill_imported(path, steps=8, sparse=("p07",))


@pytest.fixture(scope="module")
def server(lake):
    root, _ = lake
    with app_server(root, root.parent / "app.log") as url:
        yield url


def _visit(page, url):
    _goto(page, url)
    assert page.locator("[data-testid='stException']").count() == 0, url
    assert page.get_by_text("Page not found").count() == 0, url


def test_the_runs_page_answers_at_root_and_at_runs(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    for path in ("", "runs"):
        _visit(page, f"{server}/{path}")
        assert page.locator("h1").filter(has_text="Runs").count() == 1, path
        assert page.locator("[data-testid='stDataFrame']").count() >= 1, path
    assert page.url.rstrip("/").endswith("/runs")
    page.close()


def test_an_imported_run_on_every_page(lake, server, browser):
    _, run_id = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    for name in PAGES:
        _visit(page, f"{server}/{name}?run={run_id}" + ("&refresh=0" if name == "live" else ""))
        assert page.locator(IDLE).count() == 1
        if name != "runs":
            picker = "stMultiSelect" if name == "compare" else "stSelectbox"
            box = page.locator(f"[data-testid='{picker}']").first  # the run picker shows the imported run
            shown = box.inner_text() + " ".join(i.input_value() for i in box.locator("input").all())
            assert "verl-import · imported" in shown, (name, shown)
        if name in ("live", "allocation", "compare", "prompt"):  # their charts are drawn, not left blank
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-imported-{name}.png"), full_page=True)
        if name == "live":
            assert page.get_by_text("read-only").count() >= 1
            assert page.get_by_role("button", name="Pause").count() == 0
            assert page.get_by_role("button", name="Set budget").count() == 0
        if name == "allocation":
            assert page.get_by_text("logged no allocation decisions").count() == 1
    page.close()
