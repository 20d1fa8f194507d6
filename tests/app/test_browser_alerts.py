"""In a real browser (Debian's chromium through Playwright, against `workbench app`): the Alerts page
lists a run's alerts with what fired them, one click opens the Rollouts page filtered to exactly the
alert's rollouts, acknowledging one is recorded in the store, the Run page shows the banner, and a bad
guard in the form is refused with one line and nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest

import synth
from test_browser import ARTIFACTS, CHROMIUM, _click, _goto, _settled, app_server, browser  # noqa: F401 - browser: a fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """A synthetic run with one rollout alert (3 rollouts of step 2) and one metric alert."""
    from workbench.store import open_store

    path = tmp_path_factory.mktemp("browser-alerts") / "store"
    run_id = synth.fill(path, runs=("uniform",), steps=4)[0]
    with open_store(path) as st:
        keys = st.rollouts(run_id, step_min=2, step_max=2, limit=3).to_dicts()
        text = st.add_alert(run_id, dict(
            guard="degenerate_text", rule="share(repeat_frac >= 0.75 and chars >= 6) > 0.25", window_steps=1,
            action="alert", first_step=2, step=2, evidence={"2": {"rollouts": 16, "matched": 3}},
            message="guard 'degenerate_text' fired at step 2: share(repeat_frac >= 0.75 and chars >= 6) > 0.25"),
            keys)
        st.add_alert(run_id, dict(
            guard="entropy_collapse", rule="rollout/entropy_mean < 0.2 * baseline(rollout/entropy_mean, 5)",
            window_steps=3, action="alert", first_step=2, step=4, evidence={"4": {"rollout/entropy_mean": 0.01}},
            message="guard 'entropy_collapse' fired at steps 2-4"))
    return path, run_id, text


@pytest.fixture(scope="module")
def server(lake):
    root, _, _ = lake
    with app_server(root, root.parent / "app.log") as url:
        yield url


def test_alerts_panel_links_to_exactly_the_alerts_rollouts(lake, server, browser):
    from workbench.store import open_store

    root, run_id, alert_id = lake
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _goto(page, f"{server}/live?run={run_id}&refresh=0")
    assert page.get_by_text("fired at steps 2-4 (and 1 more)").count() == 1  # the banner on the Run page
    _goto(page, f"{server}/alerts?run={run_id}")
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    assert page.get_by_text("guard 'entropy_collapse' fired at steps 2-4").count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-alerts.png"), full_page=True)

    _click(page, page.get_by_role("button", name="acknowledge").first)  # newest first: entropy_collapse
    with open_store(root) as st:
        statuses = dict(zip(st.alerts(run_id)["guard"].to_list(), st.alerts(run_id)["status"].to_list()))
    assert statuses == {"entropy_collapse": "acknowledged", "degenerate_text": "open"}

    # a bad rule in the guard form: one line, nothing stored
    page.get_by_label("name").fill("spike")
    page.get_by_label("rule (one line)").fill("train/loss >")
    _click(page, page.get_by_role("button", name="Check and add"))
    assert page.get_by_text("found the end of the rule").count() == 1
    with open_store(root) as st:
        assert st.controls(run_id).height == 0

    page.get_by_text("its 3 rollouts").click()
    page.wait_for_url(f"**/rollouts?*alert={alert_id}*", timeout=60_000)
    page.wait_for_selector("h1", timeout=120_000)  # the new page's script has started: wait for its end
    _settled(page)
    assert page.get_by_text("3 rollouts match").count() == 1
    with open_store(root) as st:
        want = st.rollouts(run_id, alert_id=alert_id, limit=10)["response"].to_list()
    body = page.locator("[data-testid='stMain']").inner_text()
    assert all(r in body for r in want)
    page.screenshot(path=str(ARTIFACTS / "dashboard-alert-rollouts.png"), full_page=True)


def _rollouts_page(page, url_part: str) -> str:
    """Wait for the Rollouts page a drill opened (its URL holding `url_part`); its matches line."""
    page.wait_for_url(f"**/rollouts?*{url_part}*", timeout=120_000)
    page.get_by_text("rollouts match").wait_for(timeout=120_000)
    _settled(page)
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    return page.get_by_text("rollouts match").inner_text()


def test_allocation_bars_grants_and_alert_points_open_the_rollouts_behind_them(lake, server, browser):
    """A bar of the Allocation page's budget chart opens that step's rollouts; a grant's row opens its
    prompt's rollouts in the step; a point of the Alerts page's metric curve opens that step's rollouts."""
    from workbench.store import open_store

    root, run_id, _ = lake
    with open_store(root) as st:
        grants = st.allocations(run_id, step=3).sort(["stage", "granted", "prompt_id"], descending=[False, True, False])
        per_step = {s: st.count_rollouts(run_id, step_min=s, step_max=s) for s in range(4)}
        second = grants["prompt_id"][1]
        in_step = st.count_rollouts(run_id, step_min=3, step_max=3, prompt_id=second)
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    _goto(page, f"{server}/allocation?run={run_id}")
    bars = page.locator("[data-testid='stPlotlyChart']").first.locator(".barlayer .trace").first.locator("path")
    assert bars.count() == 4  # steps 0-3, stage 0
    bars.nth(1).click(force=True)  # step 1
    matched = _rollouts_page(page, "steps=1-1")
    assert matched.startswith(f"{per_step[1]} rollouts match"), matched

    _goto(page, f"{server}/allocation?run={run_id}")
    grid = page.locator("[data-testid='stDataFrame']").last
    grid.scroll_into_view_if_needed()
    frame = grid.bounding_box()
    page.mouse.click(frame["x"] + 18, frame["y"] + 35 * 2 + 17)  # the second row's checkbox
    matched = _rollouts_page(page, f"prompt={second}")
    assert "steps=3-3" in page.url and matched.startswith(f"{in_step} rollouts match"), (page.url, matched)

    _goto(page, f"{server}/alerts?run={run_id}")
    curve = page.locator("[data-testid='stPlotlyChart']").last  # the metric a rule may read, per step
    curve.scroll_into_view_if_needed()
    points = curve.locator(".scatterlayer .trace").first.locator("path.point")
    assert points.count() == 4
    points.nth(2).click(force=True)  # step 2
    matched = _rollouts_page(page, "steps=2-2")
    assert matched.startswith(f"{per_step[2]} rollouts match"), matched
    page.close()
