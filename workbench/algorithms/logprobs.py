"""Per-token log-probabilities (and entropy) of response tokens under a causal LM, for the trainer.

The rollout backend returns prompts left-padded and responses right-padded; `pack_sequences` joins
them into one [N, P + T] batch so that one forward pass scores every response token, and
`sequence_logprobs` returns [N, T] log-probabilities aligned with the backend's `tokens`/`logprobs`.
Position ids are derived from the attention mask exactly as the backend does during generation, so
the trainer's logprobs match the sampler's (the k3/ratio terms are then ~0 on-policy).

GRPO scores G responses per prompt, so a packed batch holds each prompt G times. `group_sequences` and
`grouped_logprobs` score the same tokens with each distinct prompt run once: the prompts' key/value
cache (with gradients) is shared by their responses, which attend to it as they would to their own
copy. Same log-probabilities and gradients up to float rounding; on the organism's default step
(64 prompts x 8, 5 prompt and ~3.5 response tokens) forward + backward takes ~40% less time.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

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


@dataclass
class GroupedBatch:
    """Responses with their prompts stored once: row i's prompt is `prompt_ids[index[i]]`."""

    prompt_ids: torch.Tensor
    """[U, P] int64, each distinct prompt left-padded."""
    prompt_mask: torch.Tensor
    """[U, P] int64: 1 on real prompt tokens."""
    index: torch.Tensor
    """[N] int64: the distinct prompt of each response row."""
    tokens: torch.Tensor
    """[N, T] int64 response ids, `pad_token_id` after each response's end."""
    response_mask: torch.Tensor
    """[N, T] float32: 1 on generated tokens (EOS included)."""

    def to(self, device: Any) -> "GroupedBatch":
        return GroupedBatch(*(t.to(device) for t in (self.prompt_ids, self.prompt_mask, self.index, self.tokens,
                                                     self.response_mask)))

    @property
    def shared(self) -> bool:
        """Whether some prompt serves more than one response (else plain packing is as cheap)."""
        return self.prompt_ids.shape[0] < self.index.shape[0]

    def packed(self, pad_token_id: int) -> PackedBatch:
        """The same batch with every row's prompt copied in (the layout of `pack_sequences`)."""
        mask = self.response_mask.long()
        return PackedBatch(torch.cat([self.prompt_ids[self.index], self.tokens], 1),
                           torch.cat([self.prompt_mask[self.index], mask], 1), self.response_mask,
                           self.prompt_ids.shape[1])


def group_sequences(prompts: Sequence[Sequence[int]], tokens: torch.Tensor, lengths: torch.Tensor,
                    pad_token_id: int) -> GroupedBatch:
    """Like `pack_sequences`, but each distinct prompt (by its token ids) is stored once."""
    n, t = tokens.shape
    if len(prompts) != n:
        raise ValueError(f"{len(prompts)} prompts for {n} responses")
    slot: dict[tuple[int, ...], int] = {}
    index = torch.tensor([slot.setdefault(tuple(int(x) for x in ids), len(slot)) for ids in prompts],
                         dtype=torch.long)
    p = max((len(k) for k in slot), default=0)
    prompt_ids = torch.full((len(slot), p), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(slot), p), dtype=torch.long)
    for ids, k in slot.items():
        if ids:
            prompt_ids[k, p - len(ids):] = torch.tensor(ids, dtype=torch.long)
            prompt_mask[k, p - len(ids):] = 1
    resp_mask = torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)
    resp = torch.where(resp_mask, tokens.cpu().long(), torch.full_like(tokens.cpu().long(), pad_token_id))
    return GroupedBatch(prompt_ids, prompt_mask, index, resp, resp_mask.float())


def grouped_logprobs(
    model: torch.nn.Module,
    batch: GroupedBatch,
    *,
    pad_token_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`sequence_logprobs` of a GroupedBatch: the distinct prompts run once with a key/value cache,
    which is then indexed out to their responses (gradients flow back through the index); the
    responses run on top of it. Falls back to one packed pass when no prompt repeats or the model
    takes no cache."""
    if not batch.shared or not _accepts_cache(model):
        packed = batch.packed(pad_token_id)
        return sequence_logprobs(model, packed.input_ids, packed.attention_mask, packed.response_start,
                                 response_mask=packed.response_mask, temperature=temperature,
                                 with_entropy=with_entropy)
    from transformers import DynamicCache

    if batch.prompt_ids.shape[1] < 1 or batch.tokens.shape[1] < 1:
        raise ValueError("grouped_logprobs needs at least one prompt token and one response token")
    cache = DynamicCache(config=getattr(model, "config", None))
    first = model(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask,
                  position_ids=position_ids_from_mask(batch.prompt_mask), cache=cache, use_cache=True,
                  logits_to_keep=1).logits[:, -1]
    cache.batch_select_indices(batch.index)  # one copy of each prompt's keys/values per response
    t = batch.tokens.shape[1]
    prompt_len = batch.prompt_mask.sum(1)[batch.index]
    rest = model(input_ids=batch.tokens,
                 attention_mask=torch.cat([batch.prompt_mask[batch.index], batch.response_mask.long()], 1),
                 position_ids=prompt_len.unsqueeze(1) + torch.arange(t, device=batch.tokens.device).unsqueeze(0),
                 cache=cache, use_cache=True, logits_to_keep=t).logits[:, :-1]
    logits = torch.cat([first[batch.index].unsqueeze(1), rest], 1).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = (logits.gather(-1, batch.tokens.unsqueeze(-1)).squeeze(-1) - lse) * batch.response_mask
    entropy = None
    if with_entropy:
        entropy = (lse - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)) * batch.response_mask
    return logprobs, entropy


def _accepts_cache(model: torch.nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "cache" in params and "logits_to_keep" in params
