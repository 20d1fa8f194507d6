"""GRPO-RoC's rule (`workbench.rollout.roc`) against hand-computed cases: the penalty, how many of each side
a group keeps (rStar's rounding and minimums), which correct episodes (lowest penalty, ties in generation
order) and that the wrong ones are a uniform sample."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.episodes import Episode, ToolCall, Turn
from workbench.errors import WorkbenchError
from workbench.rollout.roc import REASONS, penalty, select, side_counts


def _episode(*errors: str | None) -> Episode:
    turns = [Turn("user", "2*3=", token_ids=[1])]
    for e in errors:
        turns.append(Turn("assistant", "<calc>2*3</calc>", token_ids=[2],
                          tool_calls=[ToolCall("calculator", "2*3", "6" if e is None else "error", error=e)]))
        turns.append(Turn("tool", "6", token_ids=[3]))
    turns.append(Turn("assistant", "6", token_ids=[4]))
    return Episode(turns)


@pytest.mark.parametrize("errors, finish, want", [
    ((), "stop", 0.5),                       # no call: rStar's 0.5
    ((None, "timeout"), "stop", 0.5),        # one of two calls failed
    ((None,), "turns", 1.0),                 # clean calls, cut by the turn limit: format penalty 1
    ((None, None, None), "stop", 0.0),
    (("malformed",), "model_tokens", 2.0),
])
def test_penalty_is_error_ratio_plus_format(errors, finish, want):
    assert penalty(_episode(*errors), finish) == want


@pytest.mark.parametrize("n_correct, n_wrong, keep, want", [
    (11, 5, 8, (6, 2)),   # round(5.5) = 6, round(2.5) = 2 (Python's round, as rStar's)
    (15, 1, 8, (7, 1)),   # wrong round(0.5) = 0 -> raised to min(2, 1) = 1; correct takes the rest
    (1, 15, 8, (1, 7)),
    (0, 16, 8, (0, 8)),
    (16, 0, 8, (8, 0)),
    (8, 8, 8, (4, 4)),
    (3, 13, 8, (2, 6)),   # correct round(1.5) = 2
    (2, 14, 8, (2, 6)),   # correct round(1.0) = 1 -> raised to the minimum 2
    (5, 3, 8, (5, 3)),    # the group is already the size granted
    (2, 1, 3, (2, 1)),
    (3, 3, 2, (1, 1)),    # minimums 2 + 2 do not fit keep = 2: they share it, 1 + 1
])
def test_side_counts_hand_computed(n_correct, n_wrong, keep, want):
    right, wrong = side_counts(n_correct, n_wrong, keep)
    assert (right, wrong) == want
    assert right + wrong == min(keep, n_correct + n_wrong)


def test_side_counts_odd_keep_with_two_halves_and_a_group_too_small():
    # 3 + 3 -> keep 3: both round(1.5) = 2, the wrong side takes the rest (1), then its minimum 2 holds
    assert side_counts(3, 3, 3) == (1, 2)
    with pytest.raises(WorkbenchError, match="cannot keep 9 of 8"):
        side_counts(4, 4, 9)


def test_select_keeps_the_lowest_penalty_correct_in_generation_order_and_says_why():
    correct = [True, True, True, False, False, False, True, False]
    pen = [1.0, 0.0, 0.5, 0.0, 2.0, 0.5, 0.5, 1.0]
    sel = select(correct, pen, 4, np.random.default_rng(0))
    assert (sel.correct_kept, sel.wrong_kept) == (2, 2)  # 4 of 8 correct -> 2; 4 of 8 wrong -> 2
    assert np.flatnonzero(sel.kept & np.asarray(correct)).tolist() == [1, 2]  # 0.0, then 0.5 (index 2 before 6)
    assert int(sel.kept.sum()) == 4
    for i, why in enumerate(sel.reasons):
        assert why in REASONS
        assert why == ("correct_low_penalty" if correct[i] and sel.kept[i] else "correct_high_penalty" if correct[i]
                       else "wrong_sampled" if sel.kept[i] else "wrong_not_sampled")
    whole = select(correct, pen, 8, np.random.default_rng(0))
    assert whole.kept.all() and set(whole.reasons) == {"whole_group"}


def test_select_draws_the_wrong_episodes_uniformly():
    """Each of 4 wrong episodes, 2 kept a draw: kept with probability 1/2, whatever its penalty or place
    (rStar's code would keep the first two every time). 4,000 draws: 5 standard deviations is 0.04."""
    correct = [True] * 4 + [False] * 4
    pen = [0.0] * 4 + [0.0, 5.0, 1.0, 0.5]
    counts = np.zeros(8)
    rng = np.random.default_rng(7)
    draws = 4000
    for _ in range(draws):
        counts += select(correct, pen, 4, rng).kept
    assert counts[:4].tolist() == [draws, draws, 0, 0]  # correct: penalty 0 all, generation order decides
    assert np.all(np.abs(counts[4:] / draws - 0.5) < 0.04), counts
