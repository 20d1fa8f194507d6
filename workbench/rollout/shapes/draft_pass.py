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
   (`acceptance`), p_old(x_t) being the one float each draft keeps per token. A row is decided at
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
from workbench.rollout.hf import DecodeState, sampling_logprobs


def acceptance(new_logp_tok: torch.Tensor, old_logp_tok: torch.Tensor, lenience: float) -> torch.Tensor:
    """min(1, l * p_new(x) / p_old(x)) per draft token (0 where p_new(x) is 0)."""
    return torch.clamp(lenience * torch.exp(new_logp_tok.double() - old_logp_tok.double()), max=1.0)


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
    for r, i in enumerate(rows):
        m = int(min(n_cols, lens[i] - t0))
        old = torch.as_tensor(list(old_logp[i][t0:t0 + m]), dtype=torch.float64)
        ok = torch.as_tensor(uniforms[i][t0:t0 + m], dtype=torch.float64) <= acceptance(new_tok[r, :m], old, lenience)
        bad = (~ok).nonzero()
        k = int(bad[0]) if len(bad) else m  # tokens of this chunk kept
        logp[i].extend(new_tok[r, :k].tolist())
        ent[i].extend(entropy[r, :k].tolist())
        if len(bad):
            accepted[i], rejected[i], decided[i], pending[i] = t0 + k, True, True, pred[i, k]
        elif t0 + m < t0 + n_cols:  # the draft ended inside this chunk, every token kept
            accepted[i], decided[i], pending[i] = t0 + m, True, pred[i, m]


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
