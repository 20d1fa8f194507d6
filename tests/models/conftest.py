"""Fixtures shared by the real-model tests (SmolLM2-135M-Instruct): one short engine run whose store
the engine's, the dashboard's and the notebooks' tests all read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SMOLLM2_RUN = ["steps=2", "allocator.prompts_per_step=2", "allocator.budget=4", "allocator.params.n=2",
               "sampling.max_new_tokens=8", "eval.at_start=true", "eval.every=0", "eval.max_prompts=2",
               "eval.samples=2", "model.threads=1", "model.device=\"cpu\"", "logging.heartbeat_s=0.5"]
"""configs/smollm2.toml shrunk: 2 prompts x 2 rollouts a step, 8 new tokens, an evaluation of 2 prompts x 2
samples at the start and at the end (the pass@k notebook compares a first and a last one)."""


@pytest.fixture(scope="session")
def smollm2_run(smollm2_dir, new_store, tmp_path_factory) -> tuple[Path, str]:
    """Two engine steps of configs/smollm2.toml (SMOLLM2_RUN) in a fresh store: (store, run id)."""
    from workbench.engine import run
    from workbench.engine.checkpoint import checkpoint_dir
    from workbench.models.sources import smollm2_config

    store = new_store(tmp_path_factory.mktemp("smollm2") / "store")
    rid = run(smollm2_config(SMOLLM2_RUN), store=str(store))
    ckpt = checkpoint_dir(store, rid)
    assert any(ckpt.iterdir())  # the final checkpoint was written ...
    shutil.rmtree(ckpt)  # ... and is ~1.6 GB (weights and AdamW state): not kept in the temporary folder
    return store, rid
