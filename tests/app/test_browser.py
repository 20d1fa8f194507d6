"""End to end in a real browser: Debian's chromium driven by Playwright against `workbench app` on a
live organism run (launched as its own process). Browse to a rollout and on to its prompt, change
the budget, switch the allocator, pause the run — all from the UI — then check in the store that the
engine applied each command. A screenshot of every page goes to test-artifacts/."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

# the server, the browser and the port are this folder's (tests/app/conftest.py); the other browser
# test files import them from here, with the page helpers below
from conftest import CHROMIUM, ROOT, app_server, browser, free_port  # noqa: F401 - browser: a fixture
from waiting import wait_until
from workbench import dashboard

_free_port = free_port
ARTIFACTS = ROOT / "test-artifacts"
PAGES = list(dashboard.PAGES)
"""Every page, in menu order (the one list: `workbench.dashboard.MENU`)."""
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def _steps(root, run_id):
    from workbench.store import open_store

    with open_store(root) as store:
        return store.run_steps(run_id)


@pytest.fixture(scope="module")
def live_run(new_store, tiny_config, tmp_path_factory):
    """A long organism run going in its own process; stopped (then killed if need be) at the end."""
    from workbench.control import launch, stop
    from workbench.store import open_store

    root = new_store(tmp_path_factory.mktemp("browser") / "store")
    cfg = tiny_config(name="browser-live", steps=5000, eval__every=3, checkpoint__every=50)
    run_id = launch(cfg.to_dict(), store=str(root))
    wait_until(lambda: _steps(root, run_id).height >= 2, 240, "the run's first steps", every=0.5)
    yield root, run_id
    with open_store(root) as store:
        info = store.run(run_id)
        if info["status"] in ("running", "paused", "created"):
            try:
                stop(store, run_id, who="test")
            except Exception:  # noqa: BLE001 - best effort; the kill below ends it anyway
                pass
    pid = info.get("pid")
    if pid and not _ends(pid, 60):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ends(pid: int, timeout: float) -> bool:
    """Whether process `pid` is gone within `timeout` seconds. `launch` started it from this process,
    so once it exits it stays a zombie (and `kill(pid, 0)` still succeeds) until it is reaped here."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:  # not a child of this process (or reaped already)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def server(live_run):
    root, _ = live_run
    with app_server(root, root / "app.log") as url:
        yield url


RUN_COUNTER = """
window.__scriptRuns = 0;
new MutationObserver((changes) => {
  for (const c of changes) if (c.target.getAttribute('data-test-script-state') === 'running') window.__scriptRuns++;
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-test-script-state']});
"""
"""Counts in the page how often its script starts running (its app element's state turns "running")."""


def _settled(page):
    """Wait until the page's script is idle and what it drew has loaded."""
    page.wait_for_selector(IDLE, timeout=120_000)
    # lazily loaded elements (st.html, charts) show a skeleton until their code has loaded
    page.wait_for_function("!document.querySelector(\"[data-testid='stSkeleton']\")", timeout=60_000)


def _rerun(page, act):
    """Do `act()` (a click, a key press), then wait until the script has run for it and is idle again
    (right after the action the script still reads "not running": the server has not started it yet)."""
    before = page.evaluate("window.__scriptRuns")
    act()
    page.wait_for_function(f"window.__scriptRuns > {before}", timeout=120_000)
    _settled(page)


def _click(page, target):
    """Click `target` (a locator) and wait for the rerun it starts (`_rerun`)."""
    _rerun(page, target.click)


def _open_option(page, box, name, attempts=4):
    """Open the select box `box` and return its option `name`, visible. A rerun of the page (the run's
    step arriving, a fragment refreshing) can redraw the box and close its list before the option is
    clicked: it is opened again then."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    option = page.get_by_role("option", name=name, exact=True)
    for attempt in range(attempts):
        _settled(page)
        box.click()
        try:
            option.wait_for(state="visible", timeout=10_000)
            return option
        except PlaywrightTimeout:  # the list closed under a rerun
            if attempt == attempts - 1:
                raise
    return option


def _goto(page, url, settle=True):
    """Load `url` and wait until its page has rendered and (`settle`) its script is idle. A page that
    refreshes itself faster than a busy machine runs it may never be idle: pass settle=False for it."""
    if not page.evaluate("'__scriptRuns' in window"):
        page.add_init_script(RUN_COUNTER)  # every document this page loads from now on
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']", timeout=120_000)
    # a new page's script may not have started when the app shell is there (the script state reads "not
    # running" then, too): wait for its title, which every page writes first, before waiting for idle
    page.wait_for_selector("h1", timeout=120_000)
    if settle:
        _settled(page)



def open_rollouts(page, run_id, name):
    """Open the Rollouts page on `run_id` (the page fixture's `base` server), check it drew no exception and
    keep a full-page screenshot named after `name` in the test artifacts."""
    _goto(page, f"{page.base}/rollouts?run={run_id}")
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-rollouts-{name}.png"), full_page=True)

def _open(page, base, name):
    # the live page refreshes itself every few seconds; on a busy 2-core machine one refresh can take
    # longer than that, so the test asks for a slow refresh to find the page idle between them
    _goto(page, f"{base}/{'' if name == 'runs' else name}" + ("?refresh=20" if name == "live" else ""))


def _shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)


def _control(root, run_id, command):
    from workbench.store import open_store

    with open_store(root) as store:
        rows = [r for r in store.controls(run_id).to_dicts() if r["command"] == command]
    return rows[-1] if rows else None


def test_browse_and_steer_a_live_run(live_run, server, browser):
    root, run_id = live_run
    page = browser.new_page(viewport={"width": 1400, "height": 1000})

    # every page renders without an exception; keep a screenshot of each
    for name in PAGES:
        _open(page, server, name)
        assert page.locator("[data-testid='stException']").count() == 0, name
        _shot(page, name)

    # browse to a rollout: the latest step's groups, then one prompt's story
    _open(page, server, "rollouts")
    assert page.get_by_text("rollouts match").count() == 1
    first_group = page.locator("[data-testid='stHtml']").first
    assert "step " in first_group.inner_text()
    page.get_by_text("this prompt's story").first.click()
    page.wait_for_url("**/prompt?*", timeout=60_000)
    page.get_by_text("Grants and reasons").wait_for(timeout=120_000)  # the prompt page's script has run
    _settled(page)
    assert page.get_by_text("Grants and reasons").count() == 1
    assert page.locator("[data-testid='stException']").count() == 0
    _shot(page, "prompt-from-rollout")

    # the control panel on the live page
    _open(page, server, "live")
    slider = page.locator("[data-testid='stSlider']").filter(has_text="budget per step").get_by_role("slider")
    start = int(slider.get_attribute("aria-valuetext"))
    assert start == 32
    slider.focus()
    for _ in range(8):
        slider.press("ArrowLeft")
    assert int(slider.get_attribute("aria-valuetext")) == 24
    _click(page, page.get_by_role("button", name="Set budget"))

    box = page.locator("[data-testid='stSelectbox']").filter(has_text="allocator")
    _click(page, _open_option(page, box, "multistage"))
    _click(page, page.get_by_role("button", name="Switch to multistage"))

    # the engine applies each command at a step boundary; let one step run under the new budget and
    # allocator before pausing, or a quick click could pause the run at that same boundary (it did once
    # on another machine: all three applied at one step, and no step under the new settings existed)
    budget = wait_until(lambda: (c := _control(root, run_id, "set_budget")) and c["status"] != "pending" and c,
                        240, "set_budget applied", every=0.5)
    alloc = wait_until(lambda: (c := _control(root, run_id, "set_allocator")) and c["status"] != "pending" and c,
                       240, "set_allocator applied", every=0.5)
    first_new = max(budget["applied_step"] or 0, alloc["applied_step"] or 0)
    wait_until(lambda: (s := _steps(root, run_id)).filter(s["step"] >= first_new).height >= 1, 240,
               "a step under the new settings", every=0.5)

    _click(page, page.get_by_role("button", name="Pause"))
    _shot(page, "live-after-commands")

    pause = wait_until(lambda: (c := _control(root, run_id, "pause")) and c["status"] != "pending" and c,
                       240, "pause applied", every=0.5)
    for c in (budget, alloc, pause):
        assert c["status"] == "applied", c
        assert c["who"] == "dashboard"
    assert json.loads(budget["args"]) == {"kind": "rollouts", "amount": 24}
    assert json.loads(alloc["args"])["name"] == "multistage"

    from workbench.store import open_store

    with open_store(root) as store:
        assert store.run(run_id)["status"] == "paused"
        steps = store.run_steps(run_id)
    after = steps.filter(steps["step"] >= first_new)
    assert after.height >= 1
    assert set(after["budget"]) == {24}
    assert set(after["allocator"]) == {"multistage"}

    # the page shows the outcomes in its command history. Its live reads are cached for LIVE_TTL (2 s), so a
    # page opened right after the pause can still show the status read just before it: open it again until
    # the cache has moved on
    def shows_paused():
        _open(page, server, "live")
        return page.get_by_text("paused").count() >= 1

    wait_until(shows_paused, 60, "the live page shows the pause", every=0.5)
    _shot(page, "live-paused")
