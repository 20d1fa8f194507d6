"""The kill points: parsing `WORKBENCH_FAULT`, and a process killing itself exactly at the armed count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import faults

ROOT = str(Path(__file__).resolve().parents[2])


def test_parse_reads_points_and_counts():
    assert faults.parse("commit:3, generate:1,eval") == {"commit": 3, "generate": 1, "eval": 1}
    assert faults.parse("") == {} and faults.parse(None) == {}


@pytest.mark.parametrize("spec, words", [
    ("explode:1", ["unknown kill point 'explode'", "generate"]),
    ("commit:0", ["'commit:0'", ">= 1"]),
    ("commit:x", ["'commit:x'", "integer"]),
])
def test_a_bad_spec_names_the_variable_and_the_part(spec, words):
    with pytest.raises(ValueError) as err:
        faults.parse(spec)
    assert str(err.value).startswith("WORKBENCH_FAULT:")
    for w in words:
        assert w in str(err.value)


def test_every_point_is_called_somewhere_in_the_package():
    """Each point in POINTS is wired into the code (a renamed call would silently never fire)."""
    src = "\n".join(p.read_text() for p in (Path(ROOT) / "workbench").rglob("*.py") if p.name != "faults.py")
    for name in faults.POINTS:
        assert f'fault_point("{name}")' in src, name


def test_unarmed_points_do_nothing_and_count_nothing():
    faults.arm(None)
    for _ in range(3):
        faults.fault_point("commit")
    assert faults.reached("commit") == 0


def _child(spec: str | None, calls: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom workbench.faults import fault_point\n"
            f"for i, name in enumerate({calls!r}.split()):\n"
            "    print(i, name, flush=True)\n"
            "    fault_point(name)\n"
            "print('done', flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    if spec:
        env[faults.ENV] = spec
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_process_dies_by_sigkill_at_the_armed_count():
    out = _child("update:2", "generate update commit update commit")
    assert out.returncode == -signal.SIGKILL
    assert out.stdout.split("\n")[-2] == "3 update"  # the 2nd `update` is call 3; nothing ran after it


def test_without_the_variable_the_process_runs_through():
    out = _child(None, "generate update commit")
    assert out.returncode == 0 and out.stdout.strip().endswith("done")
