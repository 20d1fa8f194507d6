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
    weights_every: int = 0
    """Also write a weights-only snapshot (`weights-NNNNNN.pt`: the policy's weights, no optimiser state)
    every this many steps, for comparing checkpoints in the Playground (`workbench sample`); all are kept
    and a run never resumes from one (0: none). A SmolLM2-135M snapshot is ~0.5 GB in float32, a full
    checkpoint with AdamW's state ~1.6 GB."""

    def __post_init__(self) -> None:
        check(self.every >= 0, "checkpoint.every", "an integer >= 0", self.every)
        check(self.keep >= 1, "checkpoint.keep", "an integer >= 1", self.keep)
        check(self.weights_every >= 0, "checkpoint.weights_every", "an integer >= 0 (0: none)", self.weights_every)
