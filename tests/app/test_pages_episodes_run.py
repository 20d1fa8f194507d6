"""An episodes run on the dashboard (AppTest): a real run of the small tools organism with the calculator;
the Run page draws the episode metrics' curves (tool use, tokens per episode) from the steps the run
recorded, and the Rollouts page opens its episodes as conversations; a run with GRPO-RoC over ARPO-branched
groups gets its trees of turns and its dropped episodes apart (in Chromium: test_browser_episode_tree.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")

from apptest import goto, open_app  # noqa: E402
from workbench.engine import run  # noqa: E402
from workbench.store import open_store  # noqa: E402


@pytest.fixture(scope="module")
def lake(new_store, tools_organism, tiny_tools_config, tmp_path_factory):
    path = new_store(tmp_path_factory.mktemp("episodes-run") / "store")
    seen: dict[int, dict] = {}
    rid = run(tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0), store=str(path),
              on_step=lambda s, m: seen.__setitem__(s, m))
    return path, rid, seen


def _traces(at, key):
    (el,) = [e for e in at.get("plotly_chart") if e.proto.id and key in e.proto.id]
    return {t["name"]: t for t in json.loads(el.proto.spec)["data"]}


def test_the_run_page_draws_the_episode_curves(lake, monkeypatch):
    path, rid, seen = lake
    at = open_app(path, monkeypatch)
    goto(at, "live")
    at.selectbox(key="live_run").set_value(rid).run()
    assert not at.exception, [e.value for e in at.exception]
    tools = _traces(at, "live_tools")
    assert set(tools) >= {"episodes that call a tool", "tool calls that fail"}
    tokens = _traces(at, "live_episode_tokens")
    assert set(tokens) == {"model tokens", "tool-result tokens (not trained on)"}


def test_the_rollouts_page_opens_the_runs_episodes(lake, monkeypatch):
    path, rid, seen = lake
    at = open_app(path, monkeypatch)
    goto(at, "rollouts")
    at.selectbox(key="rollouts_run").set_value(rid).run()
    assert not at.exception, [e.value for e in at.exception]
    with open_store(path) as st:
        rows = st.rollouts(rid, limit=10_000)
    labels = [e.label for e in at.expander if "as a conversation" in e.label]
    assert labels  # the page's first rows, each an episode with its turns and calls counted
    counts = {(int(r["turns"]), int(r["tool_calls"])) for r in rows.to_dicts()}
    for label in labels:
        turns, calls = (int(label.split(" turns")[0].split()[-1]), int(label.split(" tool calls")[0].split()[-1]))
        assert (turns, calls) in counts, label


@pytest.fixture(scope="module")
def allocated(new_store, tools_organism, tiny_tools_config, tmp_path_factory):
    """One step of the small tools organism with GRPO-RoC (x2) over ARPO-branched groups (threshold 1)."""
    path = new_store(tmp_path_factory.mktemp("episodes-allocated") / "store")
    rid = run(tiny_tools_config(steps=1, eval__every=0, eval__at_start=False, checkpoint__every=0,
                                allocator__budget=16, allocator__prompts_per_step=4,
                                rollout__episodes__roc_oversample=2, rollout__episodes__arpo_branch=True,
                                rollout__episodes__arpo_threshold=1.0), store=str(path))
    with open_store(path) as st:
        return path, rid, st.rollouts(rid, limit=10_000)


@pytest.mark.slow
def test_the_rollouts_page_draws_arpo_trees_and_rocs_dropped_episodes(allocated, monkeypatch):
    path, rid, rows = allocated
    at = open_app(path, monkeypatch)
    goto(at, "rollouts")
    at.selectbox(key="rollouts_run").set_value(rid).run()
    assert not at.exception, [e.value for e in at.exception]
    body = "".join(h.proto.body for h in at.get("html"))
    stored = rows.to_dicts()
    branched = {r["prompt_id"] for r in stored if r["parent_idx"] is not None}
    if not branched:  # a branch needs a tool call: the sampler's draw
        pytest.skip("no whole episode called the tool on this machine's draws")
    assert body.count("data-episode-node=") == sum(r["prompt_id"] in branched for r in stored)
    assert body.count("data-branch-at=") == sum(r["parent_idx"] is not None for r in stored)
    assert body.count("data-dropped-idx=") == sum(not r["filter_kept"] for r in stored) == 16
