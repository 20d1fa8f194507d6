"""`workbench app` binds 127.0.0.1 unless --address says otherwise, and warns when it does."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import workbench.commands.app as app_cmd
from workbench.cli import app


@pytest.mark.parametrize("address, loopback", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                               ("[::1]", True), ("127.5.0.1", True), ("0.0.0.0", False),
                                               ("::", False), ("192.168.1.5", False), ("example.org", False)])
def test_loopback_detection(address, loopback):
    assert app_cmd.is_loopback(address) is loopback
    assert (app_cmd.exposure_warning(address) is None) is loopback


@pytest.mark.parametrize("extra, warns, bound", [([], False, "127.0.0.1"), (["--address", "0.0.0.0"], True, "0.0.0.0"),
                                                 (["--address", "localhost"], False, "localhost")])
def test_app_command_binds_loopback_and_warns_otherwise(monkeypatch, tmp_path, extra, warns, bound):
    seen = {}
    monkeypatch.setattr(app_cmd, "exec_app", lambda path, **kw: seen.update(kw))
    result = CliRunner().invoke(app, ["app", "--store", str(tmp_path / "s"), *extra])
    assert result.exit_code == 0, result.output
    assert seen["address"] == bound
    assert ("warning: the dashboard binds" in result.output) is warns
