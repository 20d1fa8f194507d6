"""Every page through AppTest on a store made by real short organism runs (one uniform, one
multi-stage): no exceptions, and what each page shows is what the store holds."""

from __future__ import annotations

import polars as pl
import pytest

from apptest import goto, open_app
from workbench.store import open_store


@pytest.fixture(scope="module")
def organism_runs(new_store, tiny_config, tmp_path_factory):
    """(store, run ids) of two short organism runs: uniform, then multi-stage."""
    from workbench.engine import run

    root = new_store(tmp_path_factory.mktemp("organism-app") / "store")
    ids = []
    for cfg in (
        tiny_config(name="tiny-uniform", steps=4, checkpoint__every=50),
        tiny_config(name="tiny-multistage", steps=4, checkpoint__every=50,
                    allocator={"name": "multistage", "budget": 64, "prompts_per_step": 8,
                               "params": {"n": 4, "n_max": 12}}),
    ):
        ids.append(run(cfg, store=str(root)))
    return root, ids


@pytest.fixture
def at(organism_runs, monkeypatch):
    return open_app(organism_runs[0], monkeypatch, timeout=120)


def test_every_page_on_an_organism_run(at, organism_runs):
    root, ids = organism_runs
    newest = ids[-1]
    with open_store(root) as store:
        steps = store.run_steps(newest).sort("step")
        last = steps.tail(1).to_dicts()[0]
        n_last = store.count_rollouts(newest, step_min=last["step"], step_max=last["step"])
        allocs = store.allocations(newest, step=last["step"])
        evals = store.evals(newest)

    table = at.dataframe[0].value
    assert sorted(table["run_id"]) == sorted(ids)
    assert set(table["status"]) == {"finished"}
    assert int(table[table["run_id"] == newest]["steps"].iloc[0]) == steps.height

    goto(at, "live", no_error=True)
    m = {x.label: x.value for x in at.metric}
    assert m["step"] == str(last["step"]) and m["allocator"] == "multistage"
    assert m["reward"] == f"{last['reward_mean']:.3f}"
    assert not evals.is_empty() and float(m["held-out pass@1"]) >= 0.0
    # the engine logs token-entropy quantiles per step: the page draws them, reads no rollouts, and says so
    assert any("token entropy quantiles logged by the engine" in c.value for c in at.caption)

    goto(at, "rollouts", no_error=True)
    assert at.text[0].value.startswith(f"{n_last} rollouts match")
    body = "".join(h.proto.body for h in at.get("html"))
    assert f"<b>step {last['step']}</b>" in body
    # the organism's character tokenizer decodes every token: one coloured span per token
    assert body.count('<span title="H=') >= n_last

    goto(at, "prompt", no_error=True)
    prompt_id = at.selectbox(key="prompt_prompt").value
    top = allocs.group_by("prompt_id").agg(pl.col("granted").sum()).sort(["granted", "prompt_id"],
                                                                          descending=[True, False])
    assert prompt_id == top["prompt_id"][0]

    goto(at, "allocation", no_error=True)
    m = {x.label: x.value for x in at.metric}
    assert m["rollouts granted"] == str(int(allocs["granted"].sum()))
    assert m["stages"] == str(allocs["stage"].n_unique())

    goto(at, "compare", no_error=True)
    summary = at.dataframe[0].value
    assert summary["run"].nunique() == 2
