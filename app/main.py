"""Entry point: `streamlit run app/main.py -- --store PATH` (or `workbench app --store PATH`).
Builds the navigation from the one list of pages (`workbench.dashboard.MENU`) and runs the selected
page; nothing else."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402

from workbench.dashboard import MENU  # noqa: E402

st.set_page_config(page_title="Rollout Workbench", layout="wide")

home = MENU[0]
pages = [
    # The first page answers both `/` and its own path: Streamlit serves its default page at `/` only, so
    # a hidden default (same script) takes `/` and the menu's entry keeps `/runs`.
    st.Page(home.file, title=home.title, icon=home.icon, url_path="home", default=True, visibility="hidden"),
    *(st.Page(p.file, title=p.title, icon=p.icon, url_path=p.name) for p in MENU),
]
st.navigation(pages).run()
