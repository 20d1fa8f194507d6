"""Real TRL 1.16 logging live with two reward functions (`correct`, `short`, weights 1 and 0.5): each
function's values stored as a reward term, the same as TRL's own completion files imported."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from f32 import f32_atol

pytest.importorskip("trl", reason="the trl extra is not installed")

import tests.integrations.test_trl_live as live  # noqa: E402
from tests.integrations.test_trl_live import organism  # noqa: E402,F401 (the small organism, a fixture)
from workbench.integrations import import_path  # noqa: E402
from workbench.store import open_store  # noqa: E402


def _terms(rows: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame([dict(t) for t in rows["reward_terms"].to_list()])


def test_live_trl_with_two_reward_functions_stores_each_as_a_term(organism, tmp_path):
    """Real TRL: the live logger and TRL's own completion files, imported, give the same terms; each
    term's step mean is what TRL logged as `rewards/<function>/mean`."""
    trainer = live.make_trainer(organism, tmp_path, steps=2, log_completions=True, num_completions_to_print=0)
    live.train(trainer)
    logged = live.train_logs(trainer)
    with open_store(tmp_path / "store") as store:
        run_id = trainer.workbench_run_id
        rows = store.sql("SELECT step, prompt_id, idx, reward, reward_terms FROM rollouts WHERE run_id = ? "
                         "ORDER BY step, prompt_id, idx", [run_id])
        steps = store.run_steps(run_id)
        report = import_path(store, "trl", tmp_path / "out" / "completions", name="imported",
                             options={"reward_weights": {"correct": 1.0, "short": 0.5}})
        imported = store.sql("SELECT step, prompt_id, idx, reward_terms FROM rollouts WHERE run_id = ? "
                             "ORDER BY step, prompt_id, idx", [report["run_id"]])
    terms = _terms(rows)
    assert terms.columns == ["correct", "short"] and rows.height == 2 * live.PROMPTS * live.GENERATIONS
    np.testing.assert_allclose(rows["reward"], terms["correct"] + 0.5 * terms["short"], rtol=0,
                               atol=f32_atol(1.5, 2))
    got = _terms(imported)
    for name in ("correct", "short"):
        np.testing.assert_allclose(got[name], terms[name], rtol=0, atol=f32_atol(1.0, 1))
    for step in (1, 2):
        m = dict(steps.filter(pl.col("step") == step)["metrics"][0])
        for name in ("correct", "short"):
            assert m[f"reward/{name}"] == pytest.approx(logged[step][f"rewards/{name}/mean"], abs=1e-6)
