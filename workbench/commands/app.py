"""The dashboard's command: `workbench app` starts the Streamlit app on a store (`workbench bench app`,
which times its pages, is in benchmarks/commands/app.py)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import StoreOpt, store_path, store_spec
from workbench.access import ENV, ROLES, Gate, check_token, is_loopback, new_token
from workbench.dashboard import APP_DIR, MAIN, PAGES, SERVE
from workbench.errors import ConfigError, StoreError

__all__ = ["APP_DIR", "MAIN", "PAGES", "SERVE", "build_gate", "exec_app", "is_loopback", "streamlit_command"]


def streamlit_command(store: Path, *, port: int, address: str, headless: bool) -> list[str]:
    """The `streamlit run` command line for the dashboard on `store` (through its gate, `app/serve.py`)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(SERVE),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",
        "--server.showEmailPrompt", "false",  # its first-run prompt blocks (or kills) a non-interactive start
        "--logger.hideWelcomeMessage", "true",  # we print the URL ourselves; this also drops Streamlit's ads
        "--client.toolbarMode", "viewer",  # no 'Deploy' button, no developer menu (rerun, clear cache)
        "--", "--store", str(store),
    ]


def _on_object_storage(store: Path) -> bool:
    from workbench.store.objectstore import is_object_url

    return is_object_url(store)


def exec_app(store: Path, *, port: int = 8501, address: str = "127.0.0.1", headless: bool = False,
             gate: Gate | None = None) -> None:
    """Become the Streamlit server of the dashboard on `store`, behind `gate` (no child left behind
    when this process is signalled); does not return."""
    store = store_spec(store) if _on_object_storage(store) else store  # type: ignore[assignment]
    env = {**os.environ, "WORKBENCH_STORE": str(store), ENV: (gate or Gate()).to_env()}
    argv = streamlit_command(store, port=port, address=address, headless=headless)
    os.execve(argv[0], argv, env)


def read_token_file(path: Path) -> dict[str, str]:
    """A token file: lines `control TOKEN` and/or `read TOKEN` (`#` comments allowed)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        role, _, token = line.partition(" ")
        if role not in ROLES or not token.strip():
            raise ConfigError(f"--token-file {path} line {n}: expected `control TOKEN` or `read TOKEN`")
        out[role] = check_token(token, f"--token-file {path} line {n}")
    return out


def build_gate(address: str, *, control: str | None, read: str | None, token_file: Path | None,
               allow_hosts: list[str], session_hours: float) -> tuple[Gate, dict[str, str]]:
    """The gate for `address`, and the tokens to print (role -> token; only those drawn here or
    given). Loopback without a token given: open, Host check only. Otherwise tokens are required;
    a role with no token given gets a random one."""
    if session_hours <= 0:
        raise ConfigError(f"--session-hours must be > 0, got {session_hours}")
    given = read_token_file(token_file) if token_file else {}
    if control:
        given["control"] = check_token(control, "--token")
    if read:
        given["read"] = check_token(read, "--read-token")
    gate = Gate(allowed_hosts=[h.strip().lower() for h in allow_hosts if h.strip()], session_s=session_hours * 3600)
    if is_loopback(address) and not given:
        return gate, {}
    if given.get("control") and given.get("control") == given.get("read"):
        raise ConfigError("--read-token must differ from the control token")
    tokens = {role: given.get(role) or new_token() for role in ROLES}
    for role, token in tokens.items():
        gate.add_token(token, role)
    gate.open_without_token = False
    return gate, tokens


def exposure_warning(address: str) -> str | None:
    """The line printed when the dashboard binds an address other machines can reach."""
    if is_loopback(address):
        return None
    return (f"note: the dashboard binds {address}: other machines can reach it; every request needs a token. "
            "It speaks plain HTTP: put TLS in front (a reverse proxy) or use an SSH tunnel, see docs/dashboard.md")


def check_app() -> None:
    if not MAIN.is_file():
        raise StoreError(f"the dashboard's entry point {MAIN} is missing (is this a source checkout?)")


def _check_store(path: Path) -> None:
    """Refuse a path that exists but is not a store (a file, a folder of other things), with the one
    line `workbench query` gives, before the server starts."""
    from workbench.store import open_store

    with open_store(path, read_only=True):
        pass


def register(app: typer.Typer) -> None:
    """Add `workbench app`."""

    @app.command("app")
    def app_cmd(
        store: StoreOpt = None,
        port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
        address: Annotated[str, typer.Option("--address", "--host", help="Address to bind. 127.0.0.1 (this machine "
                                             "only) needs no login; any other address (0.0.0.0, a named "
                                             "interface) requires a token.")] = "127.0.0.1",
        headless: Annotated[bool, typer.Option("--headless/--browser", help="Do not open a browser tab.")] = False,
        token: Annotated[str | None, typer.Option("--token", envvar="WORKBENCH_APP_TOKEN", help="The control token "
                                                  "(launch, steer, stop, guards); default: a random one, printed.")]
        = None,
        read_token: Annotated[str | None, typer.Option("--read-token", envvar="WORKBENCH_APP_READ_TOKEN",
                                                       help="The read-only token (browse, query, compare); "
                                                       "default: a random one, printed.")] = None,
        token_file: Annotated[Path | None, typer.Option("--token-file", help="A file of lines `control TOKEN` "
                                                        "and/or `read TOKEN`.")] = None,
        allow_host: Annotated[list[str] | None, typer.Option("--allow-host", help="A host name the dashboard may "
                                                             "be reached by (besides IP addresses, localhost and "
                                                             "this machine's names); repeatable.")] = None,
        session_hours: Annotated[float, typer.Option("--session-hours", help="How long a browser stays signed in "
                                                     "after opening the token's URL.")] = 12.0,
    ) -> None:
        """Start the dashboard (Streamlit) on a store: runs, live curves and controls, rollouts, prompts,
        allocation, comparisons. Served beyond 127.0.0.1 it asks for a token (see docs/dashboard.md,
        "Serving it to your team")."""
        check_app()
        path = store_path(store).resolve() if not _on_object_storage(store_path(store)) else store_path(store)
        if _on_object_storage(path):  # s3://bucket/prefix (docs/object-storage.md): nothing local to look at
            _check_store(store_spec(path))
        elif not path.exists() or (path.is_dir() and not any(path.iterdir())):
            typer.echo(f"note: {path} holds no store yet; it is created when the first run starts", err=True)
        else:
            _check_store(path)
        gate, tokens = build_gate(address, control=token, read=read_token, token_file=token_file,
                                  allow_hosts=allow_host or [], session_hours=session_hours)
        warning = exposure_warning(address)
        if warning:
            typer.echo(warning, err=True)
        shown = socket.gethostname() if address in ("0.0.0.0", "::") else address
        base = f"http://{shown}:{port}"
        if not tokens:
            typer.echo(f"dashboard on {base} (store {path})", err=True)
        for role in reversed(ROLES):  # control first
            if role in tokens:
                typer.echo(f"dashboard ({role}) on {base}/?token={tokens[role]} (store {path})", err=True)
        exec_app(path, port=port, address=address, headless=headless, gate=gate)
