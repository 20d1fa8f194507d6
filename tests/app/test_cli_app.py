"""`workbench app` (the Streamlit command line and the store it passes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.commands import app as app_cmd

runner = CliRunner()


def test_app_command_starts_streamlit_on_the_store(monkeypatch, tmp_path):
    seen = {}

    def fake_exec(path, argv, env):
        seen["argv"], seen["env"] = argv, env
        assert path == argv[0]

    monkeypatch.setattr(app_cmd.os, "execve", fake_exec)
    result = runner.invoke(app, ["app", "--store", str(tmp_path), "--port", "8765", "--headless"])
    assert result.exit_code == 0, result.output
    argv = seen["argv"]
    assert argv[1:4] == ["-m", "streamlit", "run"] and Path(argv[4]) == app_cmd.SERVE  # main.py behind the gate
    assert argv[argv.index("--server.port") + 1] == "8765"
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"  # this machine only, unless told
    assert argv[argv.index("--server.headless") + 1] == "true"
    assert argv[argv.index("--client.toolbarMode") + 1] == "viewer"  # the toolbar has no 'Deploy' button
    assert argv[-3:] == ["--", "--store", str(tmp_path.resolve())]
    assert seen["env"]["WORKBENCH_STORE"] == str(tmp_path.resolve())


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_app_refuses_a_path_that_is_not_a_store(tmp_path, kind):
    """A file, or a folder of other things, is refused with one line before any server starts (a
    server would outlive the timeout)."""
    import subprocess
    import sys

    path = tmp_path / "passwd"
    if kind == "file":
        path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    else:
        path.mkdir()
        (path / "notes.txt").write_text("not a store\n")
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "app", "--store", str(path), "--headless",
                          "--port", "8766"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1 and str(path) in out.stderr


def test_every_page_is_timed():
    pages = {p.stem for p in (app_cmd.APP_DIR / "app_pages").glob("*.py")}
    assert {Path(p).stem for p in app_cmd.PAGES.values()} == pages
