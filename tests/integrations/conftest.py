"""Shared fixtures of the importer tests: the committed dumps and a fresh store per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VERL = FIXTURES / "verl"
TRL = FIXTURES / "trl" / "completions"
NEMO = FIXTURES / "nemo_rl"


@pytest.fixture
def store(tmp_path):
    from workbench.store import open_store

    with open_store(tmp_path / "store") as s:
        yield s


@pytest.fixture
def verl_copy(tmp_path) -> Path:
    """A writable copy of the verl fixture: rollouts/ and validation/."""
    dst = tmp_path / "verl"
    shutil.copytree(VERL / "rollouts", dst / "rollouts")
    shutil.copytree(VERL / "validation", dst / "validation")
    return dst
