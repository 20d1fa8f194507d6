"""A few-second run config on the small test organism (8 prompts x 4 rollouts per step)."""

from __future__ import annotations

from workbench.config import RunConfig


def tiny_config(**over) -> RunConfig:
    from workbench.models.organism import small_recipe

    rec = small_recipe().to_dict()
    data = {
        "name": "tiny",
        "steps": 4,
        "model": {"organism": rec, "device": "cpu", "threads": 1},
        "task": dict(rec["task"], kind="arithmetic"),
        "allocator": {"budget": 32, "prompts_per_step": 8, "params": {"n": 4}},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "eval": {"every": 2, "samples": 4, "max_prompts": 12},
        "checkpoint": {"every": 2},
        "logging": {"heartbeat_s": 0.5},
    }
    for key, value in over.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return RunConfig.from_dict(data)
