"""The dashboard served with tokens (`workbench app --token ... --read-token ...`, as on a team's
machine, bound here to 127.0.0.1), end to end: every route refused to plain HTTP and websocket clients
without a session or with a wrong token; in Chromium the token's URL signs in and the HTTP-only cookie
carries on from page to page; the read token sees the controls disabled, and a control forged over its
websocket is dropped by the gate and recorded; a rebinding-style request (a foreign name resolving to
this machine) is refused by the Host check."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import synth
from test_browser import CHROMIUM, _goto, app_server
from waiting import wait_until

CONTROL, READ = "control-token-for-the-browser-test", "read-token-for-the-browser-test"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def _status(url: str, *, method: str = "GET", headers: dict | None = None) -> int:
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=b"x" if method == "PUT" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate") / "store"
    ids = synth.fill(root, steps=3)
    with app_server(root, root.parent / "app.log", "--token", CONTROL, "--read-token", READ,
                    env={**os.environ, "WORKBENCH_STORE": str(root)},
                    headers={"Authorization": f"token {READ}"}) as base:
        yield base, root, ids


ROUTES = [("GET", "/"), ("GET", "/live"), ("GET", "/_stcore/health"), ("GET", "/_stcore/host-config"),
          ("GET", "/static/js/index.js"), ("GET", "/media/0123.png"), ("PUT", "/_stcore/upload_file/s/f"),
          ("GET", "/component/streamlit_x.y/index.html"), ("GET", "/app/static/x.txt")]


def test_every_route_and_the_websocket_are_refused_without_a_session(served):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    base, _, _ = served
    refused = (403, 429)  # 429: the wrong attempts from this address passed the gate's limit
    for method, path in ROUTES:
        assert _status(base + path, method=method) == 403, path
        assert _status(base + path + "?token=wrong-token-0123456789", method=method) in refused, path
        assert _status(base + path, method=method,
                       headers={"Cookie": "workbench_session=control.9999999999.x"}) in refused, path
    ws_url = base.replace("http", "ws") + "/_stcore/stream"
    for headers in ({}, {"Cookie": "workbench_session=read.9999999999.forged"}, {"X-Workbench-Role": "control"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url, subprotocols=["streamlit"], additional_headers=headers, open_timeout=30).close()
        assert refused.value.response.status_code == 403


def test_a_rebinding_style_request_is_refused_by_the_host_check(served, browser):  # noqa: F811
    base, _, _ = served
    port = base.rsplit(":", 1)[1]
    # a valid token does not help a request whose Host names another site
    assert _status(f"{base}/", headers={"Host": f"attacker.example:{port}", "Authorization": f"token {CONTROL}"}) == 403
    # in a browser whose resolver maps attacker.example to this machine (what a rebinding DNS server does)
    rebound = browser.browser_type.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP attacker.example 127.0.0.1"])
    try:
        page = rebound.new_page()
        resp = page.goto(f"http://attacker.example:{port}/?token={CONTROL}")
        assert resp.status == 403 and "Host not allowed" in page.content()
        assert not rebound.contexts[0].cookies()  # no session handed out
    finally:
        rebound.close()


def test_the_token_url_signs_in_and_the_cookie_carries_on(served, browser):  # noqa: F811
    base, _, _ = served
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        _goto(page, f"{base}/?token={CONTROL}")
        assert "token=" not in page.url  # the token left the address bar
        cookie = next(c for c in ctx.cookies() if c["name"] == "workbench_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and CONTROL not in cookie["value"]
        assert not page.get_by_role("button", name="Validate and launch").is_disabled()
        _goto(page, f"{base}/alerts")  # another page, no token in its URL: the cookie carries on
        assert page.locator("h1").first.is_visible()
        assert page.evaluate("document.cookie").find("workbench_session") < 0  # not readable by scripts
    finally:
        ctx.close()


def test_read_only_cannot_launch_or_steer_and_a_forged_control_is_recorded(served, browser):  # noqa: F811
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from websockets.sync.client import connect

    from workbench.store import open_store

    base, root, ids = served
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        _goto(page, f"{base}/?token={READ}")
        assert page.get_by_role("button", name="Validate and launch").is_disabled()
        assert page.get_by_text("Read-only access").first.is_visible()  # (the live page's: test_pages_read_only)
        session = next(c["value"] for c in ctx.cookies() if c["name"] == "workbench_session")
    finally:
        ctx.close()
    forged = BackMsg()
    w = forged.rerun_script.widget_states.widgets.add()
    w.id, w.trigger_value = "$$ID-0123456789abcdef-FormSubmitter:runs_launch-Validate and launch", True
    with connect(base.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                 additional_headers={"Cookie": f"workbench_session={session}"}, open_timeout=30) as ws:
        ws.send(forged.SerializeToString())

    def recorded():
        with open_store(root, read_only=True) as store:
            return [e for e in store.events("dashboard").to_dicts() if e["kind"] == "control_refused"]

    wait_until(recorded, 60, "the forged control's refusal in the store", every=0.5)
    with open_store(root, read_only=True) as store:
        assert sorted(store.list_runs()["run_id"].to_list()) == sorted(ids)  # nothing was launched
        assert all(store.controls(r).is_empty() for r in ids)
