"""`workbench app` binds 127.0.0.1 without a login unless --address/--host says otherwise; any other
address gets tokens (random ones, printed, unless given) and a note about TLS."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("extra, locked, bound", [([], False, "127.0.0.1"), (["--address", "0.0.0.0"], True, "0.0.0.0"),
                                                  (["--host", "192.168.1.5"], True, "192.168.1.5"),
                                                  (["--address", "localhost"], False, "localhost")])
def test_app_command_binds_loopback_and_locks_otherwise(monkeypatch, tmp_path, extra, locked, bound):
    seen = {}
    monkeypatch.setattr(app_cmd, "exec_app", lambda path, **kw: seen.update(kw))
    result = CliRunner().invoke(app, ["app", "--store", str(tmp_path / "s"), *extra])
    assert result.exit_code == 0, result.output
    assert seen["address"] == bound
    gate = seen["gate"]
    assert gate.open_without_token is not locked
    assert ("note: the dashboard binds" in result.output) is locked
    tokens = re.findall(r"\((read|control)\) on http://\S+/\?token=(\S+) ", result.output)
    assert len(tokens) == (2 if locked else 0)
    for role, token in tokens:  # each printed token opens the gate with its own role
        assert gate.token_role(token) == (role, "")


def test_tokens_given_by_option_env_or_file(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(app_cmd, "exec_app", lambda path, **kw: seen.update(kw))
    monkeypatch.setenv("WORKBENCH_APP_READ_TOKEN", "read-token-from-the-env-0123")
    result = CliRunner().invoke(app, ["app", "--store", str(tmp_path / "s"), "--host", "0.0.0.0", "--token",
                                      "control-token-0123456789", "--allow-host", "box.example"])
    assert result.exit_code == 0, result.output
    gate = seen["gate"]
    assert gate.token_role("control-token-0123456789")[0] == "control"
    assert gate.token_role("read-token-from-the-env-0123")[0] == "read"
    assert gate.host_allowed("box.example:8501") and not gate.host_allowed("other.example")
    monkeypatch.delenv("WORKBENCH_APP_READ_TOKEN")
    tokens = tmp_path / "tokens"
    tokens.write_text("# the team's\nread read-token-from-a-file-0123\n")
    result = CliRunner().invoke(app, ["app", "--store", str(tmp_path / "s"), "--token-file", str(tokens)])
    assert result.exit_code == 0, result.output
    assert seen["gate"].token_role("read-token-from-a-file-0123")[0] == "read"
    assert not seen["gate"].open_without_token  # a token given on localhost is asked for too


@pytest.mark.parametrize("extra, field", [(["--token", "short"], "--token"),
                                          (["--token-file", "missing"], "--token-file"),
                                          (["--session-hours", "0"], "--session-hours")])
def test_bad_token_options_are_refused_by_name(monkeypatch, tmp_path, extra, field):
    monkeypatch.setattr(app_cmd, "exec_app", lambda path, **kw: None)
    result = CliRunner().invoke(app, ["app", "--store", str(tmp_path / "s"), *extra])
    assert result.exit_code == 1 and str(result.exception).startswith(field)  # main() prints it as one line
