"""Independent rollouts: every row of a group sampled on its own by the backend (`RolloutBackend.generate`),
the shape a run has unless `rollout.shape` names another. With a `feed` (the asynchronous pipeline's
partial rollouts) weights that arrive mid-batch are installed and the unfinished rows continued under
them; the rows then record the version they ended under and their number of segments.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from workbench.rollout.base import GenerationBatch, SamplingParams
from workbench.rollout.shapes.common import Shaped


class WeightFeed(Protocol):
    """New weights reaching a generator mid-batch (the pipeline's partial rollouts)."""

    def pending(self) -> bool:
        """Whether newer weights wait to be installed."""
        ...

    def refresh(self) -> int:
        """Install them; return the version now held."""
        ...


class IndependentShape:
    """Plain sampling: the backend's `generate`, row by row; no state between steps, no figures."""

    name = "independent"

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def take_metrics(self) -> dict[str, float]:
        return {}

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int] | None, version: int, pad_token_id: int, *,
                 generator: torch.Generator | None = None, feed: WeightFeed | None = None) -> Shaped:
        """Rows for `prompts` from `backend` (seeded per row by `seeds`, else by `generator`); with a
        `feed`, continued across weight updates (`generate_partial`). No shape columns: the store's
        shape columns stay null for independent rows."""
        if feed is not None and seeds is not None:
            batch, version_end, segments = generate_partial(backend, prompts, sampling, list(seeds), version, feed,
                                                            pad_token_id)
            return Shaped(batch, None, version_end=version_end, segments=segments)
        batch = (backend.generate(prompts, sampling, seeds=list(seeds)) if seeds is not None
                 else backend.generate(prompts, sampling, generator=generator))
        return Shaped(batch, None)


def generate_partial(backend: Any, prompts: Sequence[Sequence[int]], sampling: SamplingParams, seeds: list[int],
                     version: int, feed: WeightFeed, pad_token_id: int
                     ) -> tuple[GenerationBatch, np.ndarray, np.ndarray]:
    """Generate, and whenever new weights arrive mid-batch, install them and continue the unfinished
    rows under them: each keeps its tokens and log-probs, asks only for the tokens it has left
    (`max_new_tokens` less what it generated) and continues its seed's stream. Returns the batch,
    each row's end version and its number of segments."""
    n = len(prompts)
    batch = backend.generate(prompts, sampling, seeds=seeds, interrupt=feed.pending)
    version_end, segments = np.full(n, version, dtype=np.int64), np.ones(n, dtype=np.int32)
    while batch.cut is not None:
        version = feed.refresh()
        rows = torch.nonzero(batch.cut).squeeze(1)
        done = batch.tokens.shape[1]  # every cut row generated exactly this many tokens
        idx = rows.tolist()
        cont = backend.generate(
            [list(prompts[i]) + batch.tokens[i, :done].tolist() for i in idx],
            dataclasses.replace(sampling, max_new_tokens=sampling.max_new_tokens - done),
            seeds=[seeds[i] for i in idx], interrupt=feed.pending, offset=done)
        batch = batch.splice(rows, cont, pad_token_id)
        version_end[idx] = version
        segments[idx] += 1
    return batch, version_end, segments
