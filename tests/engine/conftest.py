"""Shared fixtures: a small organism (built once per test session) and tiny run configs on it."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig


@pytest.fixture(scope="session")
def organism_store():
    """A directory holding the small test organism (the engine finds it there by recipe hash). It is
    kept in the system's temporary directory between sessions: the build is deterministic and the
    recipe hash names it, so a stale copy cannot be picked up."""
    import tempfile
    from pathlib import Path

    from workbench.models.organism import ensure_organism, small_recipe

    root = Path(tempfile.gettempdir()) / "workbench-test-organisms"
    ensure_organism(root, small_recipe())
    return root


def _tiny_config(**over) -> RunConfig:
    """A few-second run on the small organism: 8 prompts x 4 rollouts per step."""
    from workbench.models.organism import small_recipe

    rec = small_recipe().to_dict()
    data = {
        "name": "tiny",
        "steps": 3,
        "model": {"organism": rec, "device": "cpu"},
        "task": dict(rec["task"], kind="arithmetic"),
        "allocator": {"budget": 32, "prompts_per_step": 8, "params": {"n": 4}},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "eval": {"every": 2, "samples": 4, "max_prompts": 12},
        "checkpoint": {"every": 2},
        "logging": {"heartbeat_s": 0.5},
    }
    for key, value in over.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return RunConfig.from_dict(data)


@pytest.fixture
def store_dir(organism_store, tmp_path):
    """A fresh store per test that reuses the session's organism (linked in, not rebuilt)."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "models").symlink_to(organism_store / "models")
    return root


@pytest.fixture
def tiny_config():
    """Factory of tiny run configs: tiny_config(steps=4, eval__every=0) (`__` separates tables)."""
    return _tiny_config
