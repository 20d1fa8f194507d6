"""Rollout shapes: how a prompt's group is generated, beside how many rollouts it gets (the allocator).

- "independent" (`independent.py`): every rollout sampled on its own (the backend's `generate`; with the
  asynchronous pipeline's partial rollouts, continued across weight updates).
- "speculative" (`speculative.py`, SPEC-RL): the prompt's previous rollouts as drafts, verified in one
  teacher-forced pass of the current policy; `exact` (distributed as fresh sampling) or `lenient`
  (SPEC-RL's code).
- "tree" (`tree.py`, LATR; an entropy-branching variant): a group grown as a tree that branches where
  the policy is unsure, with lookahead pruning.
- "episodes" (`episodes.py`): each row a multi-turn episode in which the model calls the tools of
  `[tools]` and reads their results; tool-result tokens are masked out of the loss.

`make_shape(cfg, tokenizer)` builds the one a run asks for; the engine calls its `generate` (the `Shape`
protocol), whatever the shape: the one seam through which rows are made. A shape's `generate` returns a
`Shaped`: the GenerationBatch a backend would, the per-row columns the store keeps
(`SHAPE_COLUMNS`) and its figures for the step's metrics.
"""

from __future__ import annotations

from typing import Any

from workbench.rollout.shapes.common import SHAPE_COLUMNS, Shape, Shaped, empty_columns
from workbench.rollout.shapes.episodes import EpisodeShape
from workbench.rollout.shapes.independent import IndependentShape, WeightFeed
from workbench.rollout.shapes.speculative import SpeculativeShape
from workbench.rollout.shapes.tree import TreeShape


def make_shape(cfg: Any, tokenizer: Any = None) -> Shape:
    """The shape `rollout.shape` of the run config `cfg` names, with its settings (episodes: the run's
    `[tools]` and tokenizer)."""
    rollout_cfg = cfg.rollout
    if rollout_cfg.shape == "episodes":
        if tokenizer is None:
            raise ValueError("make_shape: the episodes shape needs the run's tokenizer")
        return EpisodeShape(rollout_cfg.episodes, cfg.tools, tokenizer, cfg.sampling.max_new_tokens)
    if rollout_cfg.shape == "speculative":
        return SpeculativeShape(rollout_cfg.speculative)
    if rollout_cfg.shape == "tree":
        return TreeShape(rollout_cfg.tree)
    return IndependentShape()


__all__ = ["SHAPE_COLUMNS", "EpisodeShape", "IndependentShape", "Shape", "Shaped", "SpeculativeShape", "TreeShape", "WeightFeed",
           "empty_columns", "make_shape"]
