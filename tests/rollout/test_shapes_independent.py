"""Independent rollouts as a shape: every shape keeps the `Shape` contract, the independent one returns
what its backend's `generate` returns (seeded or from a generator), and a feed of new weights continues
its rows across them (the pipeline's partial rollouts)."""

from __future__ import annotations

import pytest
import torch

from workbench.config import RolloutConfig, RunConfig
from workbench.rollout.base import SamplingParams
from workbench.rollout.hf import HFBackend
from workbench.rollout.shapes import IndependentShape, SpeculativeShape, TreeShape, make_shape

SAMPLE = SamplingParams(temperature=1.5, max_new_tokens=8)


@pytest.mark.parametrize("name, cls", [("independent", IndependentShape), ("speculative", SpeculativeShape),
                                       ("tree", TreeShape)])
def test_every_shape_keeps_the_contract(name, cls):
    shape = make_shape(RunConfig(rollout=RolloutConfig(shape=name)))
    assert isinstance(shape, cls) and shape.name == name
    for method in ("generate", "state_dict", "load_state_dict", "take_metrics"):
        assert callable(getattr(shape, method)), method
    shape.load_state_dict(shape.state_dict())  # a checkpoint's round trip


def test_independent_rows_are_the_backends(model, tokenizer, prompts):
    backend = HFBackend(model, tokenizer)
    rows = [p for p in prompts for _ in range(2)]
    keys = [k for k in range(len(prompts)) for _ in range(2)]
    seeds = [100 + k for k in keys]
    shaped = IndependentShape().generate(model, backend, rows, keys, SAMPLE, seeds, 0, tokenizer.pad_token_id)
    want = backend.generate(rows, SAMPLE, seeds=seeds)
    assert torch.equal(shaped.batch.tokens, want.tokens) and torch.equal(shaped.batch.lengths, want.lengths)
    assert shaped.columns is None and shaped.version_end is None and shaped.segments is None  # stored as null
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    unseeded = IndependentShape().generate(model, backend, rows, keys, SAMPLE, None, 0, tokenizer.pad_token_id,
                                           generator=g1)
    assert torch.equal(unseeded.batch.tokens, backend.generate(rows, SAMPLE, generator=g2).tokens)
    assert IndependentShape().take_metrics() == {}
