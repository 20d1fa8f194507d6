"""What this folder's tests share: one tiny run of the small organism trained for them (4 steps, a full
checkpoint every 2, a weights-only snapshot every step), and its policy at a step."""

from __future__ import annotations

import pytest

from workbench.playground.sample import load_policy, run_config
from workbench.store import open_store


@pytest.fixture(scope="package")
def trained(new_store, tiny_config, tmp_path_factory):
    """(store dir, run id) of a finished tiny run with checkpoints at steps 2 and 4 and snapshots 1-4."""
    from workbench.engine import run

    root = new_store(tmp_path_factory.mktemp("playground") / "store")
    cfg = tiny_config(steps=4, eval__every=0, checkpoint__every=2, checkpoint__keep=5, checkpoint__weights_every=1)
    return root, run(cfg, store=str(root))


@pytest.fixture(scope="package")
def policy_at(trained):
    """policy_at(step): the trained run's policy at checkpoint `step` (0: the initial model)."""
    root, rid = trained

    def load(step: int):
        with open_store(str(root), read_only=True) as st:
            cfg = run_config(st.run(rid))
        return load_policy(root, rid, cfg, step)

    return load
