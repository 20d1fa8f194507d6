"""The rollout backend interface every backend shares (in-process Hugging Face, vLLM, Ray workers).

A backend turns a list of prompts (token ids, one entry per sequence to sample: the engine repeats a
prompt once per rollout granted) into sampled continuations with per-token logprobs and the entropy of
the sampling distribution at each position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 16
    """Generation stops after this many new tokens (finish reason "length")."""


@dataclass
class GenerationBatch:
    """Results for N sequences, right-padded to the longest generation T.

    Positions at or beyond `lengths[i]` hold `pad_token_id` in `tokens` and 0 in `logprobs`/`entropy`.
    `lengths` counts generated tokens including the EOS token when one was produced.
    """

    tokens: torch.Tensor
    """[N, T] int64 generated token ids."""
    logprobs: torch.Tensor
    """[N, T] float32 log-probability of each sampled token under the sampling distribution."""
    entropy: torch.Tensor
    """[N, T] float32 entropy (nats) of the sampling distribution at each position."""
    lengths: torch.Tensor
    """[N] int64 number of generated tokens."""
    finished: torch.Tensor
    """[N] bool: True when the sequence ended with EOS ("stop"), False when it hit max_new_tokens ("length")."""
    gen_time_s: float
    """Wall time of the generation call."""

    def finish_reasons(self) -> list[str]:
        return ["stop" if f else "length" for f in self.finished.tolist()]


@runtime_checkable
class RolloutBackend(Protocol):
    """What the engine needs from a rollout backend."""

    policy_version: int
    """Incremented by every `update_weights` call; stored with each rollout."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        *,
        generator: torch.Generator | None = None,
    ) -> GenerationBatch:
        """Sample one continuation per entry of `prompts` (token ids, BOS included)."""
        ...

    def update_weights(self, model: torch.nn.Module) -> None:
        """Take the trainer's new weights (after every optimiser step)."""
        ...
