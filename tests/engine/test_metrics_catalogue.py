"""The one catalogue of step metrics (`workbench/metrics.py`) against what runs record: every metric the
tests' run configs record is declared, every declared metric is recorded by one of them, a guard may
read the asynchronous pipeline's metrics (and fires on one in an eta = 1 run), and docs/metrics.md is
the catalogue's own text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.analysis.terms import metric_items
from workbench.config import RunConfig
from workbench.engine import run
from workbench.metrics import CATALOGUE, STEP_COLUMNS, lookup, metrics_markdown, rule_metric
from workbench.store import open_store

ROOT = Path(__file__).resolve().parents[2]

NOT_RUN_HERE = {"ray", "vllm", "trl", "speculative", "tree", "episodes", "roc", "arpo", "aepo"}
"""Metrics present only with Ray workers, vLLM or TRL's trainer, or with a rollout shape: the runs below
use none of them (a Ray run and a TRL run are slow tests of their own, vLLM needs a GPU; the shapes' runs
check their own entries against the catalogue in tests/engine/test_shapes_run.py and
tests/engine/test_episodes_run.py)."""

STALE = {"name": "stale", "rule": "rollout/staleness_max >= 0", "window": 2}
"""A guard on the pipeline's staleness (recorded at every step of a pipelined run): refused when the
config loaded before the catalogue held the pipeline's metrics."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, new_store):
    """Metric names recorded by the runs the tests use, by run: a synchronous run with an evaluation,
    reward terms and a multi-stage allocator; an asynchronous one (eta = 1, the generator process) with a
    guard on its staleness; and an imported file of rollouts (the generic JSONL format)."""
    from benchmarks.tiny import tiny_run
    from workbench.integrations import get_format
    from workbench.integrations.common import Importer

    out: dict[str, set[str]] = {}
    runs = {
        "sync": {"steps": 2, "eval.every": 2, "eval.at_start": False, "allocator.name": "dynamic_sampling",
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
                seen |= {k for k, _ in metric_items(m)}
            alerts[name] = st.alerts(run_id).to_dicts()
        out[name] = seen
    tmp = tmp_path_factory.mktemp("imported")
    rows = [{"prompt": f"{p} + {p}", "response": f"{2 * p + i % 2}", "reward": float(i % 2 == 0), "step": s,
             "length": 2, "advantage": 0.5 - i % 2} for s in (1, 2) for p in range(4) for i in range(4)]
    (tmp / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open_store(tmp / "store") as st:
        report = Importer(st, get_format("jsonl"), tmp / "rollouts.jsonl", options={
            "map": "prompt=prompt,response=response,reward=reward,step=step,length=length,advantage=advantage"}
        ).run_once()
        out["import"] = {k for m in st.run_steps(report.run_id)["metrics"].to_list() for k, _ in metric_items(m)}
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


def test_each_worker_records_its_lanes(recorded):
    """The per-worker lanes (workbench/engine/timing.py): with the pipeline the generator's thread made the
    batches (allocate, generate, verify) and the trainer trained; a synchronous run has the trainer's only."""
    names, _ = recorded
    lanes = {run: {tuple(n.split("/")[1:3]) for n in seen if n.startswith("lane/") and n.endswith("/start")}
             for run, seen in names.items()}
    assert {("generator", "generate"), ("generator", "verify"), ("trainer", "train"), ("trainer", "log")} <= lanes["eta1"]
    assert ("trainer", "generate") not in lanes["eta1"]
    assert {("trainer", "generate"), ("trainer", "train")} <= lanes["sync"]
    assert not {w for w, _ in lanes["sync"]} - {"trainer"} and not lanes["import"]


def test_a_guard_on_the_pipelines_staleness_loads_and_fires(recorded):
    _, alerts = recorded
    for rule in ("rollout/staleness_max > 2", "train/is_weight_mean > 3", "timing_s/trainer_idle > 1"):
        RunConfig.from_dict({"guards": [{"name": "g", "rule": rule}]})  # loads (was refused: "unknown metric")
    assert rule_metric("rollout/staleness_max") and not rule_metric("alloc/allocator")  # a name, not a number
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
