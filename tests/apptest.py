"""The dashboard through Streamlit's AppTest, for every folder whose tests open it (app, guards, models,
security): `open_app` points the app at a store and runs its first page, `goto` switches pages. The
fixtures built on them (`app`, over the module's `lake`) are in tests/app/conftest.py.

    at = open_app(store_path, monkeypatch)          # the Runs page on that store, no exception
    goto(at, "rollouts").selectbox(key="rollouts_run").set_value(run_id).run()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
"""The dashboard's entry point (`st.navigation` over the pages)."""


def point_at(store: str | Path, monkeypatch: Any) -> None:
    """The dashboard's store for this test ($WORKBENCH_STORE), its cached frames cleared (the store
    handle, a cache_resource, stays open across the tests of a store)."""
    import streamlit as st

    monkeypatch.setenv("WORKBENCH_STORE", str(store))
    st.cache_data.clear()


def new_app(*, query: dict[str, str] | None = None, timeout: float = 60) -> Any:
    """An AppTest of the dashboard, not yet run; `query`: its URL's parameters (`?run=...`)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=timeout)
    at.query_params.update(query or {})
    return at


def open_app(store: str | Path, monkeypatch: Any, *, query: dict[str, str] | None = None,
             timeout: float = 60) -> Any:
    """The dashboard on `store` (`point_at`), run once: its first page, drawn without an exception."""
    point_at(store, monkeypatch)
    at = new_app(query=query, timeout=timeout)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def goto(at: Any, page: str, *, no_error: bool = False) -> Any:
    """`at` switched to `app_pages/<page>.py` and run, without an exception (`no_error`: nor an
    `st.error` box)."""
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    if no_error:
        assert not at.error, [e.value for e in at.error]
    return at
