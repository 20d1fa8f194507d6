"""ARPO's tree of turns and GRPO-RoC's dropped episodes (app/episode_view.py) on a hand-made group: a branch is
drawn under its parent from the turn after its branch point, the shared turns once, its decision in its mark;
RoC's dropped episodes come apart with their penalty and reason; every text escaped."""

from __future__ import annotations

import re

from app import episode_view
from workbench.episodes import Episode, ToolCall, Turn


def _episode(answer: str, result: str = "1776") -> Episode:
    return Episode([
        Turn("user", "37*48=", token_ids=[1, 2, 3]),
        Turn("assistant", "<calc>37*48</calc>", token_ids=[7, 8, 9], entropy=[0.1, 0.9, 0.2], finish_reason="tool_call",
             tool_calls=[ToolCall("calculator", "37*48", result, seconds=0.004)]),
        Turn("tool", result, token_ids=[10, 11]),
        Turn("assistant", answer, token_ids=[12], entropy=[0.3], finish_reason="stop"),
    ])


def _row(idx: int, parent: int | None = None, at: int | None = None, kept: bool | None = None, **more) -> dict:
    row = dict(step=1, stage=0, prompt_id="p<0>", idx=idx, reward=1.0, verdict="correct", advantage=0.5, turns=4,
               tool_calls=1, tool_errors=0, parent_idx=parent, branch_at=at, finish_reason="stop",
               branch_entropy_before=None if parent is None else 0.25,
               branch_entropy_after=None if parent is None else 0.125,
               branch_draw=None if parent is None else 0.375, filter_kept=kept,
               filter_penalty=None if kept is None else 0.0, filter_reason=None if kept is None else "correct_low_penalty")
    return {**row, **more}


def test_the_branch_turn_is_the_turn_after_a_whole_tool_result():
    ep = _episode("1776")
    assert episode_view.branch_turn(ep, 5) == 3  # 3 assistant + 2 tool tokens: the last turn follows
    assert episode_view.branch_turn(ep, 3) == 2  # after the call's turn
    assert episode_view.branch_turn(ep, 4) is None  # inside the tool result: no turn ends there
    assert episode_view.branch_turn(ep, None) is None and episode_view.branch_turn(ep, 0) is None


def test_an_arpo_group_is_a_tree_of_turns_with_its_branch_points_marked():
    rows = [_row(0), _row(1), _row(2, parent=0, at=5, answer="x"), _row(3, parent=2, at=5)]
    eps = {0: _episode("1776"), 1: _episode("12"), 2: _episode("<b>17</b>"), 3: _episode("1776")}
    out = episode_view.episode_tree_html(rows, eps)
    nodes = re.findall(r'data-episode-node="(\d+)" data-depth="(\d+)"', out)
    assert nodes == [("0", "0"), ("2", "1"), ("3", "2"), ("1", "0")]  # 2 under 0, 3 under 2, 1 a root
    assert out.count("data-branch-at=") == 2 and 'data-entropy-before="0.250"' in out
    assert 'data-entropy-after="0.125"' in out and 'data-draw="0.375"' in out and "after turn 2" in out
    assert out.count('data-shared-turns="3"') == 2  # the prompt, the call and its result: drawn once, in #0
    assert out.count(">user<") == 2  # the roots' prompts only
    assert "<b>17</b>" not in out and "&lt;b&gt;17&lt;/b&gt;" in out
    assert 'data-roc=' not in out  # no RoC in this run: no kept / dropped badge


def test_a_branch_whose_point_ends_no_turn_is_drawn_whole():
    rows = [_row(0), _row(1, parent=0, at=4)]
    out = episode_view.episode_tree_html(rows, {0: _episode("1"), 1: _episode("2")})
    assert "drawn whole" in out and "data-shared-turns" not in out and out.count(">user<") == 2


def test_a_branch_whose_parent_is_not_shown_is_a_root_drawn_whole_and_says_so():
    out = episode_view.episode_tree_html([_row(0), _row(3, parent=1, at=5)], {0: _episode("1"), 3: _episode("2")})
    assert re.findall(r'data-episode-node="(\d+)" data-depth="(\d+)"', out) == [("0", "0"), ("3", "0")]
    assert "branched from #1 at t5, not shown" in out and "data-shared-turns" not in out and out.count(">user<") == 2


def test_rocs_dropped_episodes_come_apart_with_penalty_and_reason():
    rows = [_row(0, kept=True), _row(1, kept=False, filter_penalty=1.5, filter_reason="wrong_not_sampled",
                                       finish_reason="turns"), _row(2, kept=True)]
    assert [r["idx"] for r in episode_view.dropped_rows(rows)] == [1]
    out = episode_view.dropped_html(rows, {1: _episode("12")})
    assert re.findall(r'data-dropped-idx="(\d+)" data-penalty="([\d.]+)" data-reason="(\w+)"', out) == [
        ("1", "1.500", "wrong_not_sampled")]
    assert "1 of 3 episodes dropped" in out and "<details>" in out and "finish turns" in out
    assert episode_view.dropped_html([_row(0, kept=True)], {}) == ""
    assert episode_view.dropped_html([_row(0)], {}) == ""  # a run without RoC drops nothing
    tree = episode_view.episode_tree_html(rows, {})
    assert 'data-roc="dropped"' in tree and tree.count('data-roc="kept"') == 2
