"""The speculative shape's verification pass, with a key/value cache the continuation goes on from.

One teacher-forced forward of the current policy over prompt + draft for the whole batch, laid out as
the engine's decoding loop lays out a batch (`workbench.rollout.hf.HFBackend`):

1. Each distinct prompt is prefilled once (left padding, position ids counting real tokens only) and
   its cache rows copied out to the rows that share it; the prefill's last logits give the
   distribution of each draft's first token.
2. The drafts follow as new columns of that cache (shorter drafts padded on the right, masked), a
   chunk of columns at a time so that one chunk's logits stay under `max_logits` floats; column t's
   logits give the distribution of draft token t + 1.
3. Token by token, each row keeps draft token x_t while u_t <= min(1, l * p_new(x_t) / p_old(x_t))
   (`verify`, at l = 1 in exact mode; the residual draw is the caller's), p_old(x_t) being the one float
   each draft keeps per token. A row is decided at
   its first rejection or at the end of its draft; once every row is decided no further chunk runs.
4. The cache is cropped to the longest accepted prefix, and each row's columns past its own accepted
   prefix (the rejected token and what followed it, or padding) are masked out: the result is a
   `DecodeState` whose next-token logits are each row's distribution at its first non-accepted
   position, from which `HFBackend.decode` continues without prefilling anything again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from workbench.algorithms.logprobs import distinct_prompts, left_pad_ids
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import DecodeState, inverse_cdf_sample, sampling_logprobs


def acceptance(new_logp_tok: torch.Tensor, old_logp_tok: torch.Tensor, lenience: float) -> torch.Tensor:
    """min(1, l * p_new(x) / p_old(x)) per draft token (0 where p_new(x) is 0)."""
    return torch.clamp(lenience * torch.exp(new_logp_tok.double() - old_logp_tok.double()), max=1.0)


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
    teacher-forced pass: `check_drafts` passes a chunk of its positions at a time); `old_logp[i]`
    [T_i]: each draft token's log-probability when it was sampled; `uniforms[i]` [>= T_i]: fresh
    uniforms. `exact` (lenience 1) also takes each draft's old rows [T_i, V] and one more uniform per
    draft for the residual draw (the engine draws it itself, the old row recomputed: `SpeculativeShape`)."""
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
    dev = flat_rows.device  # gather on the rows' device, compare on the CPU
    new_tok = flat_rows[torch.arange(len(flat_tok), device=dev), flat_tok.to(dev)].cpu()
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
        resampled[rej] = draw.cpu().numpy()
    return Verdict(accepted=accepted, rejected=rejected, resampled=resampled)


@dataclass
class Checked:
    """The verification of N drafts by one cached teacher-forced pass."""

    accepted: np.ndarray
    """[N] draft tokens kept (a prefix of each draft)."""
    rejected: np.ndarray
    """[N] bool: the draft token at position `accepted` was rejected (False: the whole draft was kept)."""
    logp: list[list[float]]
    """The current policy's sampling log-probability of each kept token."""
    entropy: list[list[float]]
    """The entropy of the sampling distribution at each kept position."""
    state: DecodeState
    """The cache over prompt + kept prefix; `logits` [N, V]: each row's next-token logits after its kept
    prefix (at a rejected position: the distribution the rejected token was tested against)."""


def _forward(model: torch.nn.Module, cache, ids, mask, pos, keep: int) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                 logits_to_keep=keep).logits


def check_drafts(model: torch.nn.Module, prompts: Sequence[Sequence[int]], drafts: Sequence[Sequence[int]],
                 old_logp: Sequence[Sequence[float]], uniforms: Sequence[torch.Tensor], lenience: float,
                 sampling: SamplingParams, pad_token_id: int, *, max_logits: int = 2**26) -> Checked:
    """Verify each row's draft (possibly empty) against the current policy `model` (see the module
    docstring). Run it under `torch.inference_mode` with the model in eval mode."""
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    n = len(prompts)
    uniques, where = distinct_prompts(prompts)
    ids, mask = left_pad_ids(uniques, pad_token_id)
    ids, mask = ids.to(dev), mask.to(dev)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=getattr(model, "config", None))
    prev = _forward(model, cache, ids, mask, pos, 1)[:, -1]
    if where != list(range(len(uniques))):  # each distinct prompt was prefilled once: copy it out per row
        index = torch.tensor(where, dtype=torch.long, device=dev)
        cache.batch_select_indices(index)
        prev, mask, pos = prev[index], mask[index], pos[index]
    start_pos, width = pos[:, -1] + 1, mask.shape[1]
    lens = np.asarray([len(d) for d in drafts], dtype=np.int64)
    d_max = int(lens.max(initial=0))
    draft_ids = torch.full((n, max(d_max, 1)), pad_token_id, dtype=torch.long)
    for i, d in enumerate(drafts):
        draft_ids[i, :len(d)] = torch.as_tensor(list(d), dtype=torch.long)
    valid = torch.arange(draft_ids.shape[1]).unsqueeze(0) < torch.as_tensor(lens).unsqueeze(1)
    accepted, rejected = np.zeros(n, np.int64), np.zeros(n, bool)
    decided = lens == 0
    pending: list[torch.Tensor | None] = [prev[i] if decided[i] else None for i in range(n)]
    logp: list[list[float]] = [[] for _ in range(n)]
    ent: list[list[float]] = [[] for _ in range(n)]
    vocab = prev.shape[-1]
    chunk = max(1, max_logits // max(n * vocab, 1))
    t0 = 0
    while not decided.all():
        t1 = min(d_max, t0 + chunk)
        cols = torch.arange(t0, t1, device=dev)
        mask = torch.cat([mask, valid[:, t0:t1].to(dev, mask.dtype)], dim=1)
        out = _forward(model, cache, draft_ids[:, t0:t1].to(dev), mask, start_pos.unsqueeze(1) + cols, 0)
        pred = torch.cat([prev.unsqueeze(1), out[:, :-1]], dim=1)  # pred[:, j] gives draft token t0 + j
        prev = out[:, -1]  # gives draft token t1
        _judge(pred, draft_ids[:, t0:t1], t0, lens, old_logp, uniforms, lenience, sampling,
               accepted, rejected, decided, pending, logp, ent)
        for i in np.flatnonzero(~decided & (lens == t1)):  # kept whole: the next token is after the draft
            accepted[i], decided[i], pending[i] = t1, True, prev[i]
        t0 = t1
    keep = int(accepted.max(initial=0))
    if mask.shape[1] > width + keep:  # crop to the longest kept prefix; mask each row's columns past its own
        cache.crop(-(mask.shape[1] - width - keep))
        mask = mask[:, :width + keep].clone()
    for i in range(n):
        mask[i, width + int(accepted[i]):] = 0
    state = DecodeState(cache=cache, logits=torch.stack(pending), mask=mask,
                        next_pos=start_pos + torch.as_tensor(accepted, device=dev))
    return Checked(accepted=accepted, rejected=rejected, logp=logp, entropy=ent, state=state)


def _judge(pred: torch.Tensor, toks: torch.Tensor, t0: int, lens: np.ndarray, old_logp: Sequence[Sequence[float]],
           uniforms: Sequence[torch.Tensor], lenience: float, sampling: SamplingParams, accepted: np.ndarray,
           rejected: np.ndarray, decided: np.ndarray, pending: list, logp: list, ent: list) -> None:
    """The acceptance test over one chunk of draft positions [t0, t0 + width) for the undecided rows."""
    rows = np.flatnonzero(~decided)
    n_cols = toks.shape[1]
    lp = sampling_logprobs(pred[rows].reshape(-1, pred.shape[-1]), sampling).view(len(rows), n_cols, -1)
    tok = toks[rows].to(lp.device)
    new_tok = lp.gather(-1, tok.unsqueeze(-1)).squeeze(-1).double().cpu()
    entropy = torch.special.entr(lp.exp()).sum(-1).cpu()
    m = [int(min(n_cols, lens[i] - t0)) for i in rows]
    verdict = verify([lp[r, :m[r]] for r in range(len(rows))], [toks[i, :m[r]].tolist() for r, i in enumerate(rows)],
                     [list(old_logp[i][t0:t0 + m[r]]) for r, i in enumerate(rows)],
                     [uniforms[i][t0:t0 + m[r]] for r, i in enumerate(rows)], mode="lenient", lenience=lenience)
    for r, i in enumerate(rows):
        k = int(verdict.accepted[r])  # tokens of this chunk kept
        logp[i].extend(new_tok[r, :k].tolist())
        ent[i].extend(entropy[r, :k].tolist())
        if verdict.rejected[r]:
            accepted[i], rejected[i], decided[i], pending[i] = t0 + k, True, True, pred[i, k]
        elif m[r] < n_cols:  # the draft ended inside this chunk, every token kept
            accepted[i], decided[i], pending[i] = t0 + m[r], True, pred[i, m[r]]


def prefix_logits(forward: Callable[..., Any], config: Any, prompts: Sequence[Sequence[int]],
                  prefixes: Sequence[Sequence[int]], pad_token_id: int, device: torch.device) -> torch.Tensor:
    """[N, V] the next-token logits after each prompt + prefix, from `forward` (a causal LM's call, such as
    the drafting weights' `functional_call`): each distinct prompt prefilled once and its cache rows
    copied out, then the prefixes as new columns (right padded, masked), logits kept only at the
    columns some row ends at."""
    from transformers import DynamicCache

    uniques, where = distinct_prompts(prompts)
    ids, mask = left_pad_ids(uniques, pad_token_id)
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=config)
    index = torch.tensor(where, dtype=torch.long, device=device)
    first = forward(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                    logits_to_keep=1).logits[:, -1][index]
    lens = [len(x) for x in prefixes]
    if max(lens, default=0) == 0:
        return first
    cache.batch_select_indices(index)
    mask, start = mask[index], pos[index][:, -1] + 1
    width = max(lens)
    cols = torch.full((len(prefixes), width), pad_token_id, dtype=torch.long)
    for i, x in enumerate(prefixes):
        cols[i, :len(x)] = torch.as_tensor(list(x), dtype=torch.long)
    valid = (torch.arange(width).unsqueeze(0) < torch.as_tensor(lens).unsqueeze(1)).to(device, mask.dtype)
    ends = sorted({n - 1 for n in lens if n})
    out = forward(input_ids=cols.to(device), attention_mask=torch.cat([mask, valid], dim=1),
                  position_ids=start.unsqueeze(1) + torch.arange(width, device=device), cache=cache, use_cache=True,
                  logits_to_keep=torch.as_tensor(ends, device=device)).logits
    at = {c: k for k, c in enumerate(ends)}
    return torch.stack([out[i, at[n - 1]] if n else first[i] for i, n in enumerate(lens)])
