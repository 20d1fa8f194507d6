"""ARPO's and AEPO's branching inside `decode_episodes` (workbench/rollout/episode_decode.py): the rules
(`branches`, `aepo_branches`), the draws (`branch_draw`), and `BranchTree`, the state of one decoding call's
branches. A branch is a copy of a row's turns and cache row, diverging at the first token after a tool result;
see docs/episode-allocation.md for the rules, their constants and where they depart from the papers' code."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class Branching:
    """ARPO's branching (arXiv 2507.19849; `docs/episode-allocation.md`): after each tool result a row
    branches (a copy of its cache and turns, diverging at the first token after the result) when
    clip(u - alpha * dH, 0, 1) <= threshold, dH being the entropy of the turn that made the call minus the
    first turn's (each: the sum of the first `window` tokens' entropies over ln |V|), while its group has
    slots left."""

    slots: dict[int, int]
    """Branches each group (its rows' seed) may still grow."""
    window: int = 20
    alpha: float = 0.2
    threshold: float = 0.5
    vocab: int = 2
    penalty: float | None = None
    """AEPO's rule instead of ARPO's (`aepo_branches`), with this consecutive-branch penalty; None: ARPO's."""


BRANCH_STREAM = 0xA4B0
"""Mixed into a group's seed for the branch draws and for a branch's sampling stream."""


def window_entropy(entropy: Sequence[float], window: int, vocab: int) -> float:
    """ARPO's entropy of a turn: the sum of its first `window` tokens' entropies over ln |V|."""
    return float(sum(entropy[:window])) / math.log(max(vocab, 2))


def branches(u: float, before: float, after: float, alpha: float, threshold: float) -> bool:
    """ARPO's rule: branch when clip(u - alpha * (after - before), 0, 1) <= threshold."""
    return min(max(u - alpha * (after - before), 0.0), 1.0) <= threshold


def aepo_branches(u: float, before: float, after: float, alpha: float, threshold: float, penalty: float,
                  rounds: int) -> bool:
    """AEPO's rule: branch when (u + alpha * (after - before)) * (1 - penalty * rounds) >= threshold, `rounds` the
    group's consecutive branching rounds. The draw's sign is ARPO's mirrored (u + alpha dH >= threshold rather
    than u - alpha dH <= threshold: the same chance without the penalty, since u is uniform); unclipped, as AEPO's
    code."""
    return (u + alpha * (after - before)) * (1.0 - penalty * rounds) >= threshold


def branch_draw(seed: int, row: int, call: int) -> float:
    """The uniform of row `row`'s branch decision after its `call`-th tool result: fixed by (group seed,
    row, call), whatever order the results arrive in."""
    g = torch.Generator().manual_seed(hash((int(seed), BRANCH_STREAM, row, call)) & (2**63 - 1))
    return float(torch.rand(1, generator=g))


class BranchTree:
    """The branching state of one `decode_episodes` call (ARPO, AEPO)."""

    def __init__(self, cfg: Branching, seeds: list[int], loop: Any) -> None:
        self.cfg, self.seeds, self.loop = cfg, seeds, loop
        self.slots = dict(cfg.slots)
        n = len(seeds)
        self.parents, self.branch_at = [-1] * n, [-1] * n
        self.decisions: list[tuple[float, float, float, float] | None] = [None] * n
        self.points: list[int] = []
        self.draws = 0
        self.branched: dict[int, set[int]] = {}  # AEPO: each group's rounds (call numbers) that made a branch

    def branch(self) -> None:
        """Decide at each row that just read a tool result; copy the rows that branch."""
        from workbench.rollout.episode_decode import GEN  # the loop's module imports this one
        points, self.points = self.points, []
        new: list[int] = []
        cfg = self.cfg
        for r in points:
            seed = self.seeds[r]
            if self.slots.get(seed, 0) <= 0 or self.loop.state[r] != GEN:
                continue
            turns = self.loop.turns[r]
            asked = [t for t in turns if t.role == "assistant" and t.tokens]
            first = window_entropy(asked[0].entropy, cfg.window, cfg.vocab)
            last = window_entropy(asked[-1].entropy, cfg.window, cfg.vocab)
            call = self.loop.calls[r]
            u = branch_draw(seed, r, call)
            self.draws += 1
            c = self.consecutive(seed, call)
            if not (branches(u, first, last, cfg.alpha, cfg.threshold) if cfg.penalty is None else
                    aepo_branches(u, first, last, cfg.alpha, cfg.threshold, cfg.penalty, c)):
                continue
            self.slots[seed] -= 1
            self.branched.setdefault(seed, set()).add(call)
            new.append(self._copy(r, (first, last, u, float(c) if cfg.penalty is not None else math.nan)))
        if new:
            self.loop.grow([self.loop.rows.index(self.parents[c]) for c in new], new)

    def consecutive(self, seed: int, call: int) -> int:
        """AEPO's c for a decision after a row's `call`-th tool result: how many rounds right before it (calls
        call - 1, call - 2, ...) made a branch in the group (a round without one ends the run)."""
        done, c = self.branched.get(seed, set()), 0
        while call - 1 - c in done:
            c += 1
        return c

    def _copy(self, r: int, decision: tuple[float, float, float, float]) -> int:
        from workbench.rollout.episode_decode import RowTurn  # the loop's module imports this one
        lp = self.loop
        c = len(lp.turns)
        lp.turns.append([RowTurn(t.role, list(t.tokens), list(t.logprobs), list(t.entropy), t.started_s, t.seconds,
                                 t.waited_s, t.finish_reason, t.call, t.result_s) for t in lp.turns[r]])
        for name in ("state", "finish", "sampled", "fed", "calls"):
            getattr(lp, name).append(getattr(lp, name)[r])
        self.seeds.append(self.seeds[r])
        self.parents.append(r)
        self.branch_at.append(sum(len(t.tokens) for t in lp.turns[r]))
        self.decisions.append(decision)
        g = torch.Generator().manual_seed(hash((self.seeds[r], BRANCH_STREAM, c)) & (2**63 - 1))
        lp.extra_uniforms[c] = torch.rand(lp.limits.max_model_tokens, generator=g)
        return c
