"""`until_correct` — AR3PO's adaptive rollout: sample in stages until a prompt has a correct response.

Paper: Zhang et al. 2025, "Improving Sampling Efficiency in RLVR through Adaptive Rollout and Response
Reuse" (arXiv:2509.25808), AR3PO.

Rule (departures from uniform GRPO):
1. Rollouts come in stages of `stage_size` per prompt; stage 1 goes to every candidate.
2. After each stage, a prompt stops receiving once its pooled group holds a correct response, or once it
   reached `n_max` rollouts this step; the others get another stage (at most `n_max` in total).
3. Response reuse (`reuse=True`): a group that ends all wrong, for a prompt answered correctly at an
   earlier step, is flagged through `reuse_requests`; the engine appends one earlier correct response of
   that prompt to the group, marked off-policy (`rollouts.off_policy`), so the group carries a signal.
4. Every group enters the update (a still all-wrong group carries no gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check_int
from workbench.allocators.base import Grant, GroupResult, StagedAllocator, StepContext
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class UntilCorrectConfig:
    stage_size: int = 4
    """Rollouts per prompt per stage (s)."""
    n_max: int = 16
    """Cap on a prompt's rollouts in one step."""
    reuse: bool = True
    """Ask the engine to append an earlier correct response to all-wrong groups (off-policy)."""

    def __post_init__(self) -> None:
        check_int("until_correct", "stage_size", self.stage_size, 1, 4096)
        check_int("until_correct", "n_max", self.n_max, self.stage_size, 65536)


@register_allocator("until_correct")
class UntilCorrect(StagedAllocator):
    Config = UntilCorrectConfig
    tag = "ar3po"

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self._solved_before: set[str] = set()

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        self._solved_before = {c.prompt_id for c in ctx.candidates if c.stats.correct > 0}
        return super().begin_step(ctx)

    def more(self, ctx: StepContext, prompt_id: str, group: GroupResult) -> tuple[str, float] | None:
        if group.correct > 0 or group.n >= self.config.n_max:
            return None
        return f"ar3po stage {self.stage}: no correct response in {group.n}", 0.0

    def reuse_requests(self, results: dict[str, GroupResult]) -> list[str]:
        if not self.config.reuse:
            return []
        return [
            pid for pid in self.order
            if pid in results and results[pid].n > 0 and results[pid].correct == 0 and pid in self._solved_before
        ]
