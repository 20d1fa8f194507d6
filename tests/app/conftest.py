"""Shared by the dashboard tests: sys.path for `app.*` (the repository root; app/main.py does the
same) and the `synth` helper (this folder); the small model organism, built once and cached in
pytest's cache folder (keyed by its recipe hash), and tiny organism run configs on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for p in (HERE.parents[1], HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


@pytest.fixture(scope="session")
def organism_models(request):
    """A `models/` folder holding the small test organism (built on first use, then reused)."""
    from workbench.models.organism import ensure_organism, small_recipe

    root = Path(request.config.cache.mkdir("workbench-organism"))
    ensure_organism(root, small_recipe())
    return root / "models"


def new_store(organism_models: Path, path: Path) -> Path:
    """A fresh store directory that finds the session's organism (linked in, not rebuilt)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "models").symlink_to(organism_models)
    return path


def tiny_config(name: str, steps: int, *, allocator: dict | None = None, eval_every: int = 2) -> dict:
    """A run config (as a dict) of a few seconds a step on the small organism: 8 prompts x 4 rollouts."""
    from workbench.models.organism import small_recipe

    rec = small_recipe().to_dict()
    return {
        "name": name,
        "steps": steps,
        "model": {"organism": rec, "device": "cpu", "threads": 1},
        "task": dict(rec["task"], kind="arithmetic"),
        "allocator": allocator or {"name": "uniform", "budget": 32, "prompts_per_step": 8, "params": {"n": 4}},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "eval": {"every": eval_every, "samples": 4, "max_prompts": 12},
        "checkpoint": {"every": 50},
        "logging": {"heartbeat_s": 0.5},
    }
