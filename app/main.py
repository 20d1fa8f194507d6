"""Entry point: `streamlit run app/main.py -- --store PATH` (or `workbench app --store PATH`).
Builds the navigation and runs the selected page; nothing else."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402

st.set_page_config(page_title="Rollout Workbench", layout="wide")

PAGES = [
    # The Runs page answers both `/` and `/runs`: Streamlit serves its default page at `/` only, so a
    # hidden default (same script) takes `/` and the Runs entry of the menu keeps `/runs`.
    st.Page("app_pages/runs.py", title="Runs", icon=":material/list:", url_path="home", default=True,
            visibility="hidden"),
    st.Page("app_pages/runs.py", title="Runs", icon=":material/list:", url_path="runs"),
    st.Page("app_pages/live.py", title="Run (live)", icon=":material/monitoring:", url_path="live"),
    st.Page("app_pages/rollouts.py", title="Rollouts", icon=":material/chat:", url_path="rollouts"),
    st.Page("app_pages/alerts.py", title="Alerts", icon=":material/notifications:", url_path="alerts"),
    st.Page("app_pages/prompt.py", title="Prompt", icon=":material/help:", url_path="prompt"),
    st.Page("app_pages/allocation.py", title="Allocation", icon=":material/bar_chart:", url_path="allocation"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
]
st.navigation(PAGES).run()
