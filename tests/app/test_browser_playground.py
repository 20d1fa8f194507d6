"""A person's journey in Debian's chromium (Playwright) against `workbench app` on a finished tiny run with
a weights-only snapshot every step: open the run, click a point of its reward curve, land on that step's
rollouts, send one to the Playground, sample 8 responses from two checkpoints (the initial model and the
one before that step), see each with its verdict; the URL of each view reopens it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_browser import CHROMIUM, ARTIFACTS, _goto, _settled, app_server, browser  # noqa: F401 - browser: a fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(scope="module")
def served(new_store, tiny_config, tmp_path_factory):
    from workbench.engine import run

    root = new_store(tmp_path_factory.mktemp("journey") / "store")
    rid = run(tiny_config(steps=5, eval__every=0, checkpoint__every=5, checkpoint__weights_every=1), store=str(root))
    with app_server(root, root / "app.log") as url:
        yield url, rid


def _samples(page) -> int:
    return page.locator(".playground-sample").count()


def test_from_a_curve_to_the_playground(served, browser):
    base, rid = served
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, f"{base}/live?run={rid}&refresh=0")
    chart = page.locator("[data-testid='stPlotlyChart']").first  # the reward curve
    points = chart.locator(".scatterlayer .trace").last.locator("path.point")
    assert points.count() == 5  # steps 1-5
    points.nth(2).click(force=True)  # step 3
    page.wait_for_url(re.compile(r".*/rollouts\?.*steps=3-3.*"), timeout=120_000)  # ?step=3, then the view written
    page.get_by_text("rollouts match").wait_for(timeout=120_000)
    _settled(page)
    assert "step 3" in page.locator("[data-testid='stHtml']").first.inner_text()
    matched = page.get_by_text("rollouts match").inner_text()
    rollouts_url = page.url

    page.get_by_text("sample it in the Playground").first.click()
    page.wait_for_url(re.compile(r".*/playground\?.*(step=3|ckpts=2).*"), timeout=120_000)
    page.get_by_role("button", name="Sample").wait_for(timeout=120_000)
    _settled(page)
    assert page.locator("[data-testid='stMultiSelect']").first.inner_text().count("2") >= 1  # checkpoint 2
    page.get_by_text("the initial model").click()
    _settled(page)
    page.get_by_role("button", name="Sample").click()
    page.wait_for_function("document.querySelectorAll('.playground-sample').length === 16", timeout=240_000)
    _settled(page)
    columns = page.locator("[data-testid='stHeading']").all_inner_texts()
    assert any("initial model" in c for c in columns) and any("checkpoint 2" in c for c in columns)
    print("journey:", page.get_by_text(re.compile(r"\d+/8 correct")).all_inner_texts())  # for the log
    verdicts = page.locator(".playground-sample b").all_inner_texts()
    assert len(verdicts) == 16 and all(v[:1] in "✓✗" for v in verdicts)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-journey.png"), full_page=True)
    playground_url = page.url
    assert "ckpts=2" in playground_url and "initial=1" in playground_url

    # each view's URL reopens it
    _goto(page, rollouts_url)
    page.get_by_text("rollouts match").wait_for(timeout=120_000)
    assert page.get_by_text("rollouts match").inner_text() == matched
    _goto(page, playground_url)
    assert page.locator("[data-testid='stMultiSelect']").first.inner_text().count("2") >= 1
    assert page.get_by_role("checkbox", name="the initial model").is_checked()
    assert page.locator("[data-testid='stException']").count() == 0
