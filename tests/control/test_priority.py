"""`workbench.control.priority`: detached runs' niceness (configurable, checked by name) and the quiet
waiting default, which keeps a value the user set."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workbench.control.priority import DEFAULT_RUN_NICE, RUN_NICE_ENV, autogroup_nice, child_env, run_nice
from workbench.errors import ConfigError


def test_run_nice_defaults_and_refuses_bad_values_by_name():
    assert run_nice({}) == DEFAULT_RUN_NICE == 10
    assert run_nice({RUN_NICE_ENV: "0"}) == 0 and run_nice({RUN_NICE_ENV: " 19 "}) == 19
    for bad in ("-1", "20", "ten"):
        with pytest.raises(ConfigError, match=RUN_NICE_ENV):
            run_nice({RUN_NICE_ENV: bad})


def test_child_env_fills_quiet_waiting_but_keeps_the_users_value():
    env = child_env({"PATH": "/bin"})
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env[RUN_NICE_ENV] == "10" and env["PATH"] == "/bin"
    assert child_env({"OMP_WAIT_POLICY": "ACTIVE", RUN_NICE_ENV: "3"})["OMP_WAIT_POLICY"] == "ACTIVE"
    assert child_env({RUN_NICE_ENV: "3"})[RUN_NICE_ENV] == "3"


def test_a_run_process_lowers_its_priority_only_when_asked():
    code = ("import os; from workbench.control.priority import apply_run_priority as a, lower_priority as l; "
            "print(a(), l(2), os.getpriority(os.PRIO_PROCESS, 0))")
    env = {k: v for k, v in os.environ.items() if k != RUN_NICE_ENV}
    own = os.getpriority(os.PRIO_PROCESS, 0)
    out = subprocess.run([sys.executable, "-c", code], env={**env, RUN_NICE_ENV: "7"}, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [str(max(7, own)), str(max(7, own)), str(max(7, own))]  # never lowered back to 2
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "None"


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup scheduling here")
def test_a_detached_run_lowers_its_sessions_autogroup_too():
    """With autogroup scheduling, a process's niceness counts only inside its session: a run in a
    session of its own raises the session's niceness as well, or the dashboard gains nothing."""
    code = ("from workbench.control.priority import apply_run_priority, autogroup_nice; "
            "apply_run_priority(); print(autogroup_nice())")
    env = {**os.environ, RUN_NICE_ENV: "7"}
    own = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         start_new_session=True).stdout.split()
    assert int(own[-1]) >= 7
    mine = autogroup_nice()
    if mine is None:  # the file can read empty in a container whose session has no autogroup of its own
        pytest.skip("this process has no readable autogroup")
    shared = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert shared.split()[-1] == str(mine)  # a process in the caller's session leaves the caller's group alone


def test_the_cli_sets_quiet_waiting_before_torch():
    code = ("import sys, os; sys.argv = ['workbench', '--version']; import workbench.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit:\n    pass\nprint(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["PASSIVE", "False"]
