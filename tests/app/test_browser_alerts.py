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
