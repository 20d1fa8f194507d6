"""Where the dashboard's files are: its Streamlit entry point and its pages, one script each (the `app/`
folder of a source checkout). `MENU` is the one list of pages: `app/main.py` builds the navigation from
it, `workbench app` and the harnesses that run the pages (`workbench bench app`, the soak bench, the
browser tests) read it. Nothing here imports streamlit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[1] / "app"
MAIN = APP_DIR / "main.py"

SERVE = APP_DIR / "serve.py"
"""What `workbench app` runs: `main.py` behind the gate (`app/gate.py`)."""


@dataclass(frozen=True)
class Page:
    name: str
    """Its URL path (`/live`) and the name the harnesses use."""
    file: str
    """The script, relative to app/main.py (what AppTest.switch_page takes)."""
    title: str
    icon: str
    """An emoji, not a `:material/...` name: the browser tab's icon follows the page's, and Streamlit
    fetches a Material icon from fonts.gstatic.com, while an emoji is drawn in place (a data: URL), so the
    dashboard sends nothing off this machine (tests/app/test_browser_compare.py). Each has a plain-text
    form that common fonts carry (DejaVu): a browser without a colour emoji font draws it too."""


MENU = (
    Page("runs", "app_pages/runs.py", "Runs", "☑"),
    Page("live", "app_pages/live.py", "Run (live)", "▶"),
    Page("rollouts", "app_pages/rollouts.py", "Rollouts", "✉"),
    Page("alerts", "app_pages/alerts.py", "Alerts", "⚠"),
    Page("prompt", "app_pages/prompt.py", "Prompt", "✏"),
    Page("allocation", "app_pages/allocation.py", "Allocation", "⚙"),
    Page("compare", "app_pages/compare.py", "Compare", "⚖"),
    Page("compare-prompts", "app_pages/compare_prompts.py", "Compare prompts", "↔"),
    Page("playground", "app_pages/playground.py", "Playground", "⚗"),
)
"""The dashboard's pages in menu order; the first is also the default page (`/`)."""

PAGES = {p.name: p.file for p in MENU}
"""Page name -> file relative to app/main.py, in menu order."""
