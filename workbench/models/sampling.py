"""A plain batched sampling loop with a KV cache, for the organism's report and tests.

The engine's rollout backend (`workbench.rollout.hf`) is the real one (logprobs, entropy, budgets);
this loop only needs sampled token ids at a temperature, reproducibly from a `torch.Generator`,
so this part does not depend on the rollout part.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch


@torch.no_grad()
def sample_ids(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    eos_id: int,
    pad_id: int,
    max_new_tokens: int = 12,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    batch_size: int = 1024,
) -> list[list[int]]:
    """One continuation per prompt (token ids, BOS included), cut before EOS.

    `temperature` 0 means greedy. Prompts are left-padded per batch; positions count real tokens
    only, as in training.
    """
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        out.extend(
            _sample_batch(model, prompts[start : start + batch_size], eos_id, pad_id,
                          max_new_tokens, temperature, generator)
        )
    return out


def _cache_kwarg(model: torch.nn.Module) -> str:
    """`cache` in newer transformers 5.x (where `past_key_values` is deprecated), else the old name."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(result) -> object:
    cache = getattr(result, "cache", None)
    return cache if cache is not None else result.past_key_values


def _sample_batch(model, prompts, eos_id, pad_id, max_new_tokens, temperature, generator):
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    result = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    cache, logits = _cache_of(result), result.logits[:, -1, :]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    steps = []
    for _ in range(max_new_tokens):
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            nxt = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        steps.append(nxt)
        done |= nxt == eos_id
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        pos = pos[:, -1:] + 1
        result = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                       use_cache=True, **{_cache_kwarg(model): cache})
        cache, logits = _cache_of(result), result.logits[:, -1, :]
    tokens = torch.stack(steps, dim=1).tolist()
    cut = []
    for row in tokens:
        cut.append(row[: row.index(eos_id)] if eos_id in row else row)
    return cut
