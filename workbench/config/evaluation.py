"""`[eval]`: held-out evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check


@dataclass(frozen=True)
class EvalConfig:
    every: int = 40
    """Evaluate on the held-out split every this many steps (0: only before and after training)."""
    samples: int = 16
    """Samples per eval prompt (stored as samples, correct: pass@k for any k <= samples)."""
    temperature: float = 1.0
    """Sampling temperature of the eval samples."""
    max_prompts: int = 0
    """Evaluate on at most this many eval prompts (0: all)."""
    greedy: bool = True
    """Also record greedy correctness per eval prompt."""
    at_start: bool = True
    """Evaluate the initial policy (step 0) before training."""

    def __post_init__(self) -> None:
        check(self.every >= 0, "eval.every", "an integer >= 0 (0: start and end only)", self.every)
        check(self.samples >= 1, "eval.samples", "an integer >= 1", self.samples)
        check(self.temperature > 0, "eval.temperature", "a number > 0", self.temperature)
        check(self.max_prompts >= 0, "eval.max_prompts", "an integer >= 0 (0: all)", self.max_prompts)
