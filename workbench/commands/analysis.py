"""The analysis commands: `workbench notebooks` opens JupyterLab on the analysis notebooks with the
store passed through $WORKBENCH_STORE (each notebook's parameters cell reads it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import StoreOpt, store_path
from workbench.errors import WorkbenchError

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = ["entropy.ipynb", "pass_at_k.ipynb", "allocators.ipynb"]

INSTALL_HINT = "JupyterLab is not installed: install the notebooks extra with pip install -e '.[notebooks]'"


def check_jupyterlab() -> None:
    """Raise a one-line WorkbenchError naming the `notebooks` extra when JupyterLab is missing."""
    if importlib.util.find_spec("jupyterlab") is None:
        raise WorkbenchError(INSTALL_HINT)


def jupyterlab_command(*, port: int, browser: bool, notebook: str | None = None) -> list[str]:
    """The `jupyter lab` command line on the notebooks folder (optionally opening one notebook)."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={NOTEBOOKS_DIR}", f"--port={port}"]
    if not browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers often run as root; JupyterLab refuses without it
    if notebook:
        cmd.append(str(NOTEBOOKS_DIR / notebook))
    return cmd


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add `workbench notebooks`."""

    @app.command("notebooks")
    def notebooks_cmd(
        store: StoreOpt = None,
        notebook: Annotated[str | None, typer.Argument(
            help=f"Open one notebook ({', '.join(NOTEBOOKS)}); default: the folder.", show_default=False)] = None,
        port: Annotated[int, typer.Option("--port", help="Port JupyterLab serves on.")] = 8888,
        browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open a browser tab.")] = True,
    ) -> None:
        """Open JupyterLab on the analysis notebooks (entropy, pass@k, allocators) with the store passed
        as $WORKBENCH_STORE; each notebook defaults to the latest runs in it."""
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
            typer.echo(f"note: {path} does not exist yet; the notebooks need a store with runs", err=True)
        env = {**os.environ, "WORKBENCH_STORE": str(path)}
        typer.echo(f"JupyterLab on {NOTEBOOKS_DIR} (store {path})", err=True)
        raise typer.Exit(subprocess.call(jupyterlab_command(port=port, browser=browser, notebook=notebook),
                                         env=env))
