"""The analysis commands: `workbench notebooks` opens JupyterLab on the analysis notebooks with the
store passed through $WORKBENCH_STORE (each notebook's parameters cell reads it), and prints the URL
to open, token included, on one line."""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import StoreOpt, store_path
from workbench.errors import WorkbenchError

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = ["entropy.ipynb", "pass_at_k.ipynb", "allocators.ipynb"]
DEFAULT_PORT = 8888
HOST = "127.0.0.1"

INSTALL_HINT = ("JupyterLab and the Python kernel are part of the project's install, but {missing} is missing "
                "from this environment: reinstall the project with pip install -e . (or run make demo)")


def check_jupyterlab() -> None:
    """Raise a one-line WorkbenchError when JupyterLab or the kernel is missing from this environment."""
    missing = [m for m in ("jupyterlab", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        raise WorkbenchError(INSTALL_HINT.format(missing=" and ".join(missing)))


def free_port(start: int = DEFAULT_PORT, tries: int = 50) -> int:
    """The first port from `start` that nothing listens on at 127.0.0.1."""
    for port in range(start, start + tries):
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    raise WorkbenchError(f"no free port in {start}-{start + tries - 1}: pass --port")


def lab_url(port: int, token: str, notebook: str | None = None) -> str:
    """The URL that opens JupyterLab (on one notebook, or the folder) with its token."""
    return f"http://{HOST}:{port}/lab" + (f"/tree/{notebook}" if notebook else "") + f"?token={token}"


def jupyterlab_command(*, port: int, browser: bool, token: str, notebook: str | None = None,
                       root: Path = NOTEBOOKS_DIR) -> list[str]:
    """The `jupyter lab` command line on the notebooks folder `root` (optionally opening one notebook),
    bound to 127.0.0.1 on exactly `port`, with `token`."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", f"--port={port}",
           f"--ServerApp.ip={HOST}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    if not browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers often run as root; JupyterLab refuses without it
    if notebook:
        cmd.append(str(root / notebook))
    return cmd


def register(app: typer.Typer) -> None:
    """Add `workbench notebooks`."""

    @app.command("notebooks")
    def notebooks_cmd(
        store: StoreOpt = None,
        notebook: Annotated[str | None, typer.Argument(
            help=f"Open one notebook ({', '.join(NOTEBOOKS)}); default: the folder.", show_default=False)] = None,
        port: Annotated[int | None, typer.Option(
            "--port", help=f"Port JupyterLab serves on. Default: the first free one from {DEFAULT_PORT}.",
            show_default=False)] = None,
        browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a browser tab.")] = True,
    ) -> None:
        """Open JupyterLab on the analysis notebooks (entropy, pass@k, allocators) with the store passed
        as $WORKBENCH_STORE (default ./store, where `make demo` trains); each notebook defaults to the
        latest runs in it. Prints the URL to open, token included."""
        if notebook is not None and notebook not in NOTEBOOKS:
            name = notebook if notebook.endswith(".ipynb") else f"{notebook}.ipynb"
            if name not in NOTEBOOKS:
                raise WorkbenchError(f"unknown notebook {notebook!r}; notebooks: {', '.join(NOTEBOOKS)}")
            notebook = name
        if not NOTEBOOKS_DIR.is_dir():
            raise WorkbenchError(f"the notebooks folder {NOTEBOOKS_DIR} is missing (is this a source checkout?)")
        check_jupyterlab()
        path = store_path(store).resolve()
        if not path.exists():
            typer.echo(f"note: {path} does not exist yet; the notebooks need a store with runs "
                       "(make demo, or workbench run, writes one)", err=True)
        port = free_port() if port is None else port
        token = secrets.token_hex(24)
        env = {**os.environ, "WORKBENCH_STORE": str(path)}
        typer.echo(f"JupyterLab on {NOTEBOOKS_DIR.name}/ with store {path} (Ctrl-C stops it): "
                   f"{lab_url(port, token, notebook)}")
        raise typer.Exit(subprocess.call(jupyterlab_command(port=port, browser=browser, token=token,
                                                            notebook=notebook), env=env))
