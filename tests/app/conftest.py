"""Helpers kept for tests written against this folder's old conftest (`from conftest import new_store,
tiny_config`). New tests take the root fixtures instead (tests/conftest.py: `new_store`, `tiny_config`)."""

from __future__ import annotations

from pathlib import Path


def new_store(organism_models: Path, path: Path) -> Path:
    """A fresh store directory at `path` that finds the organism in `organism_models` (linked in)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "models").symlink_to(organism_models)
    return path


def tiny_config(name: str, steps: int, *, allocator: dict | None = None, eval_every: int = 2) -> dict:
    """The tiny run (workbench.experiments.tiny) as a dict, with no checkpoints before step 50."""
    from workbench.experiments.tiny import tiny_run

    over = {"name": name, "steps": steps, "eval.every": eval_every, "checkpoint.every": 50}
    if allocator:
        over["allocator"] = allocator
    return tiny_run(over).to_dict()
