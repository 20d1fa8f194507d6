"""`selective` — GRESO: skip, before rollout, prompts whose recent groups carried no signal.

Paper: Zheng et al. 2025, "Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning
via Selective Rollouts" (arXiv:2506.02177), Algorithm 1 (GRESO).

Rule (departures from uniform GRPO):
1. Before rollout, a prompt with a streak of z consecutive zero-variance visits is skipped with
   probability 1 - max(p^z, `min_keep_prob`), where p is `p_easy` for an all-correct streak and `p_hard`
   for an all-wrong one. A prompt never seen (or with no streak) is never skipped.
2. Skipped prompts are replaced by drawing more candidates (up to `max_draws` extra draws) until B
   prompts are kept; each kept prompt gets a group of `n`. Skips are logged as grants of 0.
3. After each step, with zero-variance shares e (all correct) and h (all wrong) among its groups:
   p_easy moves by `p_step` down when e > target * easy_share, else up; p_hard likewise against
   target * (1 - easy_share). Both start at `p_init` and stay in [p_min, p_max].
4. Zero-variance groups that still got through are dropped from the update (GRESO runs on DAPO).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check_float, check_int
from workbench.allocators.base import Allocator, Candidate, Grant, GroupResult, StepContext, fit_to_budget
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class SelectiveConfig:
    n: int = 8
    """Rollouts per kept prompt (group size)."""
    p_init: float = 0.5
    """Starting value of both p_easy and p_hard."""
    p_step: float = 0.01
    """How far p_easy and p_hard move each step toward the target."""
    target_zero_frac: float = 0.25
    """Target share of zero-variance groups per step."""
    easy_share: float = 1 / 3
    """Part of the target given to all-correct groups (the rest to all-wrong ones)."""
    p_min: float = 0.05
    """Lower clamp of p_easy and p_hard."""
    p_max: float = 0.95
    """Upper clamp of p_easy and p_hard."""
    min_keep_prob: float = 0.01
    """A streak prompt is kept with probability at least this (never skipped for sure)."""
    max_draws: int = 4
    """Extra candidate draws per step to replace skipped prompts."""
    drop_zero_variance: bool = True
    """Drop zero-variance groups from the update (as DAPO's filter does)."""

    def __post_init__(self) -> None:
        o = "selective"
        check_int(o, "n", self.n, 1, 4096)
        check_float(o, "p_min", self.p_min, 0.0, 1.0, lo_open=True)
        check_float(o, "p_max", self.p_max, self.p_min, 1.0)
        check_float(o, "p_init", self.p_init, self.p_min, self.p_max)
        check_float(o, "p_step", self.p_step, 0.0, 0.5)
        check_float(o, "target_zero_frac", self.target_zero_frac, 0.0, 1.0)
        check_float(o, "easy_share", self.easy_share, 0.0, 1.0)
        check_float(o, "min_keep_prob", self.min_keep_prob, 0.0, 1.0)
        check_int(o, "max_draws", self.max_draws, 0, 1000)


@register_allocator("selective")
class Selective(Allocator):
    Config = SelectiveConfig

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self.p_easy = self.config.p_init
        self.p_hard = self.config.p_init

    def keep_probability(self, c: Candidate) -> tuple[float, str]:
        """Probability of rolling out this prompt, and why."""
        s = c.stats
        if not s.seen:
            return 1.0, "never seen"
        if s.easy_streak > 0:
            p, z, kind = self.p_easy, s.easy_streak, "easy"
        elif s.hard_streak > 0:
            p, z, kind = self.p_hard, s.hard_streak, "hard"
        else:
            return 1.0, "no zero-variance streak"
        keep = max(p**z, self.config.min_keep_prob)
        return keep, f"{kind} streak {z}, p_{kind}={p:.2f}, keep prob {keep:.3f}"

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        n, batch = self.config.n, ctx.prompts_per_step
        slots = min(batch, ctx.budget.rollouts_left() // n)
        grants: list[Grant] = []
        kept = skipped = 0
        pool, draws = list(ctx.candidates), 0
        while True:
            for c in pool:
                if kept >= slots:
                    why = "batch full" if slots == batch else f"budget exhausted (room for {slots} groups of {n})"
                    grants.append(Grant(c.prompt_id, 0, f"greso: {why}", c.stats.mean))
                    continue
                prob, why = self.keep_probability(c)
                if prob >= 1.0 or ctx.rng.random() < prob:
                    kept += 1
                    grants.append(Grant(c.prompt_id, n, f"greso: kept ({why})", c.stats.mean))
                else:
                    skipped += 1
                    grants.append(Grant(c.prompt_id, 0, f"greso: skipped ({why})", c.stats.mean))
            if kept >= slots or draws >= self.config.max_draws:
                break
            pool, draws = ctx.draw(slots - kept), draws + 1
            if not pool:
                break
        ctx.info.update(skipped=skipped, p_easy=self.p_easy, p_hard=self.p_hard, draws=draws)
        return fit_to_budget(grants, ctx.budget)

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        groups = [g for g in results.values() if g.n > 0]
        if groups:
            self.update_probabilities(
                easy=sum(g.correct == g.n for g in groups) / len(groups),
                hard=sum(g.correct == 0 for g in groups) / len(groups),
            )
        ctx.info.update(p_easy=self.p_easy, p_hard=self.p_hard)
        return []

    def update_probabilities(self, easy: float, hard: float) -> None:
        """Move p_easy / p_hard one step toward the target zero-variance shares."""
        c = self.config
        target_easy = c.target_zero_frac * c.easy_share
        target_hard = c.target_zero_frac * (1.0 - c.easy_share)
        self.p_easy += -c.p_step if easy > target_easy else c.p_step
        self.p_hard += -c.p_step if hard > target_hard else c.p_step
        self.p_easy = min(max(self.p_easy, c.p_min), c.p_max)
        self.p_hard = min(max(self.p_hard, c.p_min), c.p_max)

    def use_in_update(self, group: GroupResult) -> bool:
        return group.has_signal or not self.config.drop_zero_variance

    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard}

    def load_state_dict(self, state: dict) -> None:
        self.p_easy = float(state["p_easy"])
        self.p_hard = float(state["p_hard"])
