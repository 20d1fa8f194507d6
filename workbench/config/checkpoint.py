"""`[checkpoint]`: checkpoints (resume restarts from the last one)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 50
    """Write a checkpoint every this many steps (0: only at stop and at the end)."""
    keep: int = 2
    """Checkpoints kept per run (older ones are deleted)."""

    def __post_init__(self) -> None:
        check(self.every >= 0, "checkpoint.every", "an integer >= 0", self.every)
        check(self.keep >= 1, "checkpoint.keep", "an integer >= 1", self.keep)
