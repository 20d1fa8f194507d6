"""Per-token log-probabilities (and entropy) of response tokens under a causal LM, for the trainer.

The rollout backend returns prompts left-padded and responses right-padded; `pack_sequences` joins
them into one [N, P + T] batch so that one forward pass scores every response token, and
`sequence_logprobs` returns [N, T] log-probabilities aligned with the backend's `tokens`/`logprobs`.
Position ids are derived from the attention mask exactly as the backend does during generation, so
the trainer's logprobs match the sampler's (the k3/ratio terms are then ~0 on-policy).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class PackedBatch:
    """Prompt (left-padded) + response (right-padded) token ids in one tensor."""

    input_ids: torch.Tensor
    """[N, P + T] int64."""
    attention_mask: torch.Tensor
    """[N, P + T] int64: 1 on real prompt and response tokens."""
    response_mask: torch.Tensor
    """[N, T] float32: 1 on generated tokens (EOS included)."""
    response_start: int
    """P: column where the responses start."""


def pack_sequences(
    prompts: Sequence[Sequence[int]],
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    pad_token_id: int,
) -> PackedBatch:
    """Left-pad `prompts` to their longest length and append the [N, T] `tokens` (valid up to `lengths`)."""
    n, t = tokens.shape
    if len(prompts) != n:
        raise ValueError(f"{len(prompts)} prompts for {n} responses")
    p = max((len(x) for x in prompts), default=0)
    prompt_ids = torch.full((n, p), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p), dtype=torch.long)
    for i, ids in enumerate(prompts):
        if len(ids):
            prompt_ids[i, p - len(ids):] = torch.as_tensor(list(ids), dtype=torch.long)
            prompt_mask[i, p - len(ids):] = 1
    resp_mask = (torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)).long()
    resp = torch.where(resp_mask.bool(), tokens.cpu().long(), torch.full_like(tokens.cpu().long(), pad_token_id))
    return PackedBatch(
        input_ids=torch.cat([prompt_ids, resp], dim=1),
        attention_mask=torch.cat([prompt_mask, resp_mask], dim=1),
        response_mask=resp_mask.float(),
        response_start=p,
    )


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only (0 for the left padding), as during generation."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_start: int,
    *,
    response_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities [N, T] of tokens input_ids[:, response_start:] given their prefixes, in one pass.

    Logits are divided by `temperature` (use the sampling temperature so that the ratio to the
    sampler's logprobs is 1 on-policy; top-k/top-p truncation is not applied). With `with_entropy`
    the entropy [N, T] of each position's full distribution is returned too (else None). Values at
    positions where `response_mask` is 0 are set to 0. Gradients flow unless called under no_grad.
    """
    t = input_ids.shape[1] - response_start
    if t <= 0 or response_start < 1:
        raise ValueError(f"response_start={response_start} must be in [1, {input_ids.shape[1] - 1}]")
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask,
                  position_ids=position_ids_from_mask(attention_mask), use_cache=False)
    if _accepts_logits_to_keep(model):
        logits = model(**kwargs, logits_to_keep=t + 1).logits[:, :-1]
    else:
        logits = model(**kwargs).logits[:, response_start - 1:-1]
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, response_start:]
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if with_entropy:
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(dim=-1)
    if response_mask is not None:
        keep = response_mask.to(logprobs.dtype)
        logprobs = logprobs * keep
        entropy = entropy * keep if entropy is not None else None
    return logprobs, entropy
