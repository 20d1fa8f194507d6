"""Retake the dashboard screenshots in docs/img/ from a store (not a test: run it by hand).

    workbench run configs/organism.toml --store store/default      # the default experiment
    python tests/app/screenshots.py store/default docs/img
    python tests/app/screenshots.py store/default docs/img --pages compare-prompts
    python tests/app/screenshots.py STORE docs/img RUN_ID --pages rollouts --as rollouts-tree --height 900 \
        --from '[data-rollout-tree]:has([data-depth="2"])'

Starts `workbench app` on the store, opens every page (or those of `--pages`) in headless chromium
(Debian's, through Playwright) with the newest run picked (or RUN_ID) and automatic refresh off, waits
until the page is idle and its charts are drawn, and writes `<page>.png` (full page, 1400 px wide). On
Compare prompts (the store's two newest runs, the older one as A) it then clicks a point of the scatter,
the largest gain "learned by B" or else the largest loss "lost by B", "better in B", so that the side-by-
side view shows that prompt. Look at each one before committing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# run by hand (not by pytest): the tests' helpers, as pytest's pythonpath, after this folder (whose
# conftest.py test_browser imports)
sys.path.insert(1, str(HERE.parent))

from test_browser import CHROMIUM, PAGES, _goto, _rerun, app_server  # noqa: E402

CLICK_FIRST = (("learned", "first"), ("lost", "last"), ("better", "first"))
"""Which scatter point Compare prompts opens: the first trace (change label) present, and its point with the
largest gain (first: the page sorts by B - A, largest first) or largest loss (last)."""
TALL = 2600
"""Viewport height for Compare prompts (the app scrolls inside its own container, so a full-page shot is
the viewport)."""


def open_scatter_point(page) -> str | None:
    """Click a point of the Compare prompts scatter as CLICK_FIRST says; the label clicked, or None."""
    names = page.evaluate("() => Array.from(document.querySelector('.js-plotly-plot').data, t => t.name || '')")
    for prefix, which in CLICK_FIRST:
        for i, name in enumerate(names):
            if name.startswith(prefix):
                points = page.locator(".js-plotly-plot .scatterlayer .trace").nth(i).locator(".points path")
                point = points.first if which == "first" else points.last
                point.scroll_into_view_if_needed()
                _rerun(page, lambda: point.click(force=True))
                return name
    return None


def wait_still(page, timeout_s: float = 15.0, every_s: float = 0.3) -> None:
    """Wait until the page's pixels stop changing (charts finish their transitions): two shots in a row
    alike, or `timeout_s` passed (then the shot is taken as it is)."""
    deadline = time.monotonic() + timeout_s
    last = page.screenshot()
    while time.monotonic() < deadline:
        page.wait_for_timeout(every_s * 1000)
        shot = page.screenshot()
        if shot == last:
            return
        last = shot


def shoot(store: Path, out: Path, run_id: str | None = None, pages: list[str] | None = None, *,
          stem: str | None = None, height: int | None = None, start: str | None = None) -> list[Path]:
    """Each page's shot (full page; with `height`, the top `height` pixels; with `start` too, `height` pixels
    from a little above the first element matching that CSS selector) as `<page>.png` (or `<stem>.png`)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        with app_server(store, out / ".app.log") as url:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
                page = browser.new_page(viewport={"width": 1400, "height": (height or 1000) + (6000 if start else 0)})
                for name in pages or PAGES:
                    query = [f"run={run_id}"] if run_id else []
                    query += ["refresh=0"] if name == "live" else []
                    _goto(page, f"{url}/{name}" + ("?" + "&".join(query) if query else ""))
                    if name == "compare-prompts":  # the table, the scatter and the side-by-side view in one shot
                        page.set_viewport_size({"width": 1400, "height": TALL})
                        print(f"compare-prompts: opened a point of {open_scatter_point(page)!r}", file=sys.stderr)
                        page.evaluate("() => document.querySelectorAll('*').forEach(e => { e.scrollTop = 0; })")
                    wait_still(page)
                    if page.locator("[data-testid='stException']").count():
                        raise RuntimeError(f"the {name} page raised: see {out / '.app.log'}")
                    path = out / f"{stem or name}.png"
                    if start:  # the app scrolls in its own container: a tall viewport, clipped
                        box = page.locator(start).first.bounding_box()
                        top = max(0.0, box["y"] - 130)
                        clip = {"x": 0, "y": top, "width": 1400, "height": height or 1000}
                        page.screenshot(path=str(path), clip=clip)
                    else:
                        page.screenshot(path=str(path), full_page=height is None)
                    written.append(path)
                browser.close()
    finally:
        (out / ".app.log").unlink(missing_ok=True)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("run_id", nargs="?", default=None)
    parser.add_argument("--pages", default=None, help=f"comma-separated, of {', '.join(PAGES)} (default: all)")
    parser.add_argument("--as", dest="stem", default=None, help="the file's name (one page only), not <page>.png")
    parser.add_argument("--height", type=int, default=None, help="the top HEIGHT pixels only, not the full page")
    parser.add_argument("--from", dest="start", default=None, help="CSS selector: the shot starts just above the "
                        "first element it matches (with --height)")
    args = parser.parse_args()
    chosen = [p.strip() for p in args.pages.split(",")] if args.pages else None
    unknown = sorted(set(chosen or []) - set(PAGES))
    if unknown:
        parser.error(f"--pages: unknown page(s) {unknown}; pages are {', '.join(PAGES)}")
    if args.stem and len(chosen or PAGES) != 1:
        parser.error("--as: name one page with --pages")
    for p in shoot(args.store, args.out, args.run_id, chosen, stem=args.stem, height=args.height,
                   start=args.start):
        print(p)
