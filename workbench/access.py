"""Who may reach the dashboard: tokens, roles, signed session cookies, the Host check, and a limit on
wrong attempts. Pure (no web framework): `app/gate.py` applies it to every request the dashboard's
server receives, `workbench app` builds it.

1. Served on 127.0.0.1 (the default) there is no login, as with TensorBoard; served on any other
   address, every request needs a token, as with Jupyter: a random one printed in the URL (or one the
   user gives), exchanged for an HTTP-only cookie.
2. Two roles: `read` (browse, query, compare) and `control` (also launch, steer, stop, guards).
3. Whatever the address, a request whose Host header is neither an IP address, this machine's name,
   localhost, nor a name the user allows is refused: a page on another site cannot reach the
   dashboard by pointing its own domain name at 127.0.0.1 (DNS rebinding).
4. Tokens are kept as SHA-256 digests; a session cookie is `role.expiry.signature` (HMAC-SHA256 with a
   key drawn at start), so nothing a browser holds is a token, and a cookie past its expiry is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ConfigError

ROLES = ("read", "control")
"""Read: browse, query, compare. Control: also launch, pause, resume, stop, steer, guards."""
COOKIE = "workbench_session"
ROLE_HEADER = "x-workbench-role"
"""The header the gate sets on every request it lets through (any copy sent by a client is dropped)."""
ENV = "WORKBENCH_GATE"
"""The environment variable that hands the gate's settings (JSON) to the dashboard's server process."""
MIN_TOKEN_CHARS = 16


def new_token() -> str:
    """A random token (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_token(token: str, what: str) -> str:
    """A token a user gives: at least MIN_TOKEN_CHARS printable characters, no spaces."""
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token:
        raise ConfigError(f"{what}: a token must be at least {MIN_TOKEN_CHARS} printable characters without "
                          "spaces (`python -c 'import secrets; print(secrets.token_urlsafe(32))'` makes one)")
    return token


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP address or host name) only reaches this machine."""
    host = address.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str | None) -> str:
    """The host part of a Host header (`name:port`, `[v6]:port`), lower-cased."""
    value = (header or "").strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass
class Gate:
    """The gate's settings: which tokens open it with which role, the session key and lifetime, the
    names allowed in the Host header. `open_without_token` is the localhost default."""

    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Token digest -> {"role": read|control, "expires": epoch seconds or None}."""
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    session_s: float = 12 * 3600.0
    allowed_hosts: list[str] = field(default_factory=list)
    open_without_token: bool = True

    def add_token(self, token: str, role: str, *, expires: float | None = None) -> None:
        if role not in ROLES:
            raise ConfigError(f"token role must be one of {', '.join(ROLES)}, got {role!r}")
        self.tokens[digest(token)] = {"role": role, "expires": expires}

    def to_env(self) -> str:
        return json.dumps({"tokens": self.tokens, "key": self.key, "session_s": self.session_s,
                           "allowed_hosts": self.allowed_hosts, "open_without_token": self.open_without_token})

    @classmethod
    def from_env(cls, text: str | None) -> "Gate":
        """The settings `to_env` wrote; with none, the localhost default (no token, Host check on)."""
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(tokens=raw["tokens"], key=raw["key"], session_s=float(raw["session_s"]),
                   allowed_hosts=list(raw["allowed_hosts"]), open_without_token=bool(raw["open_without_token"]))

    # -- Host -----------------------------------------------------------------------------------------

    def host_allowed(self, header: str | None) -> bool:
        """An IP address (a rebinding page cannot make the browser send one: its origin is a name),
        localhost, this machine's names, or a name the user allowed."""
        host = host_name(header)
        if not host:
            return False
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            pass
        names = {"localhost", *(n.lower() for n in self.allowed_hosts), *_own_names()}
        return host in names or host.endswith(".localhost")

    # -- tokens and sessions --------------------------------------------------------------------------

    def token_role(self, token: str | None, now: float | None = None) -> tuple[str | None, str]:
        """(role, "") for a valid token, else (None, why): "no token", "wrong token", "expired token"."""
        if not token:
            return None, "no token"
        found = self.tokens.get(digest(token))
        if found is None:
            return None, "wrong token"
        if found.get("expires") is not None and (now or time.time()) >= float(found["expires"]):
            return None, "expired token"
        return str(found["role"]), ""

    def session(self, role: str, now: float | None = None) -> str:
        """A cookie value for `role`, valid for `session_s`."""
        expiry = int((now or time.time()) + self.session_s)
        body = f"{role}.{expiry}"
        return f"{body}.{self._sign(body)}"

    def session_role(self, cookie: str | None, now: float | None = None) -> tuple[str | None, str]:
        """(role, "") for a valid session cookie, else (None, why)."""
        if not cookie:
            return None, "no token"
        parts = cookie.split(".")
        if len(parts) != 3 or parts[0] not in ROLES or not parts[1].isdigit():
            return None, "wrong token"
        if not hmac.compare_digest(self._sign(f"{parts[0]}.{parts[1]}"), parts[2]):
            return None, "wrong token"
        if (now or time.time()) >= int(parts[1]):
            return None, "expired token"
        return parts[0], ""

    def _sign(self, body: str) -> str:
        return hmac.new(bytes.fromhex(self.key), body.encode(), hashlib.sha256).hexdigest()


def _own_names() -> set[str]:
    name = socket.gethostname().lower()
    out = {name, name.split(".")[0]}
    try:
        out.add(socket.getfqdn().lower())
    except OSError:
        pass
    return out


class Attempts:
    """Wrong tokens per client address: at most `limit` in `window_s`; then refused until the window
    passes, without looking at the token."""

    def __init__(self, limit: int = 10, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self._seen: dict[str, list[float]] = {}

    def blocked(self, client: str, now: float | None = None) -> bool:
        now = now or time.monotonic()
        recent = [t for t in self._seen.get(client, []) if now - t < self.window_s]
        self._seen[client] = recent
        return len(recent) >= self.limit

    def failed(self, client: str, now: float | None = None) -> None:
        self._seen.setdefault(client, []).append(now or time.monotonic())
        if len(self._seen) > 10_000:  # forget the oldest clients rather than grow without bound
            for k in list(self._seen)[:5_000]:
                del self._seen[k]
