"""`adaptive_stop` — Adaptive-Consistency turned to RLVR: sample in small stages and stop a prompt as
soon as more samples would not change what its group teaches.

Paper: Aggarwal et al. 2023, "Let's Sample Step by Step: Adaptive-Consistency for Efficient Reasoning
and Coding with LLMs" (EMNLP 2023, arXiv:2305.11860): sample one at a time and stop once a Beta/
Dirichlet posterior says the majority answer is settled. Here the question is not "which answer wins"
but "will this group carry a GRPO signal".

Rule (departures from uniform GRPO):
1. Rollouts come in stages of `stage_size` per prompt; stage 1 goes to every candidate.
2. After each stage a prompt stops when
   a. its pooled group already holds both a correct and a wrong response (informative), or
   b. its posterior Beta(a0 + c, b0 + n - c) gives P(p >= `p_trivial`) >= `confidence` (trivial), or
   c. it gives P(p <= `p_hopeless`) >= `confidence` (hopeless), or
   d. it reached `n_max` rollouts this step.
   a0, b0 are the shared `PromptStats` posterior, its evidence scaled by `prior_weight`
   (a0 = 1 + prior_weight * (alpha - 1), likewise b0); c of n correct this step.
3. Every group enters the update.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check_float, check_int
from workbench.allocators._stats import beta_cdf
from workbench.allocators.base import GroupResult, StagedAllocator, StepContext
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class AdaptiveStopConfig:
    stage_size: int = 2
    """Rollouts per prompt per stage."""
    n_max: int = 16
    """Most rollouts a prompt gets in one step."""
    p_trivial: float = 0.9
    """A prompt whose pass rate is at least this is trivial."""
    p_hopeless: float = 0.1
    """A prompt whose pass rate is at most this is hopeless."""
    confidence: float = 0.9
    """Posterior probability needed to stop a prompt as trivial or hopeless."""
    prior_weight: float = 1.0
    """Weight of the evidence from earlier steps (0: only this step's samples)."""

    def __post_init__(self) -> None:
        o = "adaptive_stop"
        check_int(o, "stage_size", self.stage_size, 1, 4096)
        check_int(o, "n_max", self.n_max, self.stage_size, 65536)
        check_float(o, "p_hopeless", self.p_hopeless, 0.0, 1.0, lo_open=True, hi_open=True)
        check_float(o, "p_trivial", self.p_trivial, self.p_hopeless, 1.0, lo_open=True, hi_open=True)
        check_float(o, "confidence", self.confidence, 0.5, 1.0, lo_open=True)
        check_float(o, "prior_weight", self.prior_weight, 0.0, 1.0)


@register_allocator("adaptive_stop")
class AdaptiveStop(StagedAllocator):
    Config = AdaptiveStopConfig
    tag = "adaptive"

    def stop_reason(self, g: GroupResult, stats) -> str | None:
        """Why this prompt gets no more rollouts this step (None: keep sampling)."""
        c = self.config
        if 0 < g.correct < g.n:
            return "informative"
        if g.n >= c.n_max:
            return "cap"
        a0 = 1.0 + c.prior_weight * ((stats.alpha if stats else 1.0) - 1.0)
        b0 = 1.0 + c.prior_weight * ((stats.beta if stats else 1.0) - 1.0)
        a, b = a0 + g.correct, b0 + g.n - g.correct
        if 1.0 - beta_cdf(c.p_trivial, a, b) >= c.confidence:
            return "trivial"
        if beta_cdf(c.p_hopeless, a, b) >= c.confidence:
            return "hopeless"
        return None

    def more(self, ctx: StepContext, prompt_id: str, group: GroupResult) -> tuple[str, float] | None:
        if self.stop_reason(group, ctx.stats.get(prompt_id)) is not None:
            return None
        return (f"adaptive stage {self.stage}: {group.correct}/{group.n} correct, undecided",
                (group.correct + 1) / (group.n + 2))
