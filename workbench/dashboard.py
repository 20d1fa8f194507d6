"""Where the dashboard's files are: its Streamlit entry point and one script per page (the `app/`
folder of a source checkout). Shared by `workbench app` and the harnesses that run the pages; nothing
here imports streamlit."""

from __future__ import annotations

from pathlib import Path

APP_DIR = Path(__file__).resolve().parents[1] / "app"
MAIN = APP_DIR / "main.py"
SERVE = APP_DIR / "serve.py"
"""What `workbench app` runs: `main.py` behind the gate (`app/gate.py`)."""
PAGES = {
    "runs": "app_pages/runs.py",
    "live": "app_pages/live.py",
    "rollouts": "app_pages/rollouts.py",
    "prompt": "app_pages/prompt.py",
    "allocation": "app_pages/allocation.py",
    "compare": "app_pages/compare.py",
    "compare-prompts": "app_pages/compare_prompts.py",
    "alerts": "app_pages/alerts.py",
}
"""Page name -> file relative to app/main.py (what AppTest.switch_page takes)."""
