"""In a real browser (Debian's chromium through Playwright, against `workbench app`): the Rollouts page of
a tree-shaped organism run draws each group as a tree (every branched row nested under its parent, its
branch point marked with the token and entropy the store holds), and a speculative run's page shades each
rollout's reused prefix (the store's `reused_tokens` of its response) and marks its rejected draft. One
store, one app and two short runs (1 and 2 steps) for the file (docs/rollout-shapes.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_browser import CHROMIUM, app_server, browser, open_rollouts  # noqa: F401 - browser: a fixture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
NODES = """() => Array.from(document.querySelectorAll('[data-tree-node]'), n => {
  const up = n.parentElement.closest('[data-tree-node]'), tree = n.closest('[data-rollout-tree]');
  const mark = n.firstElementChild.querySelector('[data-branch-at]');
  return {prompt: tree.dataset.rolloutTree, idx: +n.dataset.treeNode, parent: up ? +up.dataset.treeNode : null,
          at: mark ? +mark.dataset.branchAt : null, token: mark ? mark.dataset.branchToken : null,
          entropy: mark ? mark.dataset.branchEntropy : null, text: mark ? mark.innerText : null};
})"""
"""Every drawn tree node: its group's prompt, its idx, the node it is drawn under, and its branch mark."""
BANDS = """() => Array.from(document.querySelectorAll('[data-reused]'),
                           b => [+b.dataset.reused, b.innerText.replaceAll('\\u200b', '')])"""


@pytest.fixture(scope="module")
def shaped_runs(new_store, tiny_config, tmp_path_factory):
    """A tree run (1 step; low thresholds, so that most groups branch) and a speculative run (2 steps on 8
    prompts: every prompt comes back, so step 2 reuses step 1's drafts), in one store; their step's rows."""
    from workbench.engine import run
    from workbench.store import open_store

    root = new_store(tmp_path_factory.mktemp("browser-shapes") / "store")
    quiet = dict(eval__every=0, eval__at_start=False, checkpoint__every=50)
    tree = run(tiny_config(name="tree", steps=1, rollout__shape="tree",
                           rollout__tree={"tau_abs": 0.05, "tau_rel": 0.9}, **quiet), store=str(root))
    spec = run(tiny_config(name="speculative", steps=2, task__train_size=8, rollout__shape="speculative", **quiet),
               store=str(root))
    with open_store(str(root)) as store:
        rows = {tree: store.rollouts(tree, limit=100), spec: store.rollouts(spec, step_min=2, limit=100)}
    return root, tree, spec, rows


@pytest.fixture(scope="module")
def page(shaped_runs, browser):
    root = shaped_runs[0]
    with app_server(root, root.parent / "app.log") as url:
        p = browser.new_page(viewport={"width": 1400, "height": 1800})
        p.base = url
        yield p
        p.close()


def test_a_tree_runs_groups_are_drawn_as_trees_with_their_branch_marks(shaped_runs, page):
    _, run_id, _, rows = shaped_runs
    open_rollouts(page, run_id, "tree")
    drawn = {(n["prompt"], n["idx"]): n for n in page.evaluate(NODES)}
    stored = rows[run_id].to_dicts()
    assert len(drawn) == len(stored) == 32  # every row of the step, once
    branched = [r for r in stored if r["parent_idx"] is not None]
    assert len(branched) >= 4
    for r in stored:
        n = drawn[(r["prompt_id"], r["idx"])]
        assert n["parent"] == r["parent_idx"], r  # nested under the row it branched from
        if r["parent_idx"] is None:
            assert n["at"] is None
            continue
        at = r["branch_at"]
        token = r["response"][at] if at < len(r["response"]) else ""  # the organism: a token per character
        assert (n["at"], n["token"], n["entropy"]) == (at, token, f"{r['token_entropy'][at]:.3f}"), r
        assert f"H {r['token_entropy'][at]:.3f}" in n["text"]
    assert page.get_by_text("the group as a table").count() == 8  # the table kept, folded


def test_a_speculative_runs_reused_prefixes_are_shaded(shaped_runs, page):
    _, _, run_id, rows = shaped_runs
    open_rollouts(page, run_id, "speculative")
    assert page.locator("[data-tree-node]").count() == 0
    stored = rows[run_id].to_dicts()
    want = sorted((r["reused_tokens"], r["response"][:r["reused_tokens"]]) for r in stored if r["reused_tokens"])
    assert len(want) >= 16  # most rows reuse a prefix of their draft
    assert sorted((k, text) for k, text in page.evaluate(BANDS)) == want
    rejected = sum(1 for r in stored if r["draft_rejected_at"] is not None)
    assert 0 < rejected == page.locator("[data-draft-rejected]").count()
    assert page.get_by_text("blue band = prefix reused from the draft").count() == 1
