"""Retake the dashboard screenshots in docs/img/ from a store (not a test: run it by hand).

    workbench run configs/organism.toml --store /tmp/default-store      # the default experiment
    python tests/app/screenshots.py /tmp/default-store docs/img

Starts `workbench app` on the store, opens every page in headless chromium (Debian's, through
Playwright) with the newest run picked and automatic refresh off, waits until the page is idle and its
charts are drawn, and writes `<page>.png` (full page, 1400 px wide). Look at each one before committing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run by hand (not by pytest): the tests' helpers, as pytest's pythonpath

from test_browser import CHROMIUM, PAGES, _goto, app_server  # noqa: E402


def shoot(store: Path, out: Path, run_id: str | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with app_server(store, out / ".app.log") as url:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                for name in PAGES:
                    query = [f"run={run_id}"] if run_id else []
                    query += ["refresh=0"] if name == "live" else []
                    _goto(page, f"{url}/{name}" + ("?" + "&".join(query) if query else ""))
                    time.sleep(2.0)  # charts finish their transitions
                    if page.locator("[data-testid='stException']").count():
                        raise RuntimeError(f"the {name} page raised: see {out / '.app.log'}")
                    path = out / f"{name}.png"
                    page.screenshot(path=str(path), full_page=True)
                    written.append(path)
                browser.close()
    finally:
        (out / ".app.log").unlink(missing_ok=True)
    return written


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python tests/app/screenshots.py STORE OUT_DIR [RUN_ID]")
    for p in shoot(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) == 4 else None):
        print(p)
