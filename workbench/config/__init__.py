"""The configuration of a run: frozen dataclasses, loaded from TOML, validated before anything starts.

Every field carries an attribute docstring; that text is what `workbench config show` prints and what
`docs/configs.md` documents. Loading rejects unknown keys, wrong types and out-of-range values with a
`ConfigError` naming the field (`optim.lr`) and what is allowed.

    cfg = load_config("configs/organism.toml", overrides=["optim.lr=5e-5", "steps=10"])
    cfg.to_dict()                       # what the store keeps in runs.config
    RunConfig.from_dict(cfg.to_dict())  # round trip

One module per section: `run` (RunConfig, loading, the checks across sections), `model` ([model]),
`sampling`, `allocator`, `algorithm`, `optim`, `evaluation` ([eval]), `checkpoint`, `store` ([logging]
and [store]), `rollout`, `shapes` ([rollout.speculative], [rollout.tree]) and `pipeline`. Two sections
live with the parts below this layer that read them, so that no lower layer imports this package:
`[rewards]` in `workbench/tasks/reward_config.py` and `[[guards]]` in `workbench/guards/config.py`.
"""

from __future__ import annotations

from workbench.config.algorithm import AlgorithmConfig
from workbench.config.allocator import AllocatorConfig
from workbench.config.checkpoint import CheckpointConfig
from workbench.config.evaluation import EvalConfig
from workbench.config.model import ModelConfig
from workbench.config.optim import OptimConfig
from workbench.config.pipeline import PipelineConfig
from workbench.config.rollout import RolloutConfig
from workbench.config.run import RunConfig, apply_overrides, config_warnings, load_config, task_config
from workbench.config.sampling import SamplingConfig
from workbench.config.shapes import SpeculativeConfig, TreeConfig
from workbench.config.store import LoggingConfig, StoreConfig
from workbench.docstrings import field_docs
from workbench.guards.config import GuardConfig
from workbench.tasks.reward_config import RewardsConfig

__all__ = [
    "RunConfig", "ModelConfig", "SamplingConfig", "AllocatorConfig", "AlgorithmConfig",
    "OptimConfig", "EvalConfig", "CheckpointConfig", "LoggingConfig", "load_config", "apply_overrides",
    "field_docs",
]
