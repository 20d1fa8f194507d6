"""`workbench bench episode-allocation --arms`: an unknown arm is refused by name before any run starts, and the
AEPO arm configures what docs/episode-allocation.md says it does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.episode_allocation import ARMS, DEFAULT_ARMS, bench_episode_allocation
from workbench.errors import ConfigError


def test_an_unknown_arm_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="--arms: unknown nosuch; valid: uniform, roc, arpo, arpo_hard, aepo"):
        bench_episode_allocation(str(tmp_path), arms=("aepo", "nosuch"))
    assert not (tmp_path / "catalog.sqlite").exists()  # nothing ran


def test_the_cli_says_which_arm(tmp_path):
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "bench", "episode-allocation", "--arms", "aepo,bogus",
                          "--store", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "unknown bogus" in out.stderr + out.stdout


def test_the_aepo_arm_is_aepo_as_documented():
    assert ARMS["aepo"] == {"rollout.episodes.aepo_branch": True, "algorithm.loss": "aepo_clip",
                            "algorithm.entropy_advantage": 0.2}
    assert ARMS["arpo_hard"]["rollout.episodes.arpo_advantage"] == "hard" and "arpo_hard" not in DEFAULT_ARMS
