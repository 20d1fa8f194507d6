"""The one catalogue of step metrics (`workbench/metrics.py`) against what runs record: every metric the
tests' run configs record is declared, every declared metric is recorded by one of them, a guard may
read the asynchronous pipeline's metrics (and fires on one in an eta = 1 run), and docs/metrics.md is
the catalogue's own text."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.engine import run
from workbench.metrics import CATALOGUE, STEP_COLUMNS, lookup, metrics_markdown, rule_metric
from workbench.store import open_store

ROOT = Path(__file__).resolve().parents[2]

NOT_RUN_HERE = {"ray", "vllm"}
"""Metrics present only with Ray workers or vLLM: the runs below use neither (a Ray run is a slow test
of its own, vLLM needs a GPU)."""

STALE = {"name": "stale", "rule": "rollout/staleness_max >= 0 and train/is_weight_mean > 0", "window": 2}
"""A guard on the pipeline's metrics: refused when the config loaded before the catalogue held them."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, new_store):
    """Metric names recorded by the runs the tests use, by run: a synchronous run with an evaluation,
    reward terms and a multi-stage allocator; an asynchronous one (eta = 1, the generator process) with a
    guard on its staleness; and an imported verl dump."""
    from workbench.experiments.tiny import tiny_run
    from workbench.integrations import get_format
    from workbench.integrations.bench import write_verl_dump
    from workbench.integrations.common import Importer

    out: dict[str, set[str]] = {}
    runs = {
        "sync": {"steps": 2, "eval.every": 2, "allocator.name": "dynamic_sampling",
                 "rewards": {"terms": [{"kind": "verifier"}, {"kind": "format", "weight": 0.25, "pattern": r"\d"}]}},
        "eta1": {"steps": 3, "eval.every": 0, "eval.at_start": False, "pipeline.max_staleness": 1, "guards": [STALE]},
    }
    alerts = {}
    for name, over in runs.items():
        store = new_store(tmp_path_factory.mktemp(name))
        seen: set[str] = set()
        run_id = run(tiny_run(over), store=str(store), on_step=lambda step, m: seen.update(m))
        with open_store(store) as st:
            for m in st.run_steps(run_id)["metrics"].to_list():
                seen |= {kv["key"] for kv in m} if isinstance(m, list) else set(m)
            alerts[name] = st.alerts(run_id).to_dicts()
        out[name] = seen
    tmp = tmp_path_factory.mktemp("imported")
    write_verl_dump(tmp / "dump", rollouts=64, prompts_per_step=8, group=4, response_chars=40)
    with open_store(tmp / "store") as st:
        report = Importer(st, get_format("verl"), tmp / "dump").run_once()
        out["import"] = {kv["key"] for m in st.run_steps(report.run_id)["metrics"].to_list() for kv in m}
    return out, alerts


def test_every_recorded_metric_is_in_the_catalogue(recorded):
    names, _ = recorded
    missing = sorted(f"{run}: {n}" for run, seen in names.items() for n in seen if lookup(n) is None)
    assert missing == [], "declare these in workbench/metrics.py"


def test_every_catalogue_entry_is_recorded_by_some_run(recorded):
    names, _ = recorded
    seen = set().union(*names.values())
    unrecorded = [m.name for m in CATALOGUE if m.present not in NOT_RUN_HERE
                  and not any(lookup(n) is m for n in seen)]
    assert unrecorded == [], "no test run records these: a stale entry, or a run config the tests lack"


def test_when_a_metric_is_present_is_what_the_runs_show(recorded):
    names, _ = recorded
    pipeline = {m.name for m in CATALOGUE if m.present in ("pipeline", "generator_process")}
    assert pipeline <= names["eta1"] and not pipeline & names["sync"], sorted(pipeline & names["sync"])
    imported = {m.name for m in CATALOGUE if m.present == "import"}
    assert not imported & (names["sync"] | names["eta1"]) and imported & names["import"]


def test_a_guard_on_the_pipelines_staleness_loads_and_fires(recorded):
    _, alerts = recorded
    assert rule_metric("rollout/staleness_max") and rule_metric("train/is_weight_mean")
    RunConfig.from_dict({"guards": [STALE]})  # loads (was refused: "unknown metric")
    (alert,) = [a for a in alerts["eta1"] if a["guard"] == "stale"]
    assert (alert["first_step"], alert["step"]) == (1, 2)
    assert '"rollout/staleness_max"' in alert["evidence"]


def test_the_store_columns_come_from_the_catalogue():
    from workbench.store.records import STEP_METRIC_KEYS

    assert STEP_METRIC_KEYS["reward_mean"] == ("reward_mean", "rollout/reward_mean")
    assert STEP_METRIC_KEYS["policy_version"] == ("policy_version",)
    assert {k: v[-1] for k, v in STEP_METRIC_KEYS.items()} == STEP_COLUMNS


def test_docs_metrics_md_is_the_catalogue():
    """Regenerate with `workbench metrics --markdown > docs/metrics.md`."""
    assert (ROOT / "docs" / "metrics.md").read_text() == metrics_markdown()
