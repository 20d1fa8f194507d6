"""`[sampling]`: how rollouts are sampled."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    """Softmax temperature of the rollouts (> 0); the policy loss uses the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Sample among the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 8
    """Generated tokens per rollout at most (finish reason "length" beyond)."""

    def __post_init__(self) -> None:
        check(self.temperature > 0, "sampling.temperature", "a number > 0", self.temperature)
        check(0 < self.top_p <= 1, "sampling.top_p", "a number in (0, 1]", self.top_p)
        check(self.top_k >= 0, "sampling.top_k", "an integer >= 0 (0: off)", self.top_k)
        check(self.max_new_tokens >= 1, "sampling.max_new_tokens", "an integer >= 1", self.max_new_tokens)
