"""A few-second run config on the small test organism (8 prompts x 4 rollouts per step): the engine
tests' config, with 4 steps and one torch thread by default."""

from __future__ import annotations

from tests.engine.conftest import _tiny_config
from workbench.config import RunConfig


def tiny_config(**over) -> RunConfig:
    return _tiny_config(**{"steps": 4, "model__threads": 1, **over})
