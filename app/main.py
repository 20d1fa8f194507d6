"""Entry point: `streamlit run app/main.py -- --store PATH` (or `workbench app --store PATH`).
Builds the navigation and runs the selected page; nothing else."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402

st.set_page_config(page_title="Rollout Workbench", layout="wide")

# Page icons are emoji, not `:material/...` names: the browser tab's icon follows the page's, and Streamlit
# fetches a Material icon for it from fonts.gstatic.com, while an emoji is drawn in place (a data: URL).
# The dashboard sends nothing off this machine (tests/app/test_browser_compare.py). These are emoji with a
# plain-text form that common fonts carry (DejaVu): a browser without a colour emoji font draws them too.

PAGES = [
    # The Runs page answers both `/` and `/runs`: Streamlit serves its default page at `/` only, so a
    # hidden default (same script) takes `/` and the Runs entry of the menu keeps `/runs`.
    st.Page("app_pages/runs.py", title="Runs", icon="☑", url_path="home", default=True,
            visibility="hidden"),
    st.Page("app_pages/runs.py", title="Runs", icon="☑", url_path="runs"),
    st.Page("app_pages/live.py", title="Run (live)", icon="▶", url_path="live"),
    st.Page("app_pages/rollouts.py", title="Rollouts", icon="✉", url_path="rollouts"),
    st.Page("app_pages/alerts.py", title="Alerts", icon="⚠", url_path="alerts"),
    st.Page("app_pages/prompt.py", title="Prompt", icon="✏", url_path="prompt"),
    st.Page("app_pages/allocation.py", title="Allocation", icon="⚙", url_path="allocation"),
    st.Page("app_pages/compare.py", title="Compare", icon="⚖", url_path="compare"),
    st.Page("app_pages/compare_prompts.py", title="Compare prompts", icon="↔", url_path="compare-prompts"),
]
st.navigation(PAGES).run()
