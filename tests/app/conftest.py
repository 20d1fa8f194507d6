"""What this folder's tests share: the dashboard served by `workbench app` in its own process
(`app_server`, with or without tokens), a headless Chromium for a module's tests (the `browser`
fixture), and helpers kept for tests written against this folder's old conftest (`from conftest import
new_store, tiny_config`; new tests take the root fixtures instead: tests/conftest.py). The browser test
files import the server and the page helpers through tests/app/test_browser.py. The AppTest fixture
(`app`: the dashboard on the module's `lake` store) is here, over `tests/apptest.py` (`open_app`,
`goto`), which the other folders' AppTest tests import too."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from waiting import wait_until

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def app_server(root: Path, log_path: Path, *options: str, env: dict[str, str] | None = None,
               headers: dict[str, str] | None = None) -> Iterator[str]:
    """`workbench app` on the store at `root` (`options`: more of its options, such as `--token T`) in
    its own process group, its output in `log_path`; yields its URL once its health check answers (sent
    with `headers`), then stops it (SIGTERM, then SIGKILL)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "app", "--store", str(root), "--port", str(port), "--headless",
         *options],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True, env=env)

    def healthy() -> bool:
        assert proc.poll() is None, log_path.read_text()
        req = urllib.request.Request(f"{base}/_stcore/health", headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status == 200 and r.read() == b"ok"
        except OSError:  # not listening yet (or refused while it starts)
            return False

    try:
        wait_until(healthy, 120, "the app's health check", every=0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the app's own process group (start_new_session)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def app(lake, monkeypatch):
    """The dashboard through AppTest on the store of the requesting module's `lake` fixture (its first
    item: the store's path), its first page run without an exception."""
    pytest.importorskip("streamlit")
    from apptest import open_app

    return open_app(lake[0], monkeypatch)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def new_store(organism_models: Path, path: Path) -> Path:
    """A fresh store directory at `path` that finds the organism in `organism_models` (linked in)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "models").symlink_to(organism_models)
    return path


def tiny_config(name: str, steps: int, *, allocator: dict | None = None, eval_every: int = 2) -> dict:
    """The tiny run (benchmarks.tiny) as a dict, with no checkpoints before step 50."""
    from benchmarks.tiny import tiny_run

    over = {"name": name, "steps": steps, "eval.every": eval_every, "checkpoint.every": 50}
    if allocator:
        over["allocator"] = allocator
    return tiny_run(over).to_dict()
