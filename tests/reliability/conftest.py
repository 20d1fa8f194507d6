"""Shared fixtures: the small test organism, built once and kept between sessions (the recipe hash
names its directory, so a stale copy cannot be picked up), and a fresh store per test linking it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def organism_models() -> Path:
    """A `models/` directory holding the small test organism."""
    from workbench.models.organism import ensure_organism, small_recipe

    root = Path(tempfile.gettempdir()) / "workbench-test-organisms"
    ensure_organism(root, small_recipe())
    return root / "models"


@pytest.fixture
def store_dir(organism_models, tmp_path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    (root / "models").symlink_to(organism_models)
    return root
