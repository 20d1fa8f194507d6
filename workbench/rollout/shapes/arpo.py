"""ARPO's entropy-guided branching of episodes (arXiv 2507.19849; `dongguanting/ARPO`,
`verl_arpo_entropy/.../vllm_rollout_with_tools.py`) and AEPO's rollout (arXiv 2510.14545), for the episodes
shape (`rollout.episodes.arpo_branch` / `aepo_branch`; docs/episode-allocation.md).

A prompt granted n episodes (its rows share one seed: one group):
1. m episodes are sampled whole, the other n - m are the group's branch slots. ARPO: m = max(1, ceil(n x
   `arpo_initial`)). AEPO (`aepo_split`): one probe episode is sampled whole first (from the group's seed mixed
   with `PROBE_STREAM`; it is the first of the m) and m = min(n, int(n x sigmoid(beta x (H_root - mean H_tool))) + 1)
   (`aepo_split_size`), H the probe's turn entropies as ARPO measures them (`window_entropy`);
2. `decode_episodes` branches a row after each tool result by ARPO's rule, or AEPO's with its consecutive-branch
   penalty (`Branching`), while slots are left: the branch is a copy of the row's cache and turns, diverging at
   the first token after the result;
3. slots still left when every episode has ended (the shortfall) are filled with whole episodes, sampled from a
   stream of their own (the group's seed mixed with `FILL_STREAM`).
The group's rows come back in its slots: the probe, the other whole episodes, then branches in the order they
were made, then the fill; a branch's parent is a slot of the same group (`parent_idx`), `branch_at` the response
position. `hard_advantages` is ARPO's "hard" credit of the shared prefixes (`arpo_advantage = "hard"`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from workbench.rollout.branching import Branching, window_entropy
from workbench.rollout.episode_decode import EpisodeBatch

FILL_STREAM = 0xF111
"""Mixed into a group's seed for the whole episodes that fill a shortfall."""
PROBE_STREAM = 0xAE90
"""Mixed into a group's seed for AEPO's probe episode."""
DECISION_COLUMNS = ("branch_entropy_before", "branch_entropy_after", "branch_draw", "branch_rounds", "branch_split",
                    "branch_split_dh")
"""The branching decision stored per row: the branch rule's entropies and draw (a branch), AEPO's consecutive
rounds c (a branch under AEPO's rule), AEPO's split m and its H_root - mean H_tool (on the group's probe row)."""


def plan(seeds: Sequence[int], initial: float) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each group's input positions (by seed, in order) and how many of them are sampled whole first."""
    groups: dict[int, list[int]] = {}
    for i, seed in enumerate(seeds):
        groups.setdefault(int(seed), []).append(i)
    return groups, {seed: max(1, math.ceil(len(pos) * initial)) for seed, pos in groups.items()}


def aepo_split_size(n: int, dh: float, beta: float) -> int:
    """AEPO's whole episodes of a group of n (its code): min(n, int(n * sigmoid(beta * dh)) + 1), dh = H_root -
    mean H_tool of the probe."""
    return min(n, int(n / (1.0 + math.exp(-beta * dh))) + 1)


def probe_dh(turns: Sequence[Any], window: int, vocab: int) -> float:
    """H_root - mean H_tool of an episode: its first assistant turn's entropy minus the mean over the assistant
    turns that follow a tool result (each `window_entropy`); 0 when it made no call or sampled nothing."""
    asked = [(k, t) for k, t in enumerate(turns) if t.role == "assistant" and t.tokens]
    after = [t for k, t in asked if k > 0 and turns[k - 1].role == "tool"]
    if not asked or not after:
        return 0.0
    root = window_entropy(asked[0][1].entropy, window, vocab)
    return root - float(np.mean([window_entropy(t.entropy, window, vocab) for t in after]))


def arpo_episodes(run: Any, prompts: Sequence[Sequence[int]], seeds: Sequence[int], cfg: Any,
                  vocab: int) -> tuple[EpisodeBatch, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, float]]:
    """Grow the groups of `prompts` by ARPO's (or AEPO's) branching (module docstring). `run(prompts, seeds,
    branching)` runs `decode_episodes`. Returns the batch in the input's row order, each row's parent slot in its
    group (-1: none), its branch position (-1: none), the decision columns and the figures."""
    groups, whole = plan(seeds, cfg.arpo_initial)
    aepo = bool(getattr(cfg, "aepo_branch", False))
    probe: EpisodeBatch | None = None
    dh: dict[int, float] = {}
    if aepo and cfg.aepo_split:  # one probe episode per group, then the split
        probe = run([prompts[pos[0]] for pos in groups.values()],
                    [hash((s, PROBE_STREAM)) & (2**62 - 1) for s in groups], None)
        for k, (seed, pos) in enumerate(groups.items()):
            dh[seed] = probe_dh(probe.turns[k], cfg.arpo_window, vocab)
            whole[seed] = aepo_split_size(len(pos), dh[seed], cfg.aepo_beta)
    lead = 1 if probe is not None else 0  # slots the probe takes at the head of each group
    first = [i for seed, pos in groups.items() for i in pos[:whole[seed] - lead]]
    branching = Branching(slots={seed: len(pos) - whole[seed] for seed, pos in groups.items()},
                          window=cfg.arpo_window, alpha=cfg.arpo_alpha, threshold=cfg.arpo_threshold, vocab=vocab,
                          penalty=cfg.aepo_penalty if aepo else None)
    eb = run([prompts[i] for i in first], [int(seeds[i]) for i in first], branching) if first else EpisodeBatch([], [], 0.0, 0.0)
    grown: dict[int, list[int]] = {seed: [] for seed in groups}
    for row, seed in enumerate(int(seeds[i]) for i in first):
        grown[seed].append(row)
    for row in range(len(first), len(eb.turns)):  # branches, in the order made
        grown[_seed_of(eb, row, first, seeds)].append(row)
    fill = [(seed, pos[0]) for seed, pos in groups.items() for _ in range(len(pos) - lead - len(grown[seed]))]
    filled = run([prompts[i] for _, i in fill], [hash((s, FILL_STREAM)) & (2**62 - 1) for s, _ in fill], None) \
        if fill else None
    n = len(prompts)
    turns: list = [None] * n
    finish: list = [None] * n
    parent = np.full(n, -1, dtype=np.int64)
    at = np.full(n, -1, dtype=np.int64)
    cols = {k: np.full(n, np.nan) for k in DECISION_COLUMNS}
    fill_rows = {seed: [k for k, (s, _) in enumerate(fill) if s == seed] for seed in groups}
    for g, (seed, pos) in enumerate(groups.items()):
        if probe is not None:
            turns[pos[0]], finish[pos[0]] = probe.turns[g], probe.finish_reasons[g]
            cols["branch_split"][pos[0]], cols["branch_split_dh"][pos[0]] = whole[seed], dh[seed]  # on the probe
        slot_of = {row: lead + k for k, row in enumerate(grown[seed])}
        for k, row in enumerate(grown[seed]):
            out = pos[lead + k]
            turns[out], finish[out] = eb.turns[row], eb.finish_reasons[row]
            if eb.parents and eb.parents[row] >= 0:
                parent[out], at[out] = slot_of[eb.parents[row]], eb.branch_at[row]
                for name, v in zip(DECISION_COLUMNS, eb.decisions[row]):
                    cols[name][out] = v
        for k, f in enumerate(fill_rows[seed]):
            out = pos[lead + len(grown[seed]) + k]
            turns[out], finish[out] = filled.turns[f], filled.finish_reasons[f]
    parts = [b for b in (probe, eb, filled) if b is not None]
    out_batch = EpisodeBatch(turns=turns, finish_reasons=finish, gen_time_s=sum(b.gen_time_s for b in parts),
                             tool_time_s=sum(b.tool_time_s for b in parts))
    branches = int((parent >= 0).sum())
    name = "aepo" if aepo else "arpo"
    metrics = {f"episodes/{name}_draws": float(eb.draws), f"episodes/{name}_branches": float(branches),
               f"episodes/{name}_fill": float(len(fill))}
    if probe is not None:
        metrics["episodes/aepo_whole"] = float(sum(whole.values()))
    return out_batch, parent, at, cols, metrics


def _seed_of(eb: EpisodeBatch, row: int, first: list[int], seeds: Sequence[int]) -> int:
    while eb.parents[row] >= 0:
        row = eb.parents[row]
    return int(seeds[first[row]])


def hard_advantages(parent: Sequence[int], branch_at: Sequence[int], advantage: Sequence[float],
                    width: int) -> np.ndarray:
    """ARPO's "hard" advantage, [N, width]: a response position a row shares with others (positions before a
    branch's `branch_at` are its parent's tokens, recursively) gets the mean advantage of the rows sharing it;
    a row's own tokens keep its advantage. `parent` are row indices of the same batch (-1: a root)."""
    adv = np.asarray(advantage, dtype=np.float64)
    n = len(adv)
    par = np.asarray(parent, dtype=np.int64)
    owner = np.repeat(np.arange(n)[:, None], width, axis=1)  # the row that sampled each position's token
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        j = i
        while par[j] >= 0:
            depth[i] += 1
            j = par[j]
    for i in np.argsort(depth, kind="stable"):  # parents resolved before their branches
        if par[i] >= 0:
            b = min(int(branch_at[i]), width)
            owner[i, :b] = owner[par[i], :b]
    key = owner * width + np.arange(width)[None, :]
    total = np.bincount(key.ravel(), weights=np.repeat(adv, width), minlength=n * width)
    count = np.bincount(key.ravel(), minlength=n * width)
    return total[key] / count[key]
