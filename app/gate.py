"""The dashboard's gate: ASGI middleware that Streamlit runs in front of its own routes (`app/serve.py`
hands it to `st.App`), so every request the server receives passes here first: the pages, the
websocket (`/_stcore/stream`), health, media, uploads, component and static files.

For each request: the Host header is checked (`workbench.access.Gate.host_allowed`); a client's own
`X-Workbench-Role` header is dropped; then, when a token is required, the session cookie, a `?token=`
in the URL (exchanged for the cookie by a redirect that drops it from the address bar) or an
`Authorization: token ...` header gives the role, which the gate passes to the app in
`X-Workbench-Role` (`st.context.headers`, read by `app/permissions.py`). Anything else gets one short page
and a 403 (a websocket upgrade is refused before it is accepted). Wrong tokens are counted per client
address and logged without their value. Every response carries the headers that forbid framing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from workbench.access import COOKIE, ENV, ROLE_HEADER, Attempts, Gate

SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]

REFUSED_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Rollout Workbench: {title}</title>
</head><body style="font-family: sans-serif; max-width: 40em; margin: 4em auto">
<h1>{title}</h1><p>{text}</p></body></html>"""

WHY = {
    "no token": ("Sign-in needed", "This dashboard is served with a token. Open the address that "
                 "<code>workbench app</code> printed (it ends in <code>?token=...</code>), or ask whoever serves it."),
    "wrong token": ("Wrong token", "This token does not open this dashboard. Check the address you were given."),
    "expired token": ("Token expired", "This token or session has expired. Ask whoever serves the dashboard "
                      "for a new address."),
    "too many attempts": ("Too many attempts", "Too many wrong tokens from this address; wait a minute."),
    "host not allowed": ("Host not allowed", "This dashboard does not answer to this host name. Use its "
                         "address, or start it with <code>--allow-host NAME</code>."),
}


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} gate: {line}", file=sys.stderr, flush=True)


def forged_control(message: dict) -> str | None:
    """The control widget a websocket message from the browser triggers (`app.permissions.CONTROL_WIDGET`),
    or None."""
    data = message.get("bytes") if message.get("type") == "websocket.receive" else None
    if not data:
        return None
    from streamlit.proto.BackMsg_pb2 import BackMsg

    from app.permissions import CONTROL_WIDGET

    msg = BackMsg()
    try:
        msg.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not ours to judge; Streamlit refuses what it cannot parse
        return None
    if msg.WhichOneof("type") != "rerun_script":
        return None
    for w in msg.rerun_script.widget_states.widgets:
        kind = w.WhichOneof("value")
        triggered = (kind == "trigger_value" and w.trigger_value) or kind in ("string_trigger_value",
                                                                                 "json_trigger_value")
        if triggered and CONTROL_WIDGET.search(w.id):
            return w.id
    return None


def record_refusal(widget: str, client: str) -> None:
    """An event (kind `control_refused`, on the pseudo-run `dashboard`) in the dashboard's store."""
    from workbench.store import default_store_path, open_store

    try:
        with open_store(default_store_path()) as store:
            store.add_event("dashboard", "warning", "control_refused",
                            f"a read-only session ({client}) sent a control over the websocket; refused by the gate",
                            data={"widget": widget, "client": client})
    except Exception as exc:  # noqa: BLE001 - the refusal stands even if the store cannot record it
        log(f"could not record the refusal: {exc}")


class GateMiddleware:
    """Pure ASGI (no response buffering): wraps Streamlit's Starlette app."""

    def __init__(self, app: Any, gate: Gate | None = None) -> None:
        self.app = app
        self.gate = gate or Gate.from_env(os.environ.get(ENV))
        self.attempts = Attempts()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = (scope.get("client") or ("?", 0))[0]
        if not self.gate.host_allowed(headers.get("host")):
            log(f"refused {client} {scope['path']} (host not allowed: {headers.get('host', '')[:80]!r})")
            return await self.refuse(scope, send, "host not allowed")
        role, why, cookie = self.role_of(scope, headers)
        if role is None:
            if why != "no token":
                if self.attempts.blocked(client):
                    why = "too many attempts"
                else:
                    self.attempts.failed(client)
            log(f"refused {client} {scope['type']} {scope['path']} ({why})")
            return await self.refuse(scope, send, why)
        if cookie and scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            return await self.set_cookie(scope, send, cookie)
        inner = dict(scope)
        inner["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != ROLE_HEADER.encode()]
        inner["headers"].append((ROLE_HEADER.encode(), role.encode()))
        if scope["type"] == "websocket" and role != "control":
            receive = self.read_only_receive(receive, client)
        await self.app(inner, receive, self.with_headers(send) if scope["type"] == "http" else send)

    def read_only_receive(self, receive: Any, client: str) -> Any:
        """`receive` for a read-only session's websocket: a message that triggers a control widget is
        dropped (never reaches Streamlit), logged and recorded as an event."""
        async def wrapped() -> dict:
            while True:
                message = await receive()
                widget = forged_control(message)
                if widget is None:
                    return message
                log(f"refused a control message from read-only session {client} (widget {widget[:120]!r})")
                await asyncio.to_thread(record_refusal, widget, client)
        return wrapped

    def role_of(self, scope: dict, headers: dict[str, str]) -> tuple[str | None, str, str | None]:
        """(role, why refused, a new session cookie to set)."""
        if self.gate.open_without_token:
            return "control", "", None
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header counts as none
            jar = SimpleCookie()
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        auth = headers.get("authorization", "")
        if "token" in query and scope["type"] == "http":
            role, why = self.gate.token_role(query["token"])
            return role, why, self.gate.session(role) if role else None
        if auth.lower().startswith("token "):
            role, why = self.gate.token_role(auth[6:].strip())
            return role, why, None
        morsel = jar.get(COOKIE)
        role, why = self.gate.session_role(morsel.value if morsel else None)
        return role, why, None

    async def refuse(self, scope: dict, send: Any, why: str) -> None:
        if scope["type"] == "websocket":  # closing before accepting: the server answers the upgrade with 403
            await send({"type": "websocket.close", "code": 1008})
            return
        title, text = WHY[why]
        body = REFUSED_PAGE.format(title=title, text=text).encode()
        status = 429 if why == "too many attempts" else 403
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": body})

    async def set_cookie(self, scope: dict, send: Any, cookie: str) -> None:
        """A redirect to the same address without the token, setting the session cookie."""
        query = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1")) if k != "token"]
        location = scope.get("root_path", "") + scope["path"] + (f"?{urlencode(query)}" if query else "")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        value = (f"{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(self.gate.session_s)}"
                 f"{secure}")
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode()), (b"set-cookie", value.encode()), (b"cache-control", b"no-store"),
            (b"content-length", b"0"), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    def with_headers(send: Any) -> Any:
        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *[h for h in SECURITY_HEADERS if h[0] not in names]]}
            await send(message)
        return wrapped
