"""The dashboard's gate (`app/gate.py` over `workbench.access`) in front of a small ASGI app with a
page and a websocket: tokens, roles, session cookies and their expiry, the Host check (also in the
localhost default), rate-limited wrong attempts logged without the token, the headers that refuse
framing, and a read-only session's forged control message dropped."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("starlette")
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route, WebSocketRoute  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from starlette.websockets import WebSocketDisconnect  # noqa: E402

from app.gate import GateMiddleware, forged_control  # noqa: E402
from workbench.access import COOKIE, Attempts, Gate, host_name  # noqa: E402

CONTROL, READ = "c" * 40, "r" * 40


async def page(request):
    return PlainTextResponse(request.headers.get("x-workbench-role", "-"))


async def stream(ws):
    await ws.accept()
    await ws.send_text(ws.headers.get("x-workbench-role", "-"))
    try:
        got = await ws.receive_bytes()
    except WebSocketDisconnect:  # the test closed after reading the role
        return
    await ws.send_text(f"got {len(got)}")
    await ws.close()


def client(gate: Gate, host: str = "testserver") -> TestClient:
    inner = Starlette(routes=[Route("/{path:path}", page), WebSocketRoute("/_stcore/stream", stream)])
    gate.allowed_hosts.append("testserver")
    return TestClient(GateMiddleware(inner, gate), base_url=f"http://{host}", follow_redirects=False)


def locked(expires: float | None = None) -> Gate:
    gate = Gate(open_without_token=False)
    gate.add_token(CONTROL, "control", expires=expires)
    gate.add_token(READ, "read")
    return gate


ROUTES = ["/", "/live", "/_stcore/health", "/_stcore/host-config", "/media/abc.png", "/static/js/main.js",
          "/component/some.component/index.html", "/_stcore/upload_file/s/f"]


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_is_refused_without_a_valid_token(path, capfd):
    c = client(locked(expires=time.time() - 1))  # the control token has expired
    expired_session = locked().session("read", now=time.time() - 13 * 3600)  # older than the session's 12 h
    for kwargs in ({}, {"params": {"token": "wrong-token-0123456789"}}, {"params": {"token": CONTROL}},
                   {"cookies": {COOKIE: expired_session}}, {"cookies": {COOKIE: "control.9999999999.forged"}},
                   {"headers": {"x-workbench-role": "control"}}):
        r = c.get(path, **kwargs)
        assert r.status_code == 403, (path, kwargs, r.status_code)
        assert r.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert "run" not in r.text.lower()  # nothing about runs leaks
    assert "Token expired" in c.get(path, params={"token": CONTROL}).text
    assert "Wrong token" in c.get(path, params={"token": "wrong-token-0123456789"}).text
    err = capfd.readouterr().err
    assert "wrong token" in err and "expired token" in err and "wrong-token-0123456789" not in err and CONTROL not in err


def test_the_websocket_is_refused_without_a_session():
    c = client(locked())
    for kwargs in ({}, {"headers": {"cookie": f"{COOKIE}=read.1.x"}}, {"headers": {"x-workbench-role": "control"}}):
        with pytest.raises(WebSocketDisconnect):
            with c.websocket_connect("/_stcore/stream", **kwargs):
                pass


def test_the_token_url_sets_a_session_cookie_that_carries_the_role():
    c = client(locked())
    r = c.get("/live", params={"token": READ, "run": "abc"})
    assert r.status_code == 303 and r.headers["location"] == "/live?run=abc"  # the token leaves the address bar
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and READ not in cookie
    session = r.cookies[COOKIE]
    r = c.get("/rollouts", cookies={COOKIE: session}, headers={"x-workbench-role": "control"})
    assert r.status_code == 200 and r.text == "read"  # the client's own role header is dropped
    with c.websocket_connect("/_stcore/stream", headers={"cookie": f"{COOKIE}={session}"}) as ws:
        assert ws.receive_text() == "read"
    assert c.get("/", headers={"authorization": f"token {CONTROL}"}).text == "control"


def test_a_read_only_websocket_cannot_send_a_control(tmp_path, monkeypatch):
    from streamlit.proto.BackMsg_pb2 import BackMsg

    from workbench.store import open_store

    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "store"))  # where the refusal is recorded

    msg = BackMsg()
    w = msg.rerun_script.widget_states.widgets.add()
    w.id, w.trigger_value = "$$ID-0123-live_pause", True
    forged = msg.SerializeToString()
    assert forged_control({"type": "websocket.receive", "bytes": forged}) == "$$ID-0123-live_pause"
    w.id = "$$ID-0123-FormSubmitter:runs_launch-Validate"  # checking a config is not a control
    assert forged_control({"type": "websocket.receive", "bytes": msg.SerializeToString()}) is None
    gate = locked()
    c = client(gate)
    read, control = gate.session("read"), gate.session("control")
    harmless = BackMsg()
    harmless.rerun_script.query_string = "x"
    with c.websocket_connect("/_stcore/stream", headers={"cookie": f"{COOKIE}={read}"}) as ws:
        assert ws.receive_text() == "read"
        ws.send_bytes(forged)  # dropped by the gate: the app never sees it
        ws.send_bytes(harmless.SerializeToString())
        assert ws.receive_text() == f"got {len(harmless.SerializeToString())}"
    with c.websocket_connect("/_stcore/stream", headers={"cookie": f"{COOKIE}={control}"}) as ws:
        assert ws.receive_text() == "control"
        ws.send_bytes(forged)
        assert ws.receive_text() == f"got {len(forged)}"
    with open_store(tmp_path / "store") as store:
        events = store.events("dashboard").to_dicts()
    assert [e["kind"] for e in events] == ["control_refused"]  # once: the read session's, not the control's
    assert "live_pause" in str(events[0]["data"])


@pytest.mark.parametrize("host, ok", [("127.0.0.1:8501", True), ("localhost:8501", True), ("[::1]:8501", True),
                                      ("10.1.2.3", True), ("evil.example:8501", False), ("", False),
                                      ("localhost.evil.example", False), ("team-box.internal", True)])
def test_host_check_refuses_a_rebinding_name_also_on_localhost(host, ok):
    gate = Gate(allowed_hosts=["team-box.internal"])  # the localhost default: no token asked
    c = client(gate)
    r = c.get("/", headers={"host": host})
    assert r.status_code == (200 if ok else 403), r.text
    if not ok:
        assert "Host not allowed" in r.text


def test_wrong_tokens_are_rate_limited():
    c = client(locked())
    codes = [c.get("/", params={"token": f"wrong-{i:020d}"}).status_code for i in range(12)]
    assert codes[:10] == [403] * 10 and codes[10:] == [429, 429]
    assert Attempts(limit=2, window_s=1.0).blocked("x", now=5.0) is False


def test_localhost_default_opens_with_control_and_framing_refused():
    c = client(Gate())
    r = c.get("/")
    assert r.status_code == 200 and r.text == "control" and r.headers["x-frame-options"] == "DENY"


def test_host_name_parsing():
    assert host_name("Example.org:80") == "example.org" and host_name("[::1]:8501") == "::1"
    assert host_name("::1") == "::1" and host_name(None) == ""
