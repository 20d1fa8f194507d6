"""Take docs/img/real-model-*.png from a real-model run (not a test: run it by hand).

    workbench demo --model smollm2 --steps 3 --store store/smollm2   # converts, trains, serves the dashboard
    python tests/models/screenshots_smollm2.py store/smollm2 docs/img [--url http://127.0.0.1:8501]

Opens the Runs, Live (the run's curves) and Rollouts pages of the store's newest run in headless
chromium (Debian's, through Playwright, as the browser tests do), and the Rollouts page a second time
with "show the chat template" switched on; writes `real-model-<page>.png` (a 1400 x 1600 window: the
app scrolls inside it, so that is the shot) reduced to 256 colours, so that each stays well under
300 KB. With `--url` it shoots a dashboard already serving the store (the demo's), else it starts `workbench app` on it.
Look at each one before committing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the tests' helpers, as pytest's pythonpath
sys.path.insert(0, str(HERE.parent / "app"))

from screenshots import wait_still  # noqa: E402
from test_browser import CHROMIUM, _goto, _rerun, app_server  # noqa: E402

SHOTS = (("runs", "runs", False), ("live", "live?refresh=0", False), ("rollouts", "rollouts", False),
         ("rollouts-template", "rollouts", True))
"""(file suffix, page and query, chat template switched on)."""
HEIGHT = 1600


def small_png(path: Path) -> int:
    """Re-save `path` with a 256-colour palette; its size in bytes."""
    from PIL import Image

    with Image.open(path) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.stat().st_size


def shoot(store: Path, out: Path, url: str | None = None) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    server = contextlib.nullcontext(url) if url else app_server(store, out / ".app.log")
    with server as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": HEIGHT})  # the app scrolls inside itself
        for name, target, template in SHOTS:
            _goto(page, f"{base}/{target}")
            if template:
                switch = page.get_by_text("show the chat template")
                _rerun(page, switch.click)
            wait_still(page)
            if page.locator("[data-testid='stException']").count():
                raise RuntimeError(f"the {name} page raised an exception")
            path = out / f"real-model-{name}.png"
            page.screenshot(path=str(path))
            print(f"{path}: {small_png(path) // 1024} KB")
            written.append(path)
        browser.close()
    (out / ".app.log").unlink(missing_ok=True)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--url", default=None, help="a dashboard already serving the store")
    args = parser.parse_args()
    shoot(args.store, args.out, args.url)
