"""A small synthetic store shared by the security tests of one module."""

from __future__ import annotations

import pytest

from workbench.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun

SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=8)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """(store directory, run id) of a store holding one run of 3 synthetic steps (48 rollouts)."""
    path = tmp_path_factory.mktemp("sec") / "store"
    with open_store(path) as store:
        run_id = store.create_run("sec", {}, seed=0)
        gen = SyntheticRun(run_id, SMALL, seed=0)
        for step in range(3):
            store.write_step(gen.step(step))
    return path, run_id
