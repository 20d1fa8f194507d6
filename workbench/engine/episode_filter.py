"""GRPO-RoC in the producer (`rollout.episodes.roc_oversample` > 1; docs/episode-allocation.md).

An allocator grants a prompt n episodes; the stage samples `oversample` x n of them (one group, one
stream, seeded from (run seed, step, stage, prompt) as any group), scores them, and `roc_filter` keeps n
by `workbench.rollout.roc.select`. Every sampled row stays in the step's `Rollouts` (and in the store)
with `kept`, its penalty and the reason; a dropped row is never trained on (the update's rows are the
kept ones), never enters the group the allocator and the per-prompt statistics see, and its model tokens
count against a token budget (they were generated). With `roc_oversample = 1` none of this runs.

`shared_model_tokens` is the other budget fact of allocation inside episodes: an ARPO branch's prefix was
sampled once, by its parent, and a token budget counts it once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from workbench.engine.steplog import Rollouts
from workbench.rollout.roc import penalty, select
from workbench.rollout.shapes.arpo import hard_advantages

ROC_STREAM = 0x70C
"""Mixed into a group's seed for RoC's uniform draw of wrong episodes (apart from the sampling streams)."""


def oversample(rows: list[int], seeds: list[int], factor: int) -> tuple[list[int], list[int]]:
    """Each row `factor` times (a prompt's rows stay consecutive, with its group's seed)."""
    return [r for r in rows for _ in range(factor)], [x for x in seeds for _ in range(factor)]


def granted(rows: list[int]) -> dict[int, int]:
    """Rows granted per prompt index (what the filter keeps)."""
    return dict(Counter(int(r) for r in rows))


def roc_filter(r: Rollouts, keep: dict[int, int], seeds: list[int], cfg: Any) -> dict[str, float]:
    """Mark which of the stage's rows RoC keeps (`r.kept`, `r.filter_penalty`, `r.filter_reason`, in
    place); return the stage's `episodes/roc_...` figures."""
    finish = r.finish_reasons or r.default_finish()
    episodes = r.episodes or [None] * r.n
    pen = np.asarray([penalty(ep, f) for ep, f in zip(episodes, finish)], dtype=np.float64)
    ok = r.correct_mask()
    kept = np.zeros(r.n, dtype=bool)
    reasons: list[str | None] = [None] * r.n
    prompts = np.asarray(r.prompt)
    for p, n in keep.items():
        idx = np.flatnonzero(prompts == p)
        rng = np.random.default_rng([int(seeds[idx[0]]) % (1 << 63), ROC_STREAM])
        sel = select(ok[idx], pen[idx], n, rng, min_correct=cfg.roc_min_correct, min_wrong=cfg.roc_min_wrong)
        kept[idx] = sel.kept
        for j, why in zip(idx, sel.reasons):
            reasons[j] = why
    r.kept, r.filter_penalty, r.filter_reason = kept, pen.astype(np.float32), reasons
    return roc_metrics(r, kept, ok)


def roc_metrics(r: Rollouts, kept: np.ndarray, ok: np.ndarray) -> dict[str, float]:
    tokens = r.model_tokens().cpu().numpy()
    out = {"episodes/roc_sampled": float(r.n), "episodes/roc_dropped": float((~kept).sum()),
           "episodes/roc_dropped_model_tokens": float(tokens[~kept].sum())}
    for name, rows in (("kept_correct", kept & ok), ("sampled_correct", ok)):
        calls, errors = tool_counts(r, rows)
        out[f"episodes/roc_{name}_calls"] = float(calls)
        out[f"episodes/roc_{name}_errors"] = float(errors)
    return out


def tool_counts(r: Rollouts, rows: np.ndarray) -> tuple[int, int]:
    """Tool calls and failed calls over the rows `rows` ([N] bool) of `r`."""
    calls = errors = 0
    for i in np.flatnonzero(rows):
        ep = (r.episodes or [None] * r.n)[i]
        for c in getattr(ep, "tool_calls", []) or []:
            calls += 1
            errors += c.error is not None
    return calls, errors


def group_notes(r: Rollouts) -> dict[int, str]:
    """Per prompt index of a filtered stage: its RoC decision in words (for the allocation's reason)."""
    if r.kept is None or r.filter_reason is None:
        return {}
    out: dict[int, str] = {}
    prompts = np.asarray(r.prompt)
    for p in dict.fromkeys(prompts.tolist()):
        why = Counter(r.filter_reason[i] for i in np.flatnonzero(prompts == p))
        n_c = why["correct_low_penalty"] + why["correct_high_penalty"]
        n_w = why["wrong_sampled"] + why["wrong_not_sampled"]
        out[int(p)] = (f"roc: kept {why['correct_low_penalty']} of {n_c} correct (lowest penalty), "
                       f"{why['wrong_sampled']} of {n_w} wrong (uniform)" if not why["whole_group"]
                       else f"roc: whole group of {why['whole_group']}")
    return out


def shared_model_tokens(r: Rollouts) -> int:
    """Model tokens the rows of `r` hold twice: an ARPO branch's sampled tokens before its branch point
    (its parent sampled them; the budget counts them once)."""
    if r.shape is None or r.loss_mask is None:
        return 0
    at = np.asarray(r.shape["branch_at"], dtype=np.int64)
    mask = r.train_mask()
    return int(sum(int(mask[i, :at[i]].sum()) for i in np.flatnonzero(at > 0)))


def trained_advantages(r: Rollouts, adv: np.ndarray, attribution: str) -> np.ndarray:
    """The advantages the update trains `r` with: `adv` [N] as they are ("soft", ARPO's code), or, with
    `attribution = "hard"` and branches in `r`, [N, T] per token, each shared prefix token the mean advantage of
    the rows sharing it (`workbench.rollout.shapes.arpo.hard_advantages`)."""
    if attribution != "hard" or r.shape is None:
        return adv
    slot = np.asarray(r.shape["parent_idx"], dtype=np.int64)  # the parent's slot in its (prompt, stage) group
    if not (slot >= 0).any():
        return adv
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(np.asarray(r.prompt).tolist(), np.asarray(r.stage).tolist())):
        first.setdefault(key, i)
    parent = np.asarray([first[(int(r.prompt[i]), int(r.stage[i]))] + int(slot[i]) if slot[i] >= 0 else -1
                         for i in range(r.n)], dtype=np.int64)
    return hard_advantages(parent, np.asarray(r.shape["branch_at"], dtype=np.int64), adv, int(r.tokens.shape[1]))
