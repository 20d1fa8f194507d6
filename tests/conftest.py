"""Fixtures shared by every test folder: the small model organism (built once per machine in one
place, `workbench.experiments.tiny.SMALL_ORGANISMS`), fresh stores that link it in, the tiny run
config, and a real PostgreSQL server. Folder conftests hold only what their own folder uses.

Which tests share a pytest-xdist worker (`-n 2 --dist loadgroup`, as dev/test.sh runs them): the
tests of one file (module fixtures are built once, and a file may steer one run through its tests in
order), every `browser` test (one Chromium at a time), and every test marked `xdist_group("ray")`
(one local Ray runtime at a time)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def organism_models() -> Path:
    """A `models/` folder holding the small test organism (built on first use, then reused)."""
    from workbench.experiments.tiny import small_organism_models

    return small_organism_models()


@pytest.fixture(scope="session")
def organism_store(organism_models) -> Path:
    """The folder holding `organism_models` as its `models/` (the engine finds the organism there by
    its recipe hash). Never write runs into it: use `store_dir` or `new_store`."""
    return organism_models.parent


@pytest.fixture(scope="session")
def new_store(organism_models):
    """new_store(path): a fresh store directory at `path` that finds the session's organism (linked
    in, not rebuilt). For stores shared by a module's tests (module- or session-scoped fixtures)."""

    def make(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        (path / "models").symlink_to(organism_models)
        return path

    return make


@pytest.fixture
def store_dir(new_store, tmp_path) -> Path:
    """A fresh store per test that reuses the session's organism."""
    return new_store(tmp_path / "store")


@pytest.fixture(scope="session")
def tiny_config():
    """tiny_config(steps=4, eval__every=0): the tiny run (`workbench.experiments.tiny.tiny_run`: the
    small organism, 8 prompts x 4 rollouts, 3 steps) as a RunConfig, `__` separating tables; a
    section given as a dict (allocator={...}) replaces that section. `.to_dict()` for launch()."""
    from workbench.experiments.tiny import tiny_run

    def make(**over):
        return tiny_run({key.replace("__", "."): value for key, value in over.items()})

    return make


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server (Debian's `postgresql`, installed by `dev/setup.sh --dev`) for the
    module, on a unix socket in a temporary folder of its own; skips when its binaries are missing."""
    from workbench.store.pglocal import local_postgres, server_bin

    if server_bin() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with local_postgres(fsync=False) as url:
        yield url


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))
        elif not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
