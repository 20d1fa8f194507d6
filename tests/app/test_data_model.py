"""The dashboard finds a run's model where the engine puts it: both ask `run_model_dir`
(workbench/models/sources.py), the profile rule included (a `skewed` run's organism is warm-started on
the skewed levels, a recipe of its own)."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.models.organism import OrganismRecipe, organism_dir
from workbench.models.sources import run_model_dir
from workbench.store import open_store


def test_the_dashboard_finds_a_skewed_runs_organism_where_the_engine_puts_it(tmp_path, monkeypatch):
    import streamlit as st

    from app import run_tokens

    cfg = RunConfig.from_dict({"task": {"kind": "arithmetic", "profile": "skewed"}})
    path = tmp_path / "store"
    with open_store(path) as store:
        rid = store.create_run("skewed", cfg.to_dict(), seed=0)
        plain = store.create_run("default", RunConfig.from_dict({}).to_dict(), seed=0)
    monkeypatch.setenv("WORKBENCH_STORE", str(path))
    st.cache_data.clear()
    st.cache_resource.clear()
    got, model = run_tokens._model_dir(rid)
    skewed = organism_dir(path, OrganismRecipe.from_dict({"task": cfg.to_dict()["task"]}))
    assert got == skewed == run_model_dir(cfg, path, build=False) and model["path"] == "organism"
    assert skewed != organism_dir(path)  # the default recipe's directory: what the dashboard read before
    assert run_tokens._model_dir(plain)[0] == organism_dir(path)
    assert not (path / "models").exists()  # a reader builds nothing
