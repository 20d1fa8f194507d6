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
   that no verification rule removes; see docs/rollout-shapes.md). The acceptance test needs only
   p_old(x_t), one float per draft token (recorded when it was sampled); the residual needs p_old's
   whole row, but only at the first rejected position, which is not known until the next visit: so
   exact mode keeps the drafting weights (one copy per policy version that still has drafts) and
   recomputes that one row with them, for the rejected rows only (`SpeculativeShape._residual`).
   Keeping every draft's rows instead would cost V floats per token (49,152 on SmolLM2).
2. `lenient` (SPEC-RL's code): accept while u_t <= min(1, l * p_new(x_t) / p_old(x_t)) with
   lenience l = e^spec_bias (its GRPO run: spec_bias 0.5), drop the first rejected token and sample
   the rest fresh. Not the current policy's distribution, even at l = 1 (no residual: the rejected
   token's mass is returned to it); it needs only the draft tokens' own log-probabilities.
3. Unlike SPEC-RL's code, the uniforms u_t are drawn fresh at every step (it reuses one matrix of
   draws from a constant seed), from a stream of each rollout's own, derived from the group's seed.
4. Verification is one teacher-forced pass of the current policy over prompt + draft with a key/value
   cache (`draft_pass.check_drafts`); the rows continue from that cache, cropped to the kept prefix,
   in the backend's own decoding loop (`HFBackend.decode`), nothing prefilled twice.
5. The behaviour log-probabilities stored for every token (reused, resampled or fresh) are the
   current policy's, under the same temperature / top-k / top-p as the rollout's sampling; p_old is
   the sampling distribution the draft was drawn under (its own temperature), as recorded then.
6. A draft serves once, only on a later policy version than the one that made it (a draft of the
   same version would be accepted whole: a copy, not an independent sample). A row without a draft
   is sampled independently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from workbench.errors import DataError
from workbench.rollout.base import GenerationBatch, SamplingParams, group_seed
from workbench.rollout.hf import DecodeState, GroupStreams, HFBackend, sampling_logprobs
from workbench.rollout.shapes.common import (Shaped, ShapeMetrics, empty_columns, entropy_of, eos_ids, pad_batch,
                                             row_of)
from workbench.rollout.shapes.draft_pass import (MODES, Checked, Verdict, acceptance, check_drafts,
                                                 prefix_logits, residual_sample, verify)

@dataclass
class Draft:
    """A response kept to serve as a draft on the prompt's next visit: one float per token."""

    tokens: list[int]
    logp: list[float]
    """Each token's log-probability under the sampling distribution it was drawn from (p_old(x_t))."""
    version: int
    """The policy version that drew it (exact mode keeps that version's weights: `SpeculativeShape.weights`)."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """The sampling settings it was drawn under (p_old is that sampling distribution)."""

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)


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


def weights_of(model: torch.nn.Module, into: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """A copy of the module's parameters and buffers (tied weights once), for `torch.func.functional_call`;
    written into `into`'s tensors where they fit (a copy no longer needed: no new allocation)."""
    named = dict(model.named_parameters())
    named.update(dict(model.named_buffers()))
    into = into or {}
    out = {}
    for k, v in named.items():
        old = into.get(k)
        fits = old is not None and old.shape == v.shape and old.dtype == v.dtype and old.device == v.device
        out[k] = old.copy_(v.detach()) if fits else v.detach().clone()
    return out


def check_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], version: int) -> None:
    """The drafting weights of `version` name exactly the module's parameters and buffers (`weights_of`),
    each of its shape: a missing key would silently run the current weights' tensor instead (the residual
    no longer p_old's), an unknown one belongs to another model. DataError names the keys."""
    want = {k: tuple(v.shape) for k, v in weights_of(model).items()}
    missing, unknown = sorted(set(want) - set(weights)), sorted(set(weights) - set(want))
    shapes = sorted(k for k in set(want) & set(weights) if tuple(weights[k].shape) != want[k])
    if missing or unknown or shapes:
        said = [f"{what}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}" for what, keys in (
            ("missing", missing), ("unknown", unknown), ("of another shape", shapes)) if keys]
        raise DataError(f"rollout.speculative: the drafting weights of policy version {version} do not fit the "
                        f"model ({'; '.join(said)}); a checkpoint of another model or a damaged one")


def nbytes(weights: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in weights.values())


class SpeculativeShape(ShapeMetrics):
    """The engine's speculative rollouts (see the module docstring); holds the drafts between steps and,
    in exact mode, the weights of each policy version that drafted them."""

    name = "speculative"

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.lenience = 1.0 if cfg.mode == "exact" else float(np.exp(cfg.spec_bias))
        self.drafts: dict[int, list[Draft]] = {}
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"drafts": {k: [vars(d) for d in v] for k, v in self.drafts.items()},
                "weights": dict(self.weights)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        fields = set(Draft.__dataclass_fields__)  # a checkpoint of the earlier layout also held each draft's rows
        self.drafts = {int(k): [Draft(**{f: x for f, x in d.items() if f in fields}) for d in v]
                       for k, v in (state or {}).get("drafts", {}).items()}
        self.weights = {int(k): v for k, v in (state or {}).get("weights", {}).items()}

    def _take(self, keys: Sequence[int], version: int, t_max: int) -> tuple[list[Draft | None], int]:
        """One draft per row (None: none usable); and how many drafts exact mode had to drop for want
        of their drafting weights (a checkpoint of the earlier layout)."""
        taken: list[Draft | None] = []
        unusable = 0
        for key in keys:
            pool = self.drafts.get(key, [])
            k = next((j for j, d in enumerate(pool) if d.version < version), None)
            d = pool.pop(k) if k is not None else None
            if d is not None and self.cfg.mode == "exact" and d.version not in self.weights:
                d, unusable = None, unusable + 1
            if d is not None and len(d.tokens) > t_max:
                d = Draft(d.tokens[:t_max], d.logp[:t_max], d.version, d.temperature, d.top_p, d.top_k)
            taken.append(d)
        for key in set(keys):  # what this visit did not use is older than the next visit's drafts
            self.drafts[key] = [d for d in self.drafts.get(key, []) if d.version >= version]
        return taken, unusable

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int], version: int, pad_token_id: int) -> Shaped:
        """Rollouts for `prompts` (`keys`: each row's prompt index, which names its drafts) under the
        current policy `model` at `version`; the results become the drafts of the prompts' next visit.

        With an in-process `HFBackend` over `model` the rows continue from the verification pass's
        key/value cache (`HFBackend.decode`); with any other backend the backend samples the rest from
        prompt + kept prefix."""
        start = time.perf_counter()
        exact = self.cfg.mode == "exact"
        drafts, unusable = self._take(keys, version, sampling.max_new_tokens)
        for v in sorted({d.version for d in drafts if d is not None}) if exact else ():
            check_weights(model, self.weights[v], v)  # strictly: before any row is verified
        n = len(prompts)
        u, u_res = row_uniforms(seeds, sampling.max_new_tokens)
        cached = isinstance(backend, HFBackend) and backend.model is model
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                chk = check_drafts(model, prompts, [d.tokens if d else [] for d in drafts],
                                   [d.logp if d else [] for d in drafts], u, self.lenience, sampling, pad_token_id)
                verify_s = time.perf_counter() - start
                t0 = time.perf_counter()
                forced = np.full(n, -1, np.int64)
                if exact and chk.rejected.any():
                    forced = self._residual(model, prompts, drafts, chk, u_res, sampling, pad_token_id)
                residual_s = time.perf_counter() - t0
                eos = eos_ids(backend)
                kept = [list(d.tokens[:int(chk.accepted[i])]) if d else [] for i, d in enumerate(drafts)]
                out = (self._decode(backend, chk, kept, forced, sampling, seeds, eos, pad_token_id) if cached else
                       self._continue(backend, prompts, chk, kept, forced, sampling, seeds, eos, pad_token_id))
        finally:
            model.train(was_training)
        t0 = time.perf_counter()
        if exact and version not in self.weights:  # the weights that drew these rollouts, for their next visit
            needed = {d.version for v in self.drafts.values() for d in v}
            spare = next((self.weights.pop(k) for k in sorted(self.weights) if k not in needed), None)
            self.weights[version] = weights_of(model, into=spare)
        for i in range(n):
            tok, lp, _, _ = row_of(out, i)
            self.drafts.setdefault(keys[i], []).append(
                Draft(tok, lp, version, sampling.temperature, sampling.top_p, sampling.top_k))
        dropped = self._fit(self.cfg.max_draft_mb * 2**20) if exact else 0
        keep_s = time.perf_counter() - t0
        out.gen_time_s = time.perf_counter() - start
        cols = empty_columns(n, self.name)
        has = np.asarray([d is not None for d in drafts], dtype=bool)
        cols["draft_mode"][has] = self.cfg.mode  # "lenient": not the current policy's sample (stored so)
        cols["reused_tokens"][has] = chk.accepted[has]
        cols["draft_tokens"][has] = [len(d.tokens) for d in drafts if d is not None]
        cols["draft_rejected_at"][has & chk.rejected] = chk.accepted[has & chk.rejected]
        reused, offered = int(chk.accepted[has].sum()), int(sum(len(d.tokens) for d in drafts if d is not None))
        metrics = {"rollout/shape/draft_rows": int(has.sum()), "rollout/shape/reused_tokens": reused,
                   "rollout/shape/draft_tokens": offered, "rollout/shape/fresh_tokens": int(out.lengths.sum()) - reused,
                   "rollout/shape/rejected": int(chk.rejected.sum()),
                   "rollout/shape/drafts_dropped": dropped + unusable, "rollout/shape/verify_s": verify_s,
                   "rollout/shape/residual_s": residual_s, "rollout/shape/keep_s": keep_s}
        self.note(metrics)
        return Shaped(out, cols, metrics)

    def _residual(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]], drafts: list[Draft | None],
                  chk: Checked, u_res: Sequence[float], sampling: SamplingParams, pad_token_id: int) -> np.ndarray:
        """Exact mode's draw at each rejected position from norm(max(0, p_new - p_old)): p_new is the
        verification pass's row there, p_old the drafting weights' row, recomputed by one forward of
        those weights over prompt + kept prefix (the rejected rows only, batched per drafting version,
        each distinct prompt prefilled once: `prefix_logits`)."""
        forced = np.full(len(prompts), -1, np.int64)
        rej = np.flatnonzero(chk.rejected)
        new_rows = sampling_logprobs(chk.state.logits[torch.as_tensor(rej)], sampling)
        old_rows = torch.empty_like(new_rows)
        groups: dict[tuple, list[int]] = {}
        for r, i in enumerate(rej):
            d = drafts[i]
            groups.setdefault((d.version, d.temperature, d.top_p, d.top_k), []).append(r)
        device = next(model.parameters()).device
        for (version, *_), members in groups.items():
            rows = [int(rej[r]) for r in members]
            if any(t.device != device for t in self.weights[version].values()):  # a checkpoint loads on the CPU
                self.weights[version] = {k: t.to(device) for k, t in self.weights[version].items()}

            def forward(**kw: Any) -> Any:  # strict: every tensor is the drafting version's, none the current's
                return torch.func.functional_call(model, self.weights[version], (), kw, tie_weights=True, strict=True)

            logits = prefix_logits(forward, getattr(model, "config", None), [prompts[i] for i in rows],
                                   [drafts[i].tokens[:int(chk.accepted[i])] for i in rows], pad_token_id,
                                   new_rows.device)
            old_rows[torch.as_tensor(members)] = sampling_logprobs(logits, drafts[rows[0]].sampling()).to(old_rows)
        draw = residual_sample(new_rows, old_rows, torch.as_tensor([u_res[i] for i in rej], dtype=torch.float64))
        forced[rej] = draw.cpu().numpy()
        return forced

    def _fit(self, limit: float) -> int:
        """Keep the weights of the versions some draft still needs; past `limit` bytes drop the oldest
        version's weights and its drafts (their prompts' rows then sample independently). Returns how
        many drafts went."""
        needed = {d.version for v in self.drafts.values() for d in v}
        self.weights = {k: w for k, w in self.weights.items() if k in needed}
        gone = 0
        while self.weights and sum(nbytes(w) for w in self.weights.values()) > limit:
            oldest = min(self.weights)
            del self.weights[oldest]
            for key, pool in self.drafts.items():
                gone += sum(d.version == oldest for d in pool)
                self.drafts[key] = [d for d in pool if d.version != oldest]
        return gone

    @staticmethod
    def _decode(backend: HFBackend, chk: Checked, kept: list[list[int]], forced: np.ndarray,
                sampling: SamplingParams, seeds: Sequence[int], eos: set[int], pad_token_id: int) -> GenerationBatch:
        """Each row's kept prefix, continued from the verification pass's cache by the backend's own
        decoding loop (finished rows leave the batch as there: `compact_below`)."""
        st, t_max = chk.state, sampling.max_new_tokens
        prefix = [(kept[i], chk.logp[i], chk.entropy[i]) for i in range(len(forced))]
        final = [(list(t), list(lp), list(e), bool(t) and t[-1] in eos) for t, lp, e in prefix]
        todo = [i for i, (t, _, _) in enumerate(prefix) if len(t) < t_max and not (t and t[-1] in eos)]
        if todo:
            index = torch.as_tensor(todo, device=st.logits.device)
            if len(todo) < len(prefix):
                st.cache.batch_select_indices(index)
            state = DecodeState(cache=st.cache, logits=st.logits[index], mask=st.mask[index],
                                next_pos=st.next_pos[index], forced=torch.as_tensor(forced[todo]),
                                limits=torch.as_tensor([t_max - len(prefix[i][0]) for i in todo]))
            streams = GroupStreams([seeds[i] for i in todo])
            tokens, logprobs, entropy, lengths, finished, _ = backend.decode(state, sampling, streams=streams)
            for k, i in enumerate(todo):
                m = int(lengths[k])
                t, lp, e, _ = final[i]
                final[i] = (t + tokens[k, :m].tolist(), lp + logprobs[k, :m].tolist(), e + entropy[k, :m].tolist(),
                            bool(finished[k]))
        return pad_batch(final, pad_token_id, 0.0)

    @staticmethod
    def _continue(backend: Any, prompts: Sequence[Sequence[int]], chk: Checked, kept: list[list[int]],
                  forced: np.ndarray, sampling: SamplingParams, seeds: Sequence[int], eos: set[int],
                  pad_token_id: int) -> GenerationBatch:
        """Without the cache (a backend other than an in-process `HFBackend` over the policy): each row's
        kept prefix (and exact mode's residual token, scored from the verification pass's row), continued
        fresh by the backend from prompt + prefix where it neither ended (EOS) nor filled
        `max_new_tokens`; a row's continuation is cut at what it has left."""
        t_max = sampling.max_new_tokens
        prefix = [(list(kept[i]), list(chk.logp[i]), list(chk.entropy[i])) for i in range(len(kept))]
        rows = np.flatnonzero(forced >= 0)
        if len(rows):
            lp = sampling_logprobs(chk.state.logits[torch.as_tensor(rows)], sampling).float().cpu()
            for r, i in enumerate(rows):
                prefix[i][0].append(int(forced[i]))
                prefix[i][1].append(float(lp[r, int(forced[i])]))
                prefix[i][2].append(float(entropy_of(lp[r:r + 1])[0]))
        todo = [i for i, (toks, _, _) in enumerate(prefix) if len(toks) < t_max and not (toks and toks[-1] in eos)]
        final = [(t, lp, e, bool(t) and t[-1] in eos) for t, lp, e in prefix]
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


__all__ = ["MODES", "Draft", "SpeculativeShape", "Verdict", "acceptance", "check_weights", "nbytes", "residual_sample",
           "row_uniforms", "verify", "weights_of"]
