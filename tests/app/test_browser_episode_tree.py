"""In a real browser (Debian's chromium through Playwright, against `workbench app`): the Rollouts page of
episode runs that allocate inside episodes (issue #41, docs/episode-allocation.md), on the small tools
organism with the real calculator. An ARPO run's groups are drawn as trees of turns (each episode nested
under the one it branched from, its branch point marked with the decision the store holds); a GRPO-RoC
run's dropped episodes are drawn apart with their penalty and reason, and only its kept ones as
conversations; a run with both draws the tree with RoC's verdict on every node. One store, one app and
three one-step runs for the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_browser import CHROMIUM, app_server, browser, open_rollouts  # noqa: F401 - browser: a fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
NODES = """() => Array.from(document.querySelectorAll('[data-episode-node]'), n => {
  const up = n.parentElement.closest('[data-episode-node]'), tree = n.closest('[data-episode-tree]');
  const head = n.firstElementChild, mark = head.querySelector('[data-branch-at]'), roc = head.querySelector('[data-roc]');
  return {prompt: tree.dataset.episodeTree, idx: +n.dataset.episodeNode, parent: up ? +up.dataset.episodeNode : null,
          at: mark ? +mark.dataset.branchAt : null, before: mark ? mark.dataset.entropyBefore : null,
          after: mark ? mark.dataset.entropyAfter : null, draw: mark ? mark.dataset.draw : null,
          roc: roc ? roc.dataset.roc : null};
})"""
"""Every drawn episode node: its group's prompt, its idx, the node it is drawn under, its branch mark, RoC's verdict."""
DROPPED = """() => Array.from(document.querySelectorAll('[data-dropped-idx]'), d => ({
  prompt: d.closest('[data-roc-dropped]').dataset.rocDropped, idx: +d.dataset.droppedIdx,
  penalty: d.dataset.penalty, reason: d.dataset.reason}))"""


@pytest.fixture(scope="module")
def runs(new_store, tiny_tools_config, tmp_path_factory):
    """Three one-step runs in one store, each with at most 32 rows (one page): ARPO (threshold 1: a tool
    result branches while its group has slots), GRPO-RoC (x2 over 16 grants) and both; their rows."""
    from workbench.engine import run
    from workbench.store import open_store

    root = new_store(tmp_path_factory.mktemp("browser-episode-tree") / "store")
    quiet = dict(steps=1, eval__every=0, eval__at_start=False, checkpoint__every=0)
    small = dict(allocator__budget=16, allocator__prompts_per_step=4)
    arpo = dict(rollout__episodes__arpo_branch=True, rollout__episodes__arpo_threshold=1.0)
    roc = dict(rollout__episodes__roc_oversample=2)
    ids = {"arpo": run(tiny_tools_config(name="arpo", **quiet, **arpo), store=str(root)),
           "roc": run(tiny_tools_config(name="roc", **quiet, **small, **roc), store=str(root)),
           "both": run(tiny_tools_config(name="both", **quiet, **small, **arpo, **roc), store=str(root))}
    with open_store(str(root)) as store:
        rows = {k: store.rollouts(rid, limit=100).to_dicts() for k, rid in ids.items()}
    assert all(len(r) == 32 for r in rows.values())
    return root, ids, rows


@pytest.fixture(scope="module")
def page(runs, browser):
    root = runs[0]
    with app_server(root, root.parent / "app.log") as url:
        p = browser.new_page(viewport={"width": 1400, "height": 1800})
        p.base = url
        yield p
        p.close()


def _f(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _conversations(page) -> list[int]:
    """The idx of every episode drawn as a conversation (in a fold of its own)."""
    labels = [t for t in page.locator("[data-testid='stExpander'] summary").all_inner_texts() if "as a conversation" in t]
    return sorted(int(t.split("#")[1].split()[0]) for t in labels)


def _check_tree(drawn: dict, stored: list[dict]) -> None:
    """Every episode of a group with a branch drawn once, nested under its parent; a group whose slots were all
    filled whole has no tree (its episodes are conversations, `_conversations`)."""
    branched = {r["prompt_id"] for r in stored if r["parent_idx"] is not None}
    stored = [r for r in stored if r["prompt_id"] in branched]
    assert sorted(drawn) == sorted((r["prompt_id"], r["idx"]) for r in stored)
    for r in stored:
        n = drawn[(r["prompt_id"], r["idx"])]
        assert n["parent"] == r["parent_idx"], r  # nested under the episode it branched from
        if r["parent_idx"] is None:
            assert n["at"] is None
            continue
        assert (n["at"], n["before"], n["after"], n["draw"]) == (
            r["branch_at"], _f(r["branch_entropy_before"]), _f(r["branch_entropy_after"]), _f(r["branch_draw"])), r


def test_an_arpo_runs_groups_are_trees_of_turns_with_their_branch_points(runs, page):
    _, ids, rows = runs
    open_rollouts(page, ids["arpo"], "episode-tree-arpo")
    stored = rows["arpo"]
    n_branches = sum(r["parent_idx"] is not None for r in stored)
    if n_branches == 0:  # threshold 1.0 branches at every tool result; a call is the sampler's draw
        pytest.skip("no whole episode called the tool on this machine's draws")
    drawn = {(n["prompt"], n["idx"]): n for n in page.evaluate(NODES)}
    _check_tree(drawn, stored)
    assert all(n["roc"] is None for n in drawn.values())
    flat = sorted(r["idx"] for r in stored if r["prompt_id"] not in {p for p, _ in drawn})
    assert _conversations(page) == flat
    assert page.locator("[data-shared-turns]").count() == n_branches  # a branch's shared turns drawn once, in its parent
    assert page.locator("[data-roc-dropped]").count() == 0


def test_a_roc_runs_dropped_episodes_are_drawn_apart(runs, page):
    _, ids, rows = runs
    open_rollouts(page, ids["roc"], "episode-roc")
    stored = rows["roc"]
    want = sorted((r["prompt_id"], r["idx"], _f(r["filter_penalty"]), r["filter_reason"])
                  for r in stored if not r["filter_kept"])
    assert len(want) == 16
    assert sorted((d["prompt"], d["idx"], d["penalty"], d["reason"]) for d in page.evaluate(DROPPED)) == want
    assert page.locator("[data-roc-dropped]").count() == 4  # one section per group
    assert _conversations(page) == sorted(r["idx"] for r in stored if r["filter_kept"])
    assert page.locator("[data-episode-node]").count() == 0


def test_both_on_draws_the_tree_with_rocs_verdict_on_every_node(runs, page):
    _, ids, rows = runs
    open_rollouts(page, ids["both"], "episode-tree-both")
    stored = rows["both"]
    drawn = {(n["prompt"], n["idx"]): n for n in page.evaluate(NODES)}
    _check_tree(drawn, stored)
    for r in stored:
        assert drawn[(r["prompt_id"], r["idx"])]["roc"] == ("kept" if r["filter_kept"] else "dropped"), r
    assert sorted((d["prompt"], d["idx"]) for d in page.evaluate(DROPPED)) == sorted(
        (r["prompt_id"], r["idx"]) for r in stored if not r["filter_kept"])
