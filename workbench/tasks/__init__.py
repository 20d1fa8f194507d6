"""Verifiable tasks: the synthetic arithmetic task (the organism's default), file data sets (JSONL and
Parquet) and verifiers (exact match, math equivalence, user functions).

    task = get_task(ArithmeticTaskConfig(seed=0))     # or a dict: {"kind": "file", "path": ...}
    task.train_prompts(); task.eval_prompts()          # list[Prompt], disjoint
    task.verify(response, prompt)                      # VerifyResult(reward, verdict), never raises
    verify("so the answer is \\boxed{1/2}", "0.5", method="math")
"""

from __future__ import annotations

from typing import Any

from workbench.errors import ConfigError
from workbench.tasks.arithmetic import ArithmeticTask, ArithmeticTaskConfig
from workbench.tasks.base import Prompt, Task, VerifyResult
from workbench.tasks.files import FileTask, FileTaskConfig, LoadReport
from workbench.tasks.verifiers import Verifier, verify

TaskConfig = ArithmeticTaskConfig | FileTaskConfig
TASK_KINDS: dict[str, tuple[type, type]] = {
    "arithmetic": (ArithmeticTaskConfig, ArithmeticTask),
    "file": (FileTaskConfig, FileTask),
}


def task_config_from_dict(data: dict[str, Any]) -> TaskConfig:
    """The task config a plain dict describes; its "kind" (default "arithmetic") picks the class."""
    if not isinstance(data, dict):
        raise ConfigError(f"task: expected a table of fields, got {type(data).__name__}")
    kind = data.get("kind", "arithmetic")
    if kind not in TASK_KINDS:
        raise ConfigError(f"task.kind: {kind!r}; allowed: {', '.join(TASK_KINDS)}")
    return TASK_KINDS[kind][0].from_dict(data)


def get_task(cfg: TaskConfig | dict[str, Any] | None = None) -> Task:
    """The task for a config (a config dataclass, a plain dict, or None for the default arithmetic)."""
    if cfg is None:
        cfg = ArithmeticTaskConfig()
    elif isinstance(cfg, dict):
        cfg = task_config_from_dict(cfg)
    for config_cls, task_cls in TASK_KINDS.values():
        if isinstance(cfg, config_cls):
            return task_cls(cfg)
    raise ConfigError(f"task: unsupported config type {type(cfg).__name__}")


__all__ = [
    "ArithmeticTask",
    "ArithmeticTaskConfig",
    "FileTask",
    "FileTaskConfig",
    "LoadReport",
    "Prompt",
    "Task",
    "TaskConfig",
    "Verifier",
    "VerifyResult",
    "get_task",
    "task_config_from_dict",
    "verify",
]
