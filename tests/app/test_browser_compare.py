"""In a real browser (Debian's chromium through Playwright, against `workbench app` on a store of two of
our runs and an imported one): no page asks anything of a host other than 127.0.0.1; on Compare
prompts, filtering the prompt table, selecting a row, and clicking a point of the scatter each open that
prompt's responses side by side, one group per run."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest

import synth
from test_browser import ARTIFACTS, CHROMIUM, IDLE, PAGES, _goto, _rerun, app_server, browser  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
SIDE_BY_SIDE = "response (tokens coloured by entropy)"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("browser-compare") / "store"
    ids = synth.fill(path, steps=6)
    return path, ids, synth.fill_imported(path, steps=5)


@pytest.fixture(scope="module")
def server(lake):
    root = lake[0]
    with app_server(root, root.parent / "app.log") as url:
        yield url


def _shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def _selected_prompt(page) -> str:
    """The prompt the side-by-side view shows (its selectbox's value)."""
    box = page.locator("[data-testid='stSelectbox']").filter(has_text="prompt").last
    shown = box.inner_text() + " ".join(i.input_value() for i in box.locator("input").all())
    return shown.strip().removeprefix("prompt").strip()


def _groups(page) -> list[str]:
    return [h.inner_text() for h in page.locator("[data-testid='stHtml']").all() if SIDE_BY_SIDE in h.inner_text()]


TAB_ICON_SET = """() => {
  const link = document.querySelector("link[rel~='icon']");
  return !!link && !(link.getAttribute('href') || '').endsWith('favicon.png');
}"""
"""The page has replaced Streamlit's default tab icon with its own."""


def test_no_request_leaves_this_machine(lake, server, browser):
    _, ids, _ = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside = []

    def watch(request):
        host = urlparse(request.url).hostname
        if request.url.split(":", 1)[0] in ("http", "https", "ws", "wss") and host != "127.0.0.1":
            outside.append(request.url)

    page.on("request", watch)
    for name in ["", *PAGES, "compare-prompts"]:
        query = f"?run={ids[0]}" + ("&refresh=0" if name == "live" else "")
        _goto(page, f"{server}/{name}{query}")
        assert page.locator("[data-testid='stException']").count() == 0, name
        # the tab's icon follows the page's once the script has run (a Material icon would be fetched then);
        # lazily loaded parts were waited for by `_goto`
        page.wait_for_function(TAB_ICON_SET, timeout=60_000)
        page.wait_for_load_state("networkidle")
    assert outside == [], f"requests that left 127.0.0.1: {outside}"
    page.close()


def test_prompt_table_scatter_and_side_by_side(lake, server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    _goto(page, f"{server}/compare-prompts")
    assert page.locator("[data-testid='stException']").count() == 0
    caption = page.get_by_text("prompts · pass rates over").inner_text()
    total = int(caption.split(" of ")[1].split()[0])
    assert total == len(synth.PROMPTS) + len(synth.EVAL_PROMPTS)

    # the text filter narrows the table (and the caption says so)
    box = page.locator("[data-testid='stTextInput']").filter(has_text="prompt contains").locator("input")
    box.fill("*3=")
    _rerun(page, lambda: box.press("Enter"))
    assert page.get_by_text(f"{len(synth.EVAL_PROMPTS)} of {total} prompts").count() == 1
    box.fill("")
    _rerun(page, lambda: box.press("Enter"))

    # selecting a table row opens its prompt: the grid is a canvas, so click its selection column
    grid = page.locator("[data-testid='stDataFrame']").filter(has_text="prompt").last
    grid.scroll_into_view_if_needed()
    frame = grid.bounding_box()
    before = _selected_prompt(page)
    _rerun(page, lambda: page.mouse.click(frame["x"] + 18, frame["y"] + 35 * 2 + 17))  # the second row's checkbox
    after_row = _selected_prompt(page)
    assert after_row != before, (before, after_row)
    assert len(_groups(page)) == 2
    _shot(page, "compare-prompts-row")

    # clicking a point of the scatter opens that prompt
    page.wait_for_selector(".js-plotly-plot .scatterlayer .trace .points path", timeout=60_000)
    points = page.locator(".js-plotly-plot .scatterlayer .trace .points path")
    for i in range(points.count()):
        point = points.nth(i)
        point.scroll_into_view_if_needed()
        _rerun(page, lambda: point.click(force=True))
        if _selected_prompt(page) != after_row:
            break
    clicked = _selected_prompt(page)
    assert clicked != after_row, "no point click changed the prompt opened"
    assert len(_groups(page)) == 2
    headers = [h.inner_text() for h in page.locator("[data-testid='stHtml']").all()
               if "correct on this page" in h.inner_text()]
    assert len(headers) == 2 and all(clicked in h for h in headers), (clicked, headers)
    _shot(page, "compare-prompts-point")
    page.close()


def test_before_and_after_side_by_side(lake, server, browser):
    _, ids, _ = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    _goto(page, f"{server}/compare-prompts?run={ids[0]}")
    _rerun(page, page.get_by_text("two steps of one run").click)
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.get_by_text("step 5").count() >= 1
    assert len(_groups(page)) == 2
    _shot(page, "compare-prompts-before-after")
    page.close()


def test_a_rows_story_link_opens_the_prompt_page_at_run_a(lake, server, browser):
    """The prompt table's "its story in A" link (first column) opens the Prompt page at run A and that
    prompt, in a new tab as a link of the grid does."""
    _, ids, _ = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    _goto(page, f"{server}/compare-prompts")
    grid = page.locator("[data-testid='stDataFrame']").filter(has_text="prompt").last
    grid.scroll_into_view_if_needed()
    frame = grid.bounding_box()
    x, y = frame["x"] + 50, frame["y"] + 35 + 17  # the first row's link, right of the selection column
    page.mouse.move(x, y)
    page.wait_for_timeout(500)  # the grid turns a cell's text into a link only under a resting pointer
    with page.context.expect_page(timeout=60_000) as popup:
        page.mouse.click(x, y)
    story = popup.value
    story.wait_for_selector("h1", timeout=120_000)
    story.wait_for_selector(IDLE, timeout=120_000)
    assert f"/prompt?run={ids[1]}&prompt=" in story.url  # run A: the older of the two newest runs
    assert story.locator("h1").first.inner_text().startswith("Prompt")
    assert story.locator("[data-testid='stException']").count() == 0
    story.close()
    page.close()
