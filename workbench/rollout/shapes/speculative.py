"""Speculative rollouts (SPEC-RL: Liu et al. 2025, "SPEC-RL: Accelerating On-Policy Reinforcement
Learning via Speculative Rollouts", arXiv 2509.23232; code ShopeeLLM/Spec-RL, read at 97da99e).

A prompt's rollouts of its previous visit (SPEC-RL: the previous epoch) are drafts for this visit's:
each draft is checked, in one teacher-forced pass of the current policy, token by token against the
distribution it was sampled from; the accepted prefix is kept, and the rest is sampled fresh. How it
departs from independent sampling, by mode:

1. `exact` (ours): accept draft token x_t while u_t <= min(1, p_new(x_t) / p_old(x_t)); at the first
   rejection draw that position's token from the residual norm(max(0, p_new - p_old)), then continue
   fresh from the current policy. This is speculative sampling (Leviathan et al. 2023; Chen et al.
   2023) with the old policy as the draft model: every rollout is distributed exactly as a fresh
   sample of the current policy, given a draft drawn independently of the current weights (in training
   the weights were updated on a batch holding the draft: a coupling of the order of the learning rate
   that no verification rule removes; see docs/rollout-shapes.md). It needs p_old's whole row at the
   rejected position, so the draft keeps the rows it was sampled from (one teacher-forced pass over
   each response when it is made: V floats per token, cheap on the organism, large on a 49k-token
   vocabulary).
2. `lenient` (SPEC-RL's code): accept while u_t <= min(1, l * p_new(x_t) / p_old(x_t)) with
   lenience l = e^spec_bias (its GRPO run: spec_bias 0.5), drop the first rejected token and sample
   the rest fresh. Not the current policy's distribution, even at l = 1 (no residual: the rejected
   token's mass is returned to it); it needs only the draft tokens' own log-probabilities.
3. Unlike SPEC-RL's code, the uniforms u_t are drawn fresh at every step (it reuses one matrix of
   draws from a constant seed), from a stream of each rollout's own, derived from the group's seed.
4. The behaviour log-probabilities stored for every token (reused, resampled or fresh) are the
   current policy's, under the same temperature / top-k / top-p as the rollout's sampling; p_old is
   the sampling distribution the draft was drawn under (its own temperature), as recorded then.
5. A draft serves once, only on a later policy version than the one that made it (a draft of the
   same version would be accepted whole: a copy, not an independent sample). A row without a draft
   is sampled independently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from workbench.rollout.base import GenerationBatch, SamplingParams, group_seed
from workbench.rollout.hf import inverse_cdf_sample
from workbench.rollout.shapes.common import (Shaped, ShapeMetrics, empty_columns, entropy_of, eos_ids, pad_batch,
                                             policy_rows, row_of)

MODES = ("exact", "lenient")


@dataclass
class Verdict:
    """The verification of N drafts."""

    accepted: np.ndarray
    """[N] draft tokens kept (a prefix of the draft)."""
    rejected: np.ndarray
    """[N] bool: the draft token at position `accepted` was rejected (False: the whole draft was kept)."""
    resampled: np.ndarray
    """[N] exact mode: the token drawn from the residual at the rejected position; -1: none."""


def acceptance(new_logp_tok: torch.Tensor, old_logp_tok: torch.Tensor, lenience: float) -> torch.Tensor:
    """min(1, l * p_new(x) / p_old(x)) per draft token (0 where p_new(x) is 0)."""
    return torch.clamp(lenience * torch.exp(new_logp_tok.double() - old_logp_tok.double()), max=1.0)


def residual_sample(new_rows: torch.Tensor, old_rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row from norm(max(0, p_new - p_old)) ([R, V] log-probabilities each), by inverse
    CDF with the uniforms `u` [R]; from p_new where the residual has no mass (the two agree up to
    rounding)."""
    res = torch.clamp(new_rows.double().exp() - old_rows.double().exp(), min=0.0)
    empty = res.sum(-1) <= 0
    logp = torch.where(empty.unsqueeze(-1), new_rows.double(), res.log())
    return inverse_cdf_sample(logp, u.double())


def verify(new_rows: Sequence[torch.Tensor], drafts: Sequence[Sequence[int]], old_logp: Sequence[Sequence[float]],
           uniforms: Sequence[torch.Tensor], *, mode: str, lenience: float = 1.0,
           old_rows: Sequence[torch.Tensor | None] | None = None,
           residual_u: Sequence[float] | None = None) -> Verdict:
    """Verify each draft against the current policy (all drafts at once: one gather, one comparison).

    `new_rows[i]` [T_i, V]: the current policy's sampling log-probabilities along draft i (one
    teacher-forced pass, `policy_rows`); `old_logp[i]` [T_i]: each draft token's log-probability when
    it was sampled; `uniforms[i]` [>= T_i]: fresh uniforms. `exact` (lenience 1) also takes each
    draft's old rows [T_i, V] and one more uniform per draft for the residual draw."""
    if mode not in MODES:
        raise ValueError(f"speculative mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "exact" and (old_rows is None or residual_u is None):
        raise ValueError("exact verification needs the drafts' old rows and one residual uniform per draft")
    lenience = 1.0 if mode == "exact" else lenience
    n = len(drafts)
    lens = [len(d) for d in drafts]
    accepted, rejected, resampled = np.zeros(n, np.int64), np.zeros(n, bool), np.full(n, -1, np.int64)
    live = [i for i in range(n) if lens[i]]
    if not live:
        return Verdict(accepted=accepted, rejected=rejected, resampled=resampled)
    flat_rows = torch.cat([new_rows[i][:lens[i]] for i in live])
    flat_tok = torch.as_tensor([x for i in live for x in drafts[i]], dtype=torch.long)
    new_tok = flat_rows[torch.arange(len(flat_tok)), flat_tok]
    old_tok = torch.as_tensor([x for i in live for x in old_logp[i][:lens[i]]], dtype=torch.float64)
    u = torch.cat([torch.as_tensor(uniforms[i][:lens[i]], dtype=torch.float64) for i in live])
    ok = (u <= acceptance(new_tok, old_tok, lenience)).split([lens[i] for i in live])
    bad = torch.nn.utils.rnn.pad_sequence([~o for o in ok], batch_first=True, padding_value=False)
    first = torch.where(bad.any(1), bad.int().argmax(1), torch.as_tensor([lens[i] for i in live]))
    idx = np.asarray(live)
    accepted[idx] = first.numpy()
    rejected[idx] = bad.any(1).numpy()
    if mode == "exact" and rejected.any():
        rej = np.flatnonzero(rejected)
        a = accepted[rej]
        draw = residual_sample(torch.stack([new_rows[i][k] for i, k in zip(rej, a)]),
                               torch.stack([old_rows[i][k] for i, k in zip(rej, a)]),
                               torch.as_tensor([residual_u[i] for i in rej], dtype=torch.float64))
        resampled[rej] = draw.numpy()
    return Verdict(accepted=accepted, rejected=rejected, resampled=resampled)


@dataclass
class Draft:
    """A response kept to serve as a draft on the prompt's next visit."""

    tokens: list[int]
    logp: list[float]
    """Each token's log-probability under the sampling distribution it was drawn from."""
    rows: torch.Tensor | None
    """[T, V] that distribution's log-probabilities at each position (exact mode), else None."""
    version: int


def _picked(d: Draft) -> list[float]:
    """Exact mode's p_old of each draft token, read from the rows it keeps (the ratio and the residual
    then use one set of numbers)."""
    return d.rows[torch.arange(len(d.tokens)), torch.as_tensor(d.tokens, dtype=torch.long)].tolist()


def row_uniforms(seeds: Sequence[int], width: int) -> tuple[list[torch.Tensor], list[float]]:
    """Fresh uniforms for verification: `width` per row and one for the residual, from a stream of
    each row's own (the group's seed and the row's place in its group); the seeds change every step."""
    place: dict[int, int] = {}
    draws, extra = [], []
    for seed in seeds:
        k = place.get(int(seed), 0)
        place[int(seed)] = k + 1
        g = torch.Generator().manual_seed(group_seed(int(seed) & (2**62 - 1), 0x5BEC, k))
        u = torch.rand(width + 1, generator=g, dtype=torch.float64)
        draws.append(u[:width])
        extra.append(float(u[width]))
    return draws, extra


class SpeculativeShape(ShapeMetrics):
    """The engine's speculative rollouts (see the module docstring); holds the drafts between steps."""

    name = "speculative"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.lenience = 1.0 if cfg.mode == "exact" else float(np.exp(cfg.spec_bias))
        self.drafts: dict[int, list[Draft]] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"drafts": {k: [vars(d) for d in v] for k, v in self.drafts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drafts = {int(k): [Draft(**d) for d in v] for k, v in (state or {}).get("drafts", {}).items()}

    def _take(self, keys: Sequence[int], version: int, t_max: int) -> list[Draft | None]:
        taken: list[Draft | None] = []
        for key in keys:
            pool = self.drafts.get(key, [])
            k = next((j for j, d in enumerate(pool) if d.version < version), None)
            d = pool.pop(k) if k is not None else None
            if d is not None and len(d.tokens) > t_max:
                d = Draft(d.tokens[:t_max], d.logp[:t_max], None if d.rows is None else d.rows[:t_max], d.version)
            taken.append(d)
        for key in set(keys):  # what this visit did not use is older than the next visit's drafts
            self.drafts[key] = [d for d in self.drafts.get(key, []) if d.version >= version]
        return taken

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int], version: int, pad_token_id: int) -> Shaped:
        """Rollouts for `prompts` (`keys`: each row's prompt index, which names its drafts) under the
        current policy `model` at `version`; the results become the drafts of the prompts' next visit."""
        start = time.perf_counter()
        exact = self.cfg.mode == "exact"
        drafts = self._take(keys, version, sampling.max_new_tokens)
        has = [i for i, d in enumerate(drafts) if d is not None]
        new_rows = policy_rows(model, [prompts[i] for i in has], [drafts[i].tokens for i in has], sampling,
                               pad_token_id)
        u, u_res = row_uniforms([seeds[i] for i in has], sampling.max_new_tokens)
        old_logp = [_picked(drafts[i]) if exact else drafts[i].logp for i in has]
        verdict = verify(new_rows, [drafts[i].tokens for i in has], old_logp, u,
                         mode=self.cfg.mode, lenience=self.lenience,
                         old_rows=[drafts[i].rows for i in has] if exact else None, residual_u=u_res)
        eos = eos_ids(backend)
        n = len(prompts)
        prefix: list[tuple[list[int], list[float], list[float]]] = [([], [], [])] * n
        cols = empty_columns(n, self.name)
        for j, i in enumerate(has):
            a, rows = int(verdict.accepted[j]), new_rows[j]
            toks = list(drafts[i].tokens[:a]) + ([int(verdict.resampled[j])] if verdict.resampled[j] >= 0 else [])
            pos = torch.arange(len(toks))
            lp = rows[pos, torch.as_tensor(toks, dtype=torch.long)].tolist() if toks else []
            prefix[i] = (toks, lp, entropy_of(rows[pos]).tolist() if toks else [])
            cols["reused_tokens"][i], cols["draft_tokens"][i] = a, len(drafts[i].tokens)
            cols["draft_rejected_at"][i] = a if verdict.rejected[j] else -1
        verify_s = time.perf_counter() - start
        out = self._continue(backend, prompts, prefix, sampling, seeds, eos, pad_token_id)
        rows_s = 0.0
        if exact:  # the drafts' own rows for the next visit: one teacher-forced pass at these weights
            t0 = time.perf_counter()
            finals = [row_of(out, i)[0] for i in range(n)]
            final_rows = policy_rows(model, prompts, finals, sampling, pad_token_id)
            rows_s = time.perf_counter() - t0
        for i in range(n):
            tok, lp, _, _ = row_of(out, i)
            self.drafts.setdefault(keys[i], []).append(Draft(tok, lp, final_rows[i] if exact else None, version))
        dropped = self._fit(self.cfg.max_draft_mb * 2**20) if exact else 0
        out.gen_time_s = time.perf_counter() - start
        reused = int(cols["reused_tokens"][cols["reused_tokens"] > 0].sum())
        offered = int(cols["draft_tokens"][cols["draft_tokens"] > 0].sum())
        metrics = {"rollout/shape/draft_rows": len(has), "rollout/shape/reused_tokens": reused,
                   "rollout/shape/draft_tokens": offered, "rollout/shape/fresh_tokens": int(out.lengths.sum()) - reused,
                   "rollout/shape/rejected": int(verdict.rejected.sum()), "rollout/shape/drafts_dropped": dropped,
                   "rollout/shape/verify_s": verify_s, "rollout/shape/rows_s": rows_s}
        self.note(metrics)
        return Shaped(out, cols, metrics)

    def _fit(self, limit: float) -> int:
        """Drop the oldest drafts until their rows take at most `limit` bytes; return how many went."""
        sizes = {id(d): d.rows.numel() * d.rows.element_size() for v in self.drafts.values() for d in v
                 if d.rows is not None}
        total = sum(sizes.values())
        if total <= limit:
            return 0
        order = sorted(((d.version, k, j) for k, v in self.drafts.items() for j, d in enumerate(v)), reverse=True)
        gone: set[tuple[int, int]] = set()
        while total > limit and order:
            _, k, j = order.pop()
            gone.add((k, j))
            total -= sizes.get(id(self.drafts[k][j]), 0)
        for k in {k for k, _ in gone}:
            self.drafts[k] = [d for j, d in enumerate(self.drafts[k]) if (k, j) not in gone]
        return len(gone)

    @staticmethod
    def _continue(backend: Any, prompts: Sequence[Sequence[int]], prefix: list, sampling: SamplingParams,
                  seeds: Sequence[int], eos: set[int], pad_token_id: int) -> GenerationBatch:
        """Each row's prefix, continued fresh by the backend where it neither ended (EOS) nor filled
        `max_new_tokens`; a row's continuation is cut at what it has left (exact: the same tokens as a
        call with that limit, whose draws come in the same order)."""
        t_max = sampling.max_new_tokens
        todo = [i for i, (toks, _, _) in enumerate(prefix) if len(toks) < t_max and not (toks and toks[-1] in eos)]
        final = [(list(t), list(lp), list(e), bool(t) and t[-1] in eos) for t, lp, e in prefix]
        if todo:
            left = {i: t_max - len(prefix[i][0]) for i in todo}
            cont = backend.generate([list(prompts[i]) + prefix[i][0] for i in todo],
                                    SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                                   top_k=sampling.top_k, max_new_tokens=max(left.values())),
                                    seeds=[seeds[i] for i in todo])
            for k, i in enumerate(todo):
                tok, lp, ent, _ = row_of(cont, k)
                cut = left[i]
                ends = next((j for j, x in enumerate(tok[:cut]) if x in eos), None)
                m = cut if ends is None else ends + 1
                t, l, e, _ = final[i]
                final[i] = (t + tok[:m], l + lp[:m], e + ent[:m], ends is not None)
        return pad_batch(final, pad_token_id, 0.0)
