"""In a real browser (Debian's chromium through Playwright, against `workbench app`) on a live
asynchronous organism run (`pipeline.max_staleness = 1`, its own process): the Run page draws the
pipeline's panels, their bars and curves hold what the store holds for the steps drawn, the panels
follow the run as it goes, and the Rollouts page offers the staleness filter and the version span."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest

from test_browser import ARTIFACTS, CHROMIUM, _goto, _steps, app_server, browser  # noqa: F401 - a fixture
from waiting import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
PANELS = ["pipeline timeline: busy and idle seconds per step", "staleness of the rollouts consumed",
          "importance weight (stale tokens)", "clip, truncation and effective sample size",
          "KL(behaviour ‖ trainer), k3 estimate", "per-worker lanes: what each worker did, step by step (seconds)"]
FIGURES = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => ({
  title: ((g.layout.title || {}).text || '').replace(/<[^>]+>/g, ''),
  traces: (g._fullData || []).map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []),
                                          base: t.base == null ? null : Array.from(t.base)}))}))"""
"""What each Plotly figure of the page draws (its title, and per trace the values plotted)."""


@pytest.fixture(scope="module")
def async_run(new_store, tiny_config, tmp_path_factory):
    """A long pipelined organism run going in its own process (its own process group), killed at the end."""
    from workbench.control import launch
    from workbench.store import open_store

    root = new_store(tmp_path_factory.mktemp("browser-async") / "store")
    cfg = tiny_config(name="browser-async", steps=5000, eval__every=0, eval__at_start=False,
                      checkpoint__every=50, pipeline__max_staleness=1)
    run_id = launch(cfg.to_dict(), store=str(root))
    wait_until(lambda: _steps(root, run_id).height >= 3, 240, "the run's first steps", every=0.5)
    yield root, run_id
    with open_store(root) as store:
        pid = store.run(run_id).get("pid")
    if pid:  # a throwaway run in a throwaway store: ended at once (a stop waits for a step boundary)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_until(lambda: _gone(pid), 30, "the run's process to end", every=0.2)


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended (reaped here when it is this process's child, as a launched run is)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not a child of this process: ask whether it still exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


@pytest.fixture(scope="module")
def server(async_run):
    root, _ = async_run
    with app_server(root, root.parent / "app.log") as url:
        yield url


def _figures(page) -> dict[str, list[dict]]:
    return {f["title"]: f["traces"] for f in page.evaluate(FIGURES)}


def _metric(steps, key: str) -> dict[int, float]:
    from workbench.analysis.terms import metric_items

    out = {}
    for step, metrics in zip(steps["step"].to_list(), steps["metrics"].to_list()):
        got = dict(metric_items(metrics))
        if got.get(key) is not None:
            out[step] = got[key]
    return out


def test_the_run_page_draws_the_pipeline_of_a_live_async_run(async_run, server, browser):
    from workbench.store import open_store

    root, run_id = async_run
    page = browser.new_page(viewport={"width": 1400, "height": 3200})
    with open_store(root) as store:
        before = int(store.staleness_counts(run_id)["rollouts"].sum())
    _goto(page, f"{server}/live?run={run_id}&refresh=0")
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    assert page.get_by_text("Asynchronous pipeline").count() == 1
    wait_until(lambda: set(PANELS) <= set(_figures(page)), 60, "the pipeline's charts to draw", every=0.5)
    figs = _figures(page)
    with open_store(root) as store:
        steps = store.run_steps(run_id)
        counts = store.staleness_counts(run_id)
    # the timeline: per step drawn, the store's busy and idle seconds of both sides, idle on top of busy
    bars = {t["name"]: t for t in figs[PANELS[0]]}
    drawn = [int(x) for x in bars["generator busy"]["x"]]
    assert len(drawn) >= 3 and set(drawn) <= set(steps["step"].to_list())
    for name, key in (("generator busy", "timing_s/generator_busy"), ("generator idle", "timing_s/generator_idle"),
                      ("trainer busy", "timing_s/trainer_busy"), ("trainer idle", "timing_s/trainer_idle")):
        stored = _metric(steps, key)
        assert bars[name]["y"] == pytest.approx([stored[s] for s in drawn], rel=1e-6, abs=1e-9), name
    assert bars["trainer idle"]["base"] == pytest.approx(bars["trainer busy"]["y"])
    # the histogram: the rollouts consumed at each staleness, never above the bound of 1
    hist = figs[PANELS[1]][0]
    assert [int(x) for x in hist["x"]] in ([0], [0, 1]) and sum(hist["y"]) >= before >= 3 * 32
    assert sum(hist["y"]) <= int(counts["rollouts"].sum())
    # the correction's curves: the store's values at the steps that logged them
    weight = {t["name"]: t for t in figs[PANELS[2]]}
    stored = _metric(steps, "train/is_weight_mean")
    drawn_weights = {int(x): y for x, y in zip(weight["mean"]["x"], weight["mean"]["y"])
                     if y is not None and not math.isnan(y)}  # a gap where a step did not update
    assert drawn_weights == pytest.approx({s: stored[s] for s in drawn_weights}, rel=1e-6)
    assert set(drawn_weights) == {s for s in stored if s in drawn}
    # the lanes: the generator made the batches, the trainer trained, each bar where the store says it was
    lanes = {t["name"]: t for t in figs[PANELS[5]]}
    assert {"generate", "train"} <= set(lanes), sorted(lanes)
    assert set(lanes["generate"]["y"]) == {"generator"} and set(lanes["train"]["y"]) == {"trainer"}
    starts, ends = _metric(steps, "lane/trainer/train/start"), _metric(steps, "lane/trainer/train/end")
    stored = [ends[s] - starts[s] for s in starts]  # the run goes on: each bar drawn is one of the stored steps
    assert len(lanes["train"]["x"]) >= 1
    assert all(any(abs(x - d) <= 1e-3 + 1e-6 * d for d in stored) for x in lanes["train"]["x"]), \
        (lanes["train"]["x"], stored)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-live-pipeline.png"), full_page=True)

    # refreshed while the run goes: the timeline gains the steps made since (four fragments refreshing every
    # few seconds may keep a loaded machine's page running throughout, so this does not wait for it to idle)
    _goto(page, f"{server}/live?run={run_id}&refresh=5", settle=False)
    wait_until(lambda: len(_figures(page).get(PANELS[0], [{"x": []}])[0]["x"]) > len(drawn), 180,
               "the timeline to draw a newer step", every=1.0)

    # the Rollouts page: the staleness filter once a rollout was consumed stale, and each rollout's versions
    wait_until(lambda: _metric(_steps(root, run_id), "rollout/staleness_max") and
               max(_metric(_steps(root, run_id), "rollout/staleness_max").values()) >= 1, 240,
               "a rollout consumed one version stale", every=1.0)
    _goto(page, f"{server}/rollouts?run={run_id}")
    assert page.locator("[data-testid='stSlider']").filter(has_text="staleness").count() == 1
    table = page.locator("[data-testid='stHtml']").filter(has_text="versions").first
    assert "IS weight" in table.inner_text() and "stale" in table.inner_text()
    assert errors.count() == 0
