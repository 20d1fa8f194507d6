"""Rollout shapes: how a prompt's group is generated, beside how many rollouts it gets (the allocator).

- "independent": every rollout sampled on its own (the backend's `generate`; no shape object).
- "speculative" (`speculative.py`, SPEC-RL): the prompt's previous rollouts as drafts, verified in one
  teacher-forced pass of the current policy; `exact` (distributed as fresh sampling) or `lenient`
  (SPEC-RL's code).
- "tree" (`tree.py`, LATR; an entropy-branching variant): a group grown as a tree that branches where
  the policy is unsure, with lookahead pruning.

`make_shape(rollout_cfg)` builds the one a run asks for (None: independent). A shape's `generate`
returns a `Shaped`: the GenerationBatch a backend would, the per-row columns the store keeps
(`SHAPE_COLUMNS`) and its figures for the step's metrics.
"""

from __future__ import annotations

from typing import Any

from workbench.rollout.shapes.common import SHAPE_COLUMNS, Shaped, empty_columns
from workbench.rollout.shapes.speculative import SpeculativeShape
from workbench.rollout.shapes.tree import TreeShape


def make_shape(rollout_cfg: Any) -> SpeculativeShape | TreeShape | None:
    """The shape `rollout.shape` names, with its settings; None for "independent"."""
    if rollout_cfg.shape == "speculative":
        return SpeculativeShape(rollout_cfg.speculative)
    if rollout_cfg.shape == "tree":
        return TreeShape(rollout_cfg.tree)
    return None


__all__ = ["SHAPE_COLUMNS", "Shaped", "SpeculativeShape", "TreeShape", "empty_columns", "make_shape"]
