"""The Rollouts page's drawing of rollout shapes (app/shape_view.py), on hand-made groups: a tree built
from `parent_idx` / `branch_at`, its branch marks, the shared prefix drawn once, and a speculative
rollout's reused prefix shaded apart from fresh tokens."""

import re

import numpy as np
import polars as pl

from app import rollout_view, shape_view
from workbench.engine.steplog import _parent_as_idx


def _row(idx, response, parent=None, at=None, reward=0.0, shape="tree"):
    return {"idx": idx, "response": response, "token_ids": None, "token_entropy": [0.1 * (i + 1) for i in
            range(len(response))], "length": len(response), "parent_idx": parent, "branch_at": at,
            "reward": reward, "verdict": "correct" if reward else "wrong", "advantage": reward - 0.5, "shape": shape}


# A hand-made group of 5: root #0 "12=" with branches #1 (at 1: "13=") and #3 (at 2: "12+"); #2 a branch
# of #1 (at 2: "13!"); #4 a plain row.
GROUP = [_row(0, "12=", reward=1.0), _row(1, "13=", 0, 1), _row(2, "13!", 1, 2, reward=1.0), _row(3, "12+", 0, 2),
         _row(4, "99=")]


def test_the_forest_hangs_each_branch_under_its_parent_in_idx_order():
    roots = shape_view.rollout_forest(list(reversed(GROUP)))  # the rows' order does not matter for the links
    assert [r.row["idx"] for r in roots] == [4, 0]
    root = roots[1]
    assert [c.row["idx"] for c in root.children] == [1, 3]
    assert [c.row["idx"] for c in root.children[0].children] == [2]
    assert root.children[0].children[0].parent["idx"] == 1 and root.parent is None
    assert roots[0].children == [] and roots[0].missing_parent is None


def test_a_branch_whose_parent_is_not_shown_is_a_root_that_says_so():
    roots = shape_view.rollout_forest([GROUP[0], GROUP[2], GROUP[4]])  # #1, #2's parent, filtered out
    assert [(r.row["idx"], r.missing_parent) for r in roots] == [(0, None), (2, 1), (4, None)]
    bad = dict(GROUP[1], parent_idx=1)  # names itself: drawn as a root, not a cycle
    assert [r.row["idx"] for r in shape_view.rollout_forest([GROUP[0], bad])] == [0, 1]


def test_branch_marks_give_the_token_its_entropy_and_the_parents_token():
    root = shape_view.rollout_forest(GROUP)[0]
    child = root.children[0]
    mark = shape_view.branch_mark(child, list("13="), list("12="))
    assert mark == shape_view.BranchMark(at=1, token="3", entropy=child.row["token_entropy"][1], parent_token="2")
    assert shape_view.branch_mark(root, list("12="), None) is None


def test_tree_html_draws_the_shared_prefix_once_and_marks_every_branch():
    out = shape_view.tree_html(GROUP, lambda r: list(r["response"]),
                               lambda r, start: rollout_view.token_html(list(r["response"])[start:],
                                                                  r["token_entropy"][start:]))
    nodes = re.findall(r'data-tree-node="(\d+)" data-depth="(\d+)"', out)
    assert nodes == [("0", "0"), ("1", "1"), ("2", "2"), ("3", "1"), ("4", "0")]  # nested, depth-first
    marks = re.findall(r'data-branch-at="(\d+)" data-branch-token="([^"]*)" data-branch-entropy="([^"]*)"', out)
    assert marks == [("1", "3", "0.200"), ("2", "!", "0.300"), ("2", "+", "0.300")]
    assert re.findall(r'data-shared="(\d+)"', out) == ["1", "2", "2"]
    assert "#0 took “2”" in out and "#1 took “=”" in out
    # each row's own tokens only: #1 draws "3=" (its "1" is #0's), #2 draws "!"
    own = re.findall(r'H=([0-9.]+)"', out)
    assert own == ["0.100", "0.200", "0.300", "0.200", "0.300", "0.300", "0.300", "0.100", "0.200", "0.300"]
    assert shape_view.is_tree_group(GROUP) and not shape_view.is_tree_group([GROUP[0], GROUP[4]])


def test_tree_html_escapes_what_it_shows():
    rows = [_row(0, "<b>"), dict(_row(1, "<i>", 0, 1), verdict="<script>")]
    out = shape_view.tree_html(rows, lambda r: list(r["response"]),
                               lambda r, start: rollout_view.token_html(list(r["response"])[start:], None))
    assert "<script>" not in out and "<b>" not in out and "<i>" not in out
    assert 'data-branch-token="i"' in out


def test_a_reused_prefix_is_shaded_and_the_rejection_marked():
    spec = {"shape": "speculative", "reused_tokens": 2, "draft_rejected_at": 2, "draft_tokens": 3}
    assert shape_view.reused_split(spec) == (2, 2, 3, False)
    assert shape_view.reused_split(dict(spec, draft_mode="exact")) == (2, 2, 3, False)
    assert shape_view.reused_split({"shape": "tree", "reused_tokens": 2}) == (0, None, None, False)
    assert shape_view.reused_split({"shape": "speculative", "reused_tokens": None, "draft_rejected_at": None,
                                    "draft_tokens": None}) == (0, None, None, False)  # a row with no draft
    out = rollout_view.token_html(list("abcd"), [0.1] * 4, reused=(2, 2, 3))
    assert "draft: 2 of 3 tokens reused, rejected at t2" in out
    band = re.search(r'<span data-reused="2"[^>]*>(.*?)</span></span>(.*)</div>', out)
    assert band and re.findall(r">(\w)</span>", band.group(1) + "</span>") == ["a", "b"]
    assert 'data-draft-rejected="2"' in band.group(2) and "c" in band.group(2) and "d" in band.group(2)
    whole = rollout_view.token_html(list("ab"), [0.1] * 2, reused=(2, None, 2))  # a draft kept whole: no rejection mark
    assert 'data-reused="2"' in whole and "data-draft-rejected" not in whole and "kept whole" in whole
    first = rollout_view.token_html(list("ab"), [0.1] * 2, reused=(0, 0, 2))  # rejected at once: no band, the mark
    assert "data-reused" not in first and 'data-draft-rejected="0"' in first
    assert "data-reused" not in rollout_view.token_html(list("ab"), [0.1] * 2)


def test_group_html_shades_a_speculative_rows_prefix_only_when_tokens_line_up():
    row = {"idx": 0, "response": "abc", "token_ids": [5, 6, 7], "token_entropy": [0.1] * 3, "length": 3,
           "shape": "speculative", "reused_tokens": 1, "draft_rejected_at": 1, "draft_tokens": 2}
    assert 'data-reused="1"' in rollout_view.group_html([row])
    assert "data-reused" not in rollout_view.group_html([dict(row, length=5)])  # one piece for the whole text


def test_lenient_rows_are_drawn_as_not_the_current_policys_samples():
    """A row whose draft was verified leniently gets the lenient band and says it is not a sample of the
    current policy, in its note and in the page's legend; an exact row says neither."""
    from app.components import shapes_legend

    row = {"idx": 0, "response": "abc", "token_ids": [5, 6, 7], "token_entropy": [0.1] * 3, "length": 3,
           "shape": "speculative", "reused_tokens": 2, "draft_rejected_at": 2, "draft_tokens": 3,
           "draft_mode": "lenient"}
    lenient, exact = rollout_view.group_html([row]), rollout_view.group_html([dict(row, draft_mode="exact")])
    assert shape_view.LENIENT_STYLE in lenient and shape_view.REUSED_STYLE not in lenient
    assert 'data-draft-mode="lenient"' in lenient and "not a sample of the current policy" in lenient
    assert shape_view.REUSED_STYLE in exact and "lenient" not in exact and 'data-draft-mode="exact"' in exact
    first = rollout_view.group_html([dict(row, reused_tokens=0, draft_rejected_at=0)])  # rejected at once: still said
    assert 'data-draft-mode="lenient"' in first and "not a sample of the current policy" in first
    frame = pl.DataFrame([row, dict(row, idx=1, draft_mode=None)])
    assert "not samples of the current policy" in shapes_legend(frame)
    assert "lenient" not in shapes_legend(frame.with_columns(pl.lit("exact").alias("draft_mode")))
    assert "lenient" not in shapes_legend(frame.drop("draft_mode"))  # a store from before the column


def test_a_branchs_parent_is_stored_as_the_parents_idx_across_stages():
    # a prompt with 2 rows in stage 0 and 3 in stage 1 (idx 2-4), another prompt between them in the batch
    prompt = np.array([0, 0, 1, 0, 0, 0])
    stage = np.array([0, 0, 0, 1, 1, 1])
    idx = np.array([0, 1, 0, 2, 3, 4])
    parent = np.array([-1, 0, -1, -1, 0, 1])  # slots of the stage's group
    assert _parent_as_idx(parent, idx, prompt, stage).tolist() == [-1, 0, -1, -1, 2, 3]
