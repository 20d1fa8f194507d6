"""Reward terms on the dashboard (AppTest), on a real organism run with three terms and on a TRL run with
two reward functions (the files real TRL wrote, imported): the Run page charts each term's mean per step
(the step metrics `reward/<term>`), the Rollouts page colours by a term and filters on its value."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("streamlit")

from conftest import new_store, tiny_config  # noqa: E402
from workbench.store import open_store  # noqa: E402

TRL = Path(__file__).resolve().parents[1] / "fixtures" / "trl"
TERMS = [
    {"kind": "verifier"},
    {"kind": "format", "pattern": r"^\d+$", "match": "full", "weight": 0.5},
    {"kind": "overlong", "buffer": 3},
]


@pytest.fixture(scope="module")
def lake(organism_models, tmp_path_factory):
    """A store with a 2-step organism run configured with three terms, and the imported TRL run."""
    from workbench.config import RunConfig
    from workbench.engine import run
    from workbench.integrations import import_path

    path = new_store(organism_models, tmp_path_factory.mktemp("terms") / "store")
    cfg = dict(tiny_config("terms", 2, eval_every=0), rewards={"terms": TERMS}, sampling={"max_new_tokens": 6})
    ours = run(RunConfig.from_dict(cfg), store=str(path))
    with open_store(path) as store:
        trl = import_path(store, "trl", TRL, options={"reward_weights": {"correct": 1.0, "digits_only": 0.5}})
    return path, ours, trl["run_id"]


def _page(at, name, run_id):
    at.switch_page(f"app_pages/{name}.py").run()
    at.selectbox(key=f"{name}_run").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _values(v):
    """A trace's x or y: a list, or plotly's typed array ({dtype, bdata} in base64)."""
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def _chart(at, key):
    (el,) = [e for e in at.get("plotly_chart") if e.proto.id and key in e.proto.id]
    return {t["name"]: {"x": _values(t["x"]), "y": _values(t["y"])} for t in json.loads(el.proto.spec)["data"]}


@pytest.mark.parametrize("which, names", [(1, ["verifier", "format", "overlong"]), (2, ["correct", "digits_only"])])
def test_run_page_charts_each_terms_step_mean(app, lake, which, names):
    run_id = lake[which]
    at = _page(app, "live", run_id)
    traces = _chart(at, "live_terms")
    assert list(traces) == names
    with open_store(lake[0]) as store:
        steps = store.run_steps(run_id).sort("step")
    for name in names:
        want = [dict(m)[f"reward/{name}"] for m in steps["metrics"].to_list()]
        assert traces[name]["y"] == pytest.approx(want, abs=1e-12)
        assert traces[name]["x"] == steps["step"].to_list()


def test_rollouts_page_colours_by_a_term_and_filters_on_it(app, lake):
    path, run_id = lake[0], lake[1]
    at = _page(app, "rollouts", run_id)
    assert at.selectbox(key="rollouts_term").options == ["none", "verifier", "format", "overlong"]
    with open_store(path) as store:
        n_all = store.count_rollouts(run_id, step_min=2, step_max=2)
        n_fmt = store.count_rollouts(run_id, step_min=2, step_max=2, term="format", term_min=0.5)
    body = "".join(h.proto.body for h in at.get("html"))
    assert "reward terms" in body and "verifier " in body and "title='" not in body  # no term picked: no colour
    at.selectbox(key="rollouts_term").set_value("format").run()
    assert at.text[0].value.startswith(f"{n_all} rollouts match")  # a term alone hides nothing
    body = "".join(h.proto.body for h in at.get("html"))
    assert "title='format = 1'" in body or "title='format = 0'" in body
    assert "background:rgb(" in body
    assert any("coloured by format" in c.value for c in at.caption)
    at.number_input(key="rollouts_term_min").set_value(0.5).run()
    assert not at.exception
    assert at.text[0].value.startswith(f"{n_fmt} rollouts match") and "term filter: format" in at.text[0].value
    assert 0 < n_fmt < n_all  # the organism writes bare digits often, not always
    body = "".join(h.proto.body for h in at.get("html"))
    assert "title='format = 0'" not in body
