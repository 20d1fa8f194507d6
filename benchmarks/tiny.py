"""The tiny run: the small model organism (built in seconds), 8 prompts x 4 rollouts a step, one torch
thread, a step of a few seconds on a CPU. The benchmarks' live runs (`bench badinput`, `bench soak`)
and the test suite start from it and change only what they need; the small organism is built once
per machine in one shared place.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

SMALL_ORGANISMS = Path(tempfile.gettempdir()) / "workbench-test-organisms"
"""Where the small organism is built once per machine and reused: its folder is named by the
recipe's hash, so a copy built from another recipe is never picked up."""


def small_organism_models(root: str | Path = SMALL_ORGANISMS) -> Path:
    """The `models/` folder under `root` holding the small organism, built there when missing (a
    store finds it when this folder is linked in as the store's own `models/`)."""
    from workbench.models.organism import ensure_organism, small_recipe

    ensure_organism(root, small_recipe())
    return Path(root) / "models"


def small_tools_recipe() -> Any:
    """The small organism of the "tools" task (episodes' tests): two levels, an addition it learns and
    a multiplication it cannot compute in its head, warm-started to call the calculator in half of its
    examples (seconds to build)."""
    from workbench.models.organism import small_recipe
    from workbench.tasks.arithmetic import ArithmeticTaskConfig

    return small_recipe(task=ArithmeticTaskConfig(profile="tools", levels=("1+1", "2*2"), train_size=300,
                                                  eval_per_level=8), max_positions=48, tool_share=0.5)


def small_tools_models(root: str | Path = SMALL_ORGANISMS) -> Path:
    """The shared `models/` folder (`small_organism_models`'), the small tools organism built in it too."""
    from workbench.models.organism import ensure_organism

    ensure_organism(root, small_tools_recipe())
    return Path(root) / "models"


TINY_EPISODES = {"rollout.shape": "episodes", "sampling.max_new_tokens": 12,
                 "rollout.episodes": {"max_turns": 3, "max_model_tokens": 30, "max_total_tokens": 44},
                 "tools": {"enabled": ["calculator"], "syntax": "calc", "max_calls": 2}}
"""The tiny episodes run's settings (`tiny_run(..., tools=True)`)."""


def tiny_run(overrides: dict[str, Any] | None = None, *, tools: bool = False) -> Any:
    """The tiny run's validated RunConfig. `overrides` uses dotted keys as `resolve_config` does
    (`{"eval.every": 0, "steps": 4}`; a whole section given as a dict replaces that section).
    `tools`: the small tools organism running episodes with the calculator (`TINY_EPISODES`).
    ConfigError names a bad field."""
    from workbench.control.launch import resolve_config
    from workbench.models.organism import small_recipe

    rec = (small_tools_recipe() if tools else small_recipe()).to_dict()
    overrides = {**TINY_EPISODES, **(overrides or {})} if tools else overrides
    base = {
        "name": "tiny",
        "steps": 3,
        "model": {"organism": rec, "device": "cpu", "threads": 1},
        "task": dict(rec["task"], kind="arithmetic"),
        "allocator": {"budget": 32, "prompts_per_step": 8, "params": {"n": 4}},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "eval": {"every": 2, "samples": 4, "max_prompts": 12},
        "checkpoint": {"every": 2},
        "logging": {"heartbeat_s": 0.5},
    }
    return resolve_config(base, overrides or {})


def shared_smollm2(root: str | Path = SMALL_ORGANISMS) -> Path:
    """SmolLM2-135M-Instruct converted once per machine into the same shared `models/` folder as the
    small organism (about a minute, once), so every store that links that folder finds it too."""
    from workbench.models.sources import ensure_smollm2

    return ensure_smollm2(root)
