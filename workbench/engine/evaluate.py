"""Held-out evaluation: n samples per eval prompt (stored as samples, correct) plus greedy correctness.

pass@k for any k <= n is computed later from (samples, correct) with the unbiased estimator; the
metrics logged here are pass@1 (mean of correct / samples) and pass@n (share of prompts solved at
least once), both at the eval temperature, and greedy accuracy.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from workbench.rollout.base import GenerationBatch, RolloutBackend, SamplingParams
from workbench.tasks.base import Prompt


def decode(tokenizer: Any, batch: GenerationBatch) -> list[str]:
    """Response texts (special tokens dropped) of a generation batch."""
    tokens = batch.tokens.cpu().tolist()
    lengths = batch.lengths.cpu().tolist()
    return tokenizer.batch_decode([t[:n] for t, n in zip(tokens, lengths)], skip_special_tokens=True)


Generate = Callable[..., GenerationBatch]
"""(prompts, sampling, generator=) -> a GenerationBatch: a backend's `generate`, or an episodes run's
(`EpisodeShape.generate_flat`: the episodes' turns laid end to end, tools run as in training)."""


def generate_chunked(
    backend: RolloutBackend,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingParams,
    generator: torch.Generator | None,
    chunk: int,
    generate: Generate | None = None,
) -> list[GenerationBatch]:
    gen = generate or backend.generate
    return [gen(prompts[i:i + chunk], sampling, generator=generator) for i in range(0, len(prompts), chunk)]


def evaluate(
    backend: RolloutBackend,
    tokenizer: Any,
    task: Any,
    prompts: list[Prompt],
    token_ids: list[list[int]],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    greedy: bool,
    generator: torch.Generator | None,
    chunk: int = 2048,
    generate: Generate | None = None,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Rows for the store's `evals` table and `eval/` metrics; `generate` (default: the backend's)
    makes the samples (an episodes run evaluates episodes, with its tools)."""
    sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    repeated = [ids for ids in token_ids for _ in range(samples)]
    correct = np.zeros(len(prompts), dtype=np.int64)
    length_sum = np.zeros(len(prompts), dtype=np.float64)
    row = 0
    for batch in generate_chunked(backend, repeated, sampling, generator, chunk, generate):
        for text, n in zip(decode(tokenizer, batch), batch.lengths.tolist()):
            p = row // samples
            correct[p] += bool(task.verify(text, prompts[p]).correct)
            length_sum[p] += n
            row += 1
    greedy_ok: list[bool | None] = [None] * len(prompts)
    if greedy:
        gs = SamplingParams(temperature=1.0, top_k=1, max_new_tokens=max_new_tokens)
        row = 0
        for batch in generate_chunked(backend, token_ids, gs, generator, chunk, generate):
            for text in decode(tokenizer, batch):
                greedy_ok[row] = bool(task.verify(text, prompts[row]).correct)
                row += 1
    rows = [
        {
            "prompt_id": p.id,
            "level": p.level,
            "samples": samples,
            "correct": int(c),
            "greedy_correct": g,
            "mean_length": float(s / samples),
        }
        for p, c, g, s in zip(prompts, correct, greedy_ok, length_sum)
    ]
    return rows, eval_metrics(rows)


def eval_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The logged metrics of one evaluation's rows (`samples`, `correct`, `greedy_correct` per prompt):
    pass@1, pass@n at the eval temperature, the prompt count and greedy accuracy (when taken)."""
    samples = int(rows[0]["samples"]) if rows else 1
    correct = np.array([int(r["correct"]) for r in rows], dtype=np.int64)
    metrics = {
        "eval/pass1": float(np.mean(correct / samples)) if len(rows) else 0.0,
        f"eval/pass{samples}": float(np.mean(correct > 0)) if len(rows) else 0.0,
        "eval/prompts": float(len(rows)),
    }
    greedy = [r.get("greedy_correct") for r in rows]
    if rows and all(g is not None for g in greedy):
        metrics["eval/greedy_acc"] = float(np.mean([bool(g) for g in greedy]))
    return metrics
