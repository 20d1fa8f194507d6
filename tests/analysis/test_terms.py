"""Reward terms as frames (workbench.analysis.terms), read back from a real store."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from workbench.analysis import term_names, terms_by_step, terms_wide
from workbench.store import StepRecord, open_store
from workbench.tasks.rewards import term_means, terms_array


def test_terms_per_step_and_per_rollout_from_the_store(tmp_path):
    steps_terms = {1: {"verifier": np.array([1.0, 0.0, 1.0]), "format": np.array([1.0, 1.0, 0.0])},
                   2: {"verifier": np.array([0.0, 0.0, 1.0]), "overlong": np.array([0.0, -0.5, np.nan])}}
    with open_store(tmp_path / "store") as store:
        run_id = store.create_run("terms", {}, 0)
        for step, terms in steps_terms.items():
            rows = pa.table({"stage": pa.array([0, 0, 0], pa.int32()), "prompt_id": ["p", "p", "q"],
                             "idx": pa.array([0, 1, 0], pa.int32()), "reward": pa.array([0.0, 0.0, 0.0], pa.float32()),
                             "reward_terms": terms_array(terms, 3)})
            store.write_step(StepRecord(run_id, step, {"rollout/count": 3, **term_means(terms)}, rows))
        steps = store.run_steps(run_id)
        rollouts = store.rollouts(run_id, columns=["step", "reward_terms"], limit=10)
    assert term_names(steps) == ["verifier", "format", "overlong"]
    by_step = terms_by_step(steps)
    assert by_step["reward/verifier"].to_list() == [2 / 3, 1 / 3]
    assert by_step["reward/format"].to_list() == [2 / 3, None]
    assert by_step["reward/overlong"].to_list() == [None, -0.25]  # NaN: the third rollout lacks it
    wide = terms_wide(rollouts)
    assert "reward_terms" not in wide.columns
    assert wide["term:overlong"].to_list() == [None, None, None, 0.0, -0.5, None]
    assert wide["term:format"].to_list() == [1.0, 1.0, 0.0, None, None, None]
