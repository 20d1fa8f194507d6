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
    if len(prompts) != tokens.shape[0]:
        raise ValueError(f"{len(prompts)} prompts for {tokens.shape[0]} responses")
    prompt_ids, prompt_mask = left_pad_ids(prompts, pad_token_id)
    resp, resp_mask = _responses(tokens, lengths, pad_token_id)
    return PackedBatch(
        input_ids=torch.cat([prompt_ids, resp], dim=1),
        attention_mask=torch.cat([prompt_mask, resp_mask.long()], dim=1),
        response_mask=resp_mask.float(),
        response_start=prompt_ids.shape[1],
    )


def left_pad_ids(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, P] prompt ids right-aligned to the longest prompt, and their mask (1 on real tokens)."""
    p = max((len(x) for x in prompts), default=0)
    ids = torch.full((len(prompts), p), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), p), dtype=torch.long)
    for i, row in enumerate(prompts):
        if len(row):
            ids[i, p - len(row):] = torch.as_tensor(list(row), dtype=torch.long)
            mask[i, p - len(row):] = 1
    return ids, mask


def _responses(tokens: torch.Tensor, lengths: torch.Tensor, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, T] response ids with `pad_token_id` past each length, and the bool mask of real tokens."""
    mask = torch.arange(tokens.shape[1]).unsqueeze(0) < lengths.cpu().unsqueeze(1)
    toks = tokens.cpu().long()
    return torch.where(mask, toks, torch.full_like(toks, pad_token_id)), mask


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The distinct prompts (by token ids) in first-seen order, and each prompt's place among them."""
    slot: dict[tuple[int, ...], int] = {}
    index = [slot.setdefault(tuple(int(x) for x in ids), len(slot)) for ids in prompts]
    return list(slot), index


def _token_scores(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool,
                  mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of `targets` under `logits` / temperature (and the entropies), 0 where `mask` is 0."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if with_entropy:
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(dim=-1)
    if mask is not None:
        keep = mask.to(logprobs.dtype)
        logprobs = logprobs * keep
        entropy = entropy * keep if entropy is not None else None
    return logprobs, entropy


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
    return _token_scores(logits, input_ids[:, response_start:], temperature, with_entropy, response_mask)


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
    if len(prompts) != tokens.shape[0]:
        raise ValueError(f"{len(prompts)} prompts for {tokens.shape[0]} responses")
    uniques, index = distinct_prompts(prompts)
    prompt_ids, prompt_mask = left_pad_ids(uniques, pad_token_id)
    resp, resp_mask = _responses(tokens, lengths, pad_token_id)
    return GroupedBatch(prompt_ids, prompt_mask, torch.tensor(index, dtype=torch.long), resp, resp_mask.float())


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
    logits = torch.cat([first[batch.index].unsqueeze(1), rest], 1)
    return _token_scores(logits, batch.tokens, temperature, with_entropy, batch.response_mask)


def _accepts_cache(model: torch.nn.Module) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return "cache" in params and "logits_to_keep" in params
