"""In a real browser (Debian's chromium through Playwright, against `workbench app`): a synchronous organism
run on two Ray workers (a real local Ray runtime, started here) is drawn on the Run page with a lane per
worker beside the trainer's, each worker's generate bars where the store says they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_browser import ARTIFACTS, CHROMIUM, _goto, app_server, browser  # noqa: F401 - a fixture
from test_browser_pipeline import FIGURES, _metric
from waiting import wait_until

ray = pytest.importorskip("ray")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
LANES = "per-worker lanes: what each worker did, step by step (seconds)"


@pytest.fixture(scope="module")
def ray_run(new_store, tiny_config, tmp_path_factory):
    """A finished 3-step run on two Ray workers in a fresh store; the runtime is shut down after it."""
    from workbench.engine import run
    from workbench.rollout.ray_backend import start_local_ray
    from workbench.store import open_store

    root = new_store(tmp_path_factory.mktemp("browser-ray") / "store")
    start_local_ray(attempts=5, num_cpus=2, object_store_memory=256 * 2**20)
    try:
        with open_store(root) as st:
            run_id = run(tiny_config(name="browser-ray", steps=3, eval__every=0, eval__at_start=False,
                                     checkpoint__every=0, rollout__backend="ray", rollout__workers=2,
                                     rollout__start_timeout_s=300), store=st)
    finally:
        ray.shutdown()
    return root, run_id


@pytest.fixture(scope="module")
def server(ray_run):
    root, _ = ray_run
    with app_server(root, root.parent / "app.log") as url:
        yield url


def test_the_run_page_draws_a_lane_per_ray_worker(ray_run, server, browser):
    from workbench.store import open_store

    root, run_id = ray_run
    page = browser.new_page(viewport={"width": 1400, "height": 3200})
    _goto(page, f"{server}/live?run={run_id}&refresh=0")
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    assert page.get_by_text("Rollout workers").count() >= 1
    figures = lambda: {f["title"]: f["traces"] for f in page.evaluate(FIGURES)}  # noqa: E731
    wait_until(lambda: LANES in figures(), 60, "the lanes to draw", every=0.5)
    lanes = {t["name"]: t for t in figures()[LANES]}
    with open_store(root) as store:
        steps = store.run_steps(run_id)
    # a lane per worker beside the trainer's: the workers generated, the trainer trained
    assert {"ray-0", "ray-1"} <= set(lanes["generate"]["y"]) and "trainer" in lanes["generate"]["y"]
    assert set(lanes["train"]["y"]) == {"trainer"} and {"ray-0", "ray-1"} <= set(lanes["idle"]["y"])
    # each worker's generate bar spans what the store holds for one of its steps
    for worker in ("ray-0", "ray-1"):
        starts, ends = _metric(steps, f"lane/{worker}/generate/start"), _metric(steps, f"lane/{worker}/generate/end")
        stored = sorted(ends[s] - starts[s] for s in starts)
        drawn = sorted(x for x, y in zip(lanes["generate"]["x"], lanes["generate"]["y"]) if y == worker)
        assert len(drawn) == len(stored) == 3
        assert drawn == pytest.approx([max(d, 1e-3) for d in stored], abs=1e-6), (worker, drawn, stored)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-live-ray-lanes.png"), full_page=True)
    assert errors.count() == 0
