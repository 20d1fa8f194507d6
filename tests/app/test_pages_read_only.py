"""A read-only session (the gate's `read` role) sees every control disabled with one line saying why.
Streamlit discards a trigger of a disabled widget; the gate drops and records a forged control message
(tests/app/test_browser_gate.py); and should a control be drawn enabled all the same, the action asks
the session's role when it acts: refused, shown, recorded as an event, nothing reaches `controls`."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
import synth  # noqa: E402
from apptest import open_app  # noqa: E402
from workbench.access import ENV, Gate  # noqa: E402
from workbench.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("readonly") / "store"
    return path, synth.fill(path, steps=3)


@pytest.fixture
def read_only(lake, monkeypatch):
    """The app as a session that came with the read token: a gate that asks for tokens and no role
    header from it (AppTest sends none), so the app takes the safe side."""
    gate = Gate(open_without_token=False)
    gate.add_token("r" * 32, "read")
    monkeypatch.setenv(ENV, gate.to_env())
    return open_app(lake[0], monkeypatch)


def _refusals(path):
    with open_store(path) as store:
        return store.sql("SELECT run_id, kind, message FROM events WHERE kind = 'control_refused'").to_dicts()


def test_read_only_session_sees_controls_disabled(read_only, lake):
    at = read_only
    assert next(b for b in at.button if b.label == "Validate and launch").disabled
    assert not next(b for b in at.button if b.label == "Validate").disabled  # checking a config is reading
    assert any("Read-only access" in c.value for c in at.caption)
    at.switch_page("app_pages/live.py").run()
    at.selectbox(key="live_run").set_value(lake[1][0]).run()
    assert at.button(key="live_pause").disabled and at.button(key="live_stop").disabled
    assert all(next(b for b in at.button if b.label == label).disabled
               for label in ("Set budget", "Set learning rate"))


def test_a_control_drawn_enabled_is_still_refused_for_a_read_session(read_only, lake, monkeypatch):
    """Defence in depth: the buttons drawn as for a control session (as if the page forgot to disable
    them); the role is asked again when the action runs."""
    from app import permissions

    path, ids = lake
    monkeypatch.setattr(permissions, "can_control", lambda: True)
    at = read_only
    at.run()
    next(b for b in at.button if b.label == "Validate and launch").click().run()
    assert any("needs the control token" in e.value for e in at.error), [e.value for e in at.error]
    with open_store(path) as store:
        assert sorted(store.list_runs()["run_id"].to_list()) == sorted(ids)  # nothing launched
    at.switch_page("app_pages/live.py").run()
    at.selectbox(key="live_run").set_value(ids[0]).run()
    at.button(key="live_pause").click().run()
    next(b for b in at.button if b.label == "Set budget").click().run()
    assert not at.exception
    with open_store(path) as store:
        assert store.controls(ids[0]).is_empty()  # nothing reached the engine
    refused = _refusals(path)
    assert {r["run_id"] for r in refused} >= {"dashboard", ids[0]}
    assert any("pause" in r["message"] for r in refused) and any("set_budget" in r["message"] for r in refused)


def test_without_a_gate_the_session_has_control(lake, monkeypatch):
    """The localhost default (no token asked): the controls are enabled, as before."""
    monkeypatch.delenv(ENV, raising=False)
    at = open_app(lake[0], monkeypatch)
    assert not next(b for b in at.button if b.label == "Validate and launch").disabled
    assert not any("Read-only access" in c.value for c in at.caption)
