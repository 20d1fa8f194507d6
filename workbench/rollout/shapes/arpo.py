"""ARPO's entropy-guided branching of episodes (arXiv 2507.19849; `dongguanting/ARPO`,
`verl_arpo_entropy/.../vllm_rollout_with_tools.py`), for the episodes shape (`rollout.episodes.arpo_branch`;
docs/episode-allocation.md).

A prompt granted n episodes (its rows share one seed: one group):
1. m = max(1, ceil(n x `arpo_initial`)) episodes are sampled whole, the other n - m are the group's branch slots;
2. `decode_episodes` branches a row after each tool result by ARPO's rule (`Branching`), while slots are left:
   the branch is a copy of the row's cache and turns, diverging at the first token after the result;
3. slots still left when every episode has ended (the shortfall) are filled with whole episodes, sampled from a
   stream of their own (the group's seed mixed with `FILL_STREAM`).
The group's rows come back in its slots: whole episodes first, then branches in the order they were made, then
the fill; a branch's parent is a slot of the same group (`parent_idx`), `branch_at` the response position.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from workbench.rollout.episode_decode import Branching, EpisodeBatch

FILL_STREAM = 0xF111
"""Mixed into a group's seed for the whole episodes that fill a shortfall."""


def plan(seeds: Sequence[int], initial: float) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each group's input positions (by seed, in order) and how many of them are sampled whole first."""
    groups: dict[int, list[int]] = {}
    for i, seed in enumerate(seeds):
        groups.setdefault(int(seed), []).append(i)
    return groups, {seed: max(1, math.ceil(len(pos) * initial)) for seed, pos in groups.items()}


def arpo_episodes(run: Any, prompts: Sequence[Sequence[int]], seeds: Sequence[int], cfg: Any,
                  vocab: int) -> tuple[EpisodeBatch, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    """Grow the groups of `prompts` by ARPO's branching (module docstring). `run(prompts, seeds, branching)`
    runs `decode_episodes`. Returns the batch in the input's row order, each row's parent slot in its group
    (-1: none), its branch position (-1: none), the decision columns and the figures."""
    groups, whole = plan(seeds, cfg.arpo_initial)
    first = [i for seed, pos in groups.items() for i in pos[:whole[seed]]]
    branching = Branching(slots={seed: len(pos) - whole[seed] for seed, pos in groups.items()},
                          window=cfg.arpo_window, alpha=cfg.arpo_alpha, threshold=cfg.arpo_threshold, vocab=vocab)
    eb = run([prompts[i] for i in first], [int(seeds[i]) for i in first], branching)
    grown: dict[int, list[int]] = {}
    for row, seed in enumerate(int(seeds[i]) for i in first):
        grown.setdefault(seed, []).append(row)
    for row in range(len(first), len(eb.turns)):  # branches, in the order made
        grown[_seed_of(eb, row, first, seeds)].append(row)
    fill = [(seed, pos[0]) for seed, pos in groups.items() for _ in range(len(pos) - len(grown[seed]))]
    filled = run([prompts[i] for _, i in fill], [hash((s, FILL_STREAM)) & (2**62 - 1) for s, _ in fill], None) \
        if fill else None
    n = len(prompts)
    turns: list = [None] * n
    finish: list = [None] * n
    parent = np.full(n, -1, dtype=np.int64)
    at = np.full(n, -1, dtype=np.int64)
    cols = {k: np.full(n, np.nan) for k in ("branch_entropy_before", "branch_entropy_after", "branch_draw")}
    fill_rows = {seed: [k for k, (s, _) in enumerate(fill) if s == seed] for seed in groups}
    for seed, pos in groups.items():
        slot_of = {row: k for k, row in enumerate(grown[seed])}
        for k, row in enumerate(grown[seed]):
            out = pos[k]
            turns[out], finish[out] = eb.turns[row], eb.finish_reasons[row]
            if eb.parents and eb.parents[row] >= 0:
                parent[out], at[out] = slot_of[eb.parents[row]], eb.branch_at[row]
                d = eb.decisions[row]
                cols["branch_entropy_before"][out], cols["branch_entropy_after"][out], cols["branch_draw"][out] = d
        for k, f in enumerate(fill_rows[seed]):
            out = pos[len(grown[seed]) + k]
            turns[out], finish[out] = filled.turns[f], filled.finish_reasons[f]
    out_batch = EpisodeBatch(turns=turns, finish_reasons=finish,
                             gen_time_s=eb.gen_time_s + (filled.gen_time_s if filled else 0.0),
                             tool_time_s=eb.tool_time_s + (filled.tool_time_s if filled else 0.0))
    branches = int((parent >= 0).sum())
    metrics = {"episodes/arpo_draws": float(eb.draws), "episodes/arpo_branches": float(branches),
               "episodes/arpo_fill": float(len(fill))}
    return out_batch, parent, at, cols, metrics


def _seed_of(eb: EpisodeBatch, row: int, first: list[int], seeds: Sequence[int]) -> int:
    while eb.parents[row] >= 0:
        row = eb.parents[row]
    return int(seeds[first[row]])
