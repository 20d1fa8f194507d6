"""Rollout allocators: how a step's rollout budget is spread over prompts.

One file per allocator, each registering itself with `register_allocator(name)`; the engine builds one
with `make_allocator(name, params, seed)` and never branches on its name. The protocol is in
`workbench/allocators/base.py`; the E3 temperature controller (combinable with any allocator) in
`workbench/allocators/temperature.py`; the offline simulator in `workbench/allocators/simulate.py`.
"""

from __future__ import annotations

from workbench.allocators.base import (
    Allocator,
    Budget,
    Candidate,
    Grant,
    GroupResult,
    PromptStats,
    StepContext,
    fit_to_budget,
)
from workbench.allocators.registry import (
    available_allocators,
    describe_allocator,
    get_allocator,
    make_allocator,
    make_config,
    register_allocator,
)

# Importing a module registers its allocator.
from workbench.allocators import (  # noqa: E402,F401  isort: skip
    uniform,
    dynamic_sampling,
    selective,
    multistage,
    until_correct,
    knapsack,
    rank_proportional,
    uncertainty,
    value_tracker,
    adaptive_stop,
)
from workbench.allocators.temperature import TemperatureConfig, TemperatureController  # noqa: E402

__all__ = [
    "Allocator",
    "Budget",
    "Candidate",
    "Grant",
    "GroupResult",
    "PromptStats",
    "StepContext",
    "TemperatureConfig",
    "TemperatureController",
    "available_allocators",
    "describe_allocator",
    "fit_to_budget",
    "get_allocator",
    "make_allocator",
    "make_config",
    "register_allocator",
]
