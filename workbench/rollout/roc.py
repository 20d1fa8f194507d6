"""GRPO-RoC (Resample-on-Correct, rStar2-Agent, arXiv 2508.20722): oversample a prompt's episodes, keep a
group of the size the allocator granted, the correct ones with the fewest tool errors and format problems.

The rule, as `rstar2_agent/down_sample/roc.py` (microsoft/rStar) writes it, and where this departs:

1. Each episode gets a penalty: the share of its tool results that are errors (0.5 when it made no tool
   call), plus a format penalty. rStar finds errors by the word "error" in a `<tool_response>`; here an
   error is a tool call whose `error` is set (the sandbox's verdict, `workbench.tools`). rStar's format
   penalty is 1 when the `<answer>` tags are missing or unbalanced, else min((answers - 1) / turns, 1);
   the organism's task has no answer tags, so here it is 1 when the episode did not end cleanly (finish
   reason other than "stop": a turn, call or token limit cut it) and 0 otherwise (one answer per episode).
2. A group of L episodes is cut to `keep`: the wrong side (reward <= 0, here: the verifier's verdict is
   not correct) keeps round(|wrong| * keep / L), the correct side round(|correct| * keep / L) (Python's
   round, as rStar's); a side below its minimum (`min_wrong`, `min_correct`: 2 and 2) is raised to
   min(minimum, its size) and the other side takes the rest. When rounding leaves the sum off `keep`
   (both halves exactly .5 with an odd `keep`: rStar asserts there), the wrong side takes the rest; the
   minimums share `keep` when they do not fit in it (rStar asserts min_wrong + min_correct <= keep).
3. Correct episodes: the lowest penalties are kept (a stable sort, ties in generation order, as rStar's
   code; the paper samples with weights favouring low penalties). Wrong episodes: a uniform sample
   without replacement (the paper's rule; rStar's code keeps the first ones in generation order).
4. rStar keeps all L when both sides fall below their minimums; with the minimums fitted to `keep` that
   cannot happen here. rStar drops every episode of a group smaller than `keep`; here a group never is.

`select` returns, per episode, whether it is kept and why (`REASONS`), so every decision is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from workbench.errors import WorkbenchError
from workbench.store.schema import FILTER_REASONS

REASONS = FILTER_REASONS
"""Why an episode was kept or dropped (the rollouts' `filter_reason`): the group was already the size
granted; a correct episode within / past the lowest penalties kept; a wrong one drawn / not drawn."""

NO_CALL_PENALTY = 0.5
"""rStar's error ratio of an episode that made no tool call."""


def penalty(episode: Any, finish_reason: str) -> float:
    """An episode's RoC penalty: tool error ratio (NO_CALL_PENALTY without a call) + format penalty
    (1 unless it ended with "stop"); module docstring, point 1."""
    calls = list(getattr(episode, "tool_calls", []) or [])
    errors = NO_CALL_PENALTY if not calls else sum(c.error is not None for c in calls) / len(calls)
    return float(errors + (0.0 if finish_reason == "stop" else 1.0))


@dataclass
class Selection:
    """One group's RoC decision."""

    kept: np.ndarray
    """[L] bool."""
    reasons: list[str]
    """[L] one of `REASONS`."""
    correct_kept: int
    wrong_kept: int


def side_counts(n_correct: int, n_wrong: int, keep: int, min_correct: int = 2, min_wrong: int = 2) -> tuple[int, int]:
    """How many correct and wrong episodes a group of n_correct + n_wrong keeps (module docstring, point 2)."""
    total = n_correct + n_wrong
    if keep > total:
        raise WorkbenchError(f"roc: cannot keep {keep} of {total} episodes")
    if keep == total:
        return n_correct, n_wrong
    if min_wrong + min_correct > keep:  # rStar asserts; here the minimums share keep (the wrong side the odd one)
        min_wrong = min(min_wrong, (keep + 1) // 2)
        min_correct = min(min_correct, keep - min_wrong)
    wrong = round(n_wrong * keep / total)
    right = round(n_correct * keep / total)
    if wrong + right != keep:
        wrong = keep - right
    if wrong <= min(min_wrong, n_wrong):
        wrong = min(min_wrong, n_wrong)
        right = keep - wrong
    if right <= min(min_correct, n_correct):
        right = min(min_correct, n_correct)
        wrong = keep - right
    right = min(right, n_correct)  # a side never keeps more than it has; the other takes the rest
    wrong = keep - right
    if wrong > n_wrong:
        wrong = n_wrong
        right = keep - wrong
    return right, wrong


def select(correct: Sequence[bool], penalties: Sequence[float], keep: int, rng: np.random.Generator, *,
           min_correct: int = 2, min_wrong: int = 2) -> Selection:
    """Which of a group's episodes (in generation order) RoC keeps, and why."""
    ok = np.asarray(correct, dtype=bool)
    pen = np.asarray(penalties, dtype=np.float64)
    if len(ok) != len(pen):
        raise WorkbenchError(f"roc: {len(ok)} verdicts for {len(pen)} penalties")
    n = len(ok)
    if keep >= n:
        return Selection(np.ones(n, dtype=bool), ["whole_group"] * n, int(ok.sum()), int((~ok).sum()))
    n_right, n_wrong = side_counts(int(ok.sum()), int((~ok).sum()), keep, min_correct, min_wrong)
    kept = np.zeros(n, dtype=bool)
    reasons = [""] * n
    right_idx = np.flatnonzero(ok)
    order = right_idx[np.argsort(pen[right_idx], kind="stable")]
    kept[order[:n_right]] = True
    for i in right_idx:
        reasons[i] = "correct_low_penalty" if kept[i] else "correct_high_penalty"
    wrong_idx = np.flatnonzero(~ok)
    if n_wrong:
        kept[rng.choice(wrong_idx, size=n_wrong, replace=False)] = True
    for i in wrong_idx:
        reasons[i] = "wrong_sampled" if kept[i] else "wrong_not_sampled"
    return Selection(kept, reasons, n_right, n_wrong)
