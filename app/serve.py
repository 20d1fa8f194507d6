"""The dashboard's server: `streamlit run app/serve.py -- --store PATH` (what `workbench app` runs).
Streamlit serves `main.py` as it would on its own, with the gate (`app/gate.py`) in front of every
route; the gate's settings come from `$WORKBENCH_GATE` (set by `workbench app`)."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app.gate import GateMiddleware  # noqa: E402

app = st.App(str(Path(__file__).resolve().parent / "main.py"), middleware=[Middleware(GateMiddleware)])
