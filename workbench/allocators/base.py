"""The allocator protocol: how a step's rollout budget is spread over prompts.

Each training step the engine calls, in order:

1. `begin_step(ctx)` -> grants for the first stage. `ctx.candidates` are the prompts the sampler drew
   (as many as the allocator's `candidates_wanted(prompts_per_step)` asked for: it may ask for more
   than the batch), each with its `PromptStats`; `ctx.draw(n)` draws more prompts from the sampler
   mid-step (dynamic sampling).
2. The engine generates and scores the granted rollouts, then calls `next_stage(ctx, results)` with
   every group's results so far (all stages pooled per prompt). It returns more grants (a new stage)
   or [] to end the step.
3. After the last stage, `reuse_requests(results)` lists prompts whose all-wrong group should get one
   earlier correct response of that prompt appended (AR3PO's response reuse; default: none). The engine
   appends it (flagged off-policy in `rollouts.off_policy`) when it has one, before step 4.
4. `use_in_update(group)` says whether a pooled group enters the policy update (e.g. DARS drops groups
   with accuracy 0 or 1; dynamic sampling drops zero-variance groups). Dropped groups are logged.

A grant with `n == 0` is a logged decision (e.g. "skipped: easy streak 3"): nothing is generated for it.

Allocators are deterministic given their seed (`ctx.rng` is seeded by the engine from the run seed
and step), never exceed `ctx.budget` (the engine also enforces it), and give every grant a reason.
They can be switched or re-parameterised between steps by a control command: their parameters live
in a validated config dataclass (`Config`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Sequence

import numpy as np

from workbench.correctness import is_correct


def count_correct(rewards: Sequence[float], correct: Sequence[bool] | None = None) -> int:
    """Correct rollouts among `rewards`: their verdicts `correct` where given (position by position),
    else the default rule of `workbench.correctness` over the reward."""
    verdicts = list(correct or [])
    return sum(bool(verdicts[i]) if i < len(verdicts) else is_correct(r) for i, r in enumerate(rewards))


@dataclass
class PromptStats:
    """Per-prompt statistics shared by all allocators (persisted in `prompt_stats` every step)."""

    prompt_id: str
    alpha: float = 1.0
    """Beta posterior of the pass rate: 1 + (decayed) successes."""
    beta: float = 1.0
    """Beta posterior of the pass rate: 1 + (decayed) failures."""
    visits: int = 0
    """Steps in which the prompt received at least one rollout."""
    rollouts: int = 0
    """Rollouts received in total."""
    correct: int = 0
    """Correct rollouts in total (the verifier's verdicts, see `workbench.correctness`)."""
    easy_streak: int = 0
    """Consecutive visits whose group was all correct."""
    hard_streak: int = 0
    """Consecutive visits whose group was all wrong."""
    last_step: int = -1
    """Last step the prompt received rollouts (-1: never)."""
    last_pass: float | None = None
    """Observed pass rate at the last visit."""
    mean_tokens: float | None = None
    """Running mean of generated tokens per rollout (for token budgets)."""

    @property
    def mean(self) -> float:
        """Posterior mean pass rate."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def seen(self) -> bool:
        return self.visits > 0

    def update(self, rewards: Sequence[float], step: int, tokens: int = 0, decay: float = 1.0,
               correct: Sequence[bool] | None = None) -> None:
        """Fold one visit's rewards in (decay < 1 forgets older evidence). `correct`: the verdicts of
        the rollouts (default: the default rule over `rewards`)."""
        n = len(rewards)
        if n == 0:
            return
        c = count_correct(rewards, correct)
        self.alpha = 1.0 + decay * (self.alpha - 1.0) + c
        self.beta = 1.0 + decay * (self.beta - 1.0) + (n - c)
        self.visits += 1
        self.rollouts += n
        self.correct += c
        self.easy_streak = self.easy_streak + 1 if c == n else 0
        self.hard_streak = self.hard_streak + 1 if c == 0 else 0
        self.last_step = step
        self.last_pass = c / n
        if tokens:
            per = tokens / n
            self.mean_tokens = per if self.mean_tokens is None else 0.9 * self.mean_tokens + 0.1 * per


@dataclass(frozen=True)
class Budget:
    """The budget in force for one step."""

    kind: Literal["rollouts", "tokens"]
    """Rollouts per step, or generated tokens per step."""
    amount: int
    """The total for the step."""
    used: int = 0
    """Already spent this step (rollouts granted, or tokens generated)."""
    tokens_per_rollout: float = 16.0
    """Estimate of generated tokens per rollout (for converting a token budget into rollouts)."""

    @property
    def left(self) -> int:
        return max(0, self.amount - self.used)

    def rollouts_left(self) -> int:
        """How many more rollouts fit."""
        if self.kind == "rollouts":
            return self.left
        return int(math.floor(self.left / max(self.tokens_per_rollout, 1e-9)))


@dataclass(frozen=True)
class Candidate:
    prompt_id: str
    stats: PromptStats
    level: int | None = None


@dataclass(frozen=True)
class Grant:
    """`n` more rollouts for one prompt in one stage, and why."""

    prompt_id: str
    n: int
    reason: str
    predicted_pass: float | None = None


@dataclass
class GroupResult:
    """One prompt's rewards this step, all stages pooled, in generation order."""

    prompt_id: str
    rewards: list[float]
    tokens: int = 0
    stages: list[int] = field(default_factory=list)
    oks: list[bool] = field(default_factory=list)
    """The verifier's verdict of each rollout, in the order of `rewards` (a reward without one is
    judged by the default rule of `workbench.correctness`)."""

    @property
    def n(self) -> int:
        return len(self.rewards)

    @property
    def correct(self) -> int:
        return count_correct(self.rewards, self.oks)

    @property
    def has_signal(self) -> bool:
        """True when the rewards vary (a zero-variance group carries no GRPO gradient)."""
        return len(set(self.rewards)) > 1


@dataclass
class StepContext:
    """Everything an allocator may look at while deciding one step."""

    step: int
    stage: int
    budget: Budget
    candidates: list[Candidate]
    stats: dict[str, PromptStats]
    rng: np.random.Generator
    draw: Callable[[int], list[Candidate]]
    """Draw n more candidate prompts from the sampler (for allocators that top up mid-step)."""
    prompts_per_step: int
    """The configured batch of prompts (B)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Allocator-reported metrics for this step (logged as alloc/<key>)."""


class Allocator(ABC):
    """Base class: subclasses set `name`, `Config` and implement `begin_step`."""

    name: ClassVar[str]
    Config: ClassVar[type]
    reads_history: ClassVar[bool] = True
    """Whether its decisions (which prompts, how many rollouts, which groups enter the update) read a
    prompt's rewards of earlier steps (`PromptStats`); False only where they read this step's results
    alone. Exact speculative rollouts warn with such an allocator (`workbench.config.shapes.history_warning`)."""

    def __init__(self, config: Any | None = None, *, seed: int = 0) -> None:
        self.config = config if config is not None else self.Config()
        self.seed = seed

    def candidates_wanted(self, prompts_per_step: int) -> int:
        """How many candidate prompts the sampler should draw for the step."""
        return prompts_per_step

    @abstractmethod
    def begin_step(self, ctx: StepContext) -> list[Grant]:
        """Grants for the first stage."""

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        """Grants for another stage given all results so far; [] ends the step."""
        return []

    def use_in_update(self, group: GroupResult) -> bool:
        """Whether a pooled group enters the policy update."""
        return True

    def reuse_requests(self, results: dict[str, GroupResult]) -> list[str]:
        """Prompt ids whose all-wrong group should get one earlier correct response appended (off-policy)."""
        return []

    def set_params(self, params: dict[str, Any]) -> None:
        """Change some config fields (a live control); unknown or ill-typed fields raise ConfigError
        naming the field and nothing changes. State (trackers, streak probabilities) is kept."""
        from workbench.allocators._config import config_from_dict

        self.config = config_from_dict(type(self.config), params, base=self.config)

    def state_dict(self) -> dict[str, Any]:
        """Allocator state to checkpoint (JSON-serialisable)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


def fit_to_budget(grants: list[Grant], budget: Budget) -> list[Grant]:
    """Trim grants, last first, so that their total fits `budget.rollouts_left()`; the safety net every
    allocator applies to what it returns. A trimmed grant (to 0 or not) keeps its reason with
    " (cut to N by budget)" appended."""
    left = budget.rollouts_left()
    out: list[Grant] = []
    for g in grants:
        n = max(0, min(int(g.n), left))
        left -= n
        if n != g.n:
            g = Grant(g.prompt_id, n, f"{g.reason} (cut to {n} by budget)", g.predicted_pass)
        out.append(g)
    return out


def whole_groups(ctx: StepContext, n: int, tag: str) -> list[Grant]:
    """A first stage: `n` rollouts for each candidate in sampler order while whole groups fit, 0 (with
    the reason "budget exhausted") after that; fitted to the budget."""
    left = ctx.budget.rollouts_left()
    grants = []
    for c in ctx.candidates:
        if left >= n:
            grants.append(Grant(c.prompt_id, n, f"{tag}: group of {n}", c.stats.mean))
            left -= n
        else:
            grants.append(Grant(c.prompt_id, 0, f"{tag}: budget exhausted ({left} left < {n})", c.stats.mean))
    return fit_to_budget(grants, ctx.budget)


class StagedAllocator(Allocator):
    """The skeleton of allocators that sample a step in stages until each prompt is settled
    (`adaptive_stop`, `until_correct`): stage 1 gives whole groups of `config.stage_size` in sampler
    order (`whole_groups`, reasons "<tag> stage 1: ..."); each later stage gives another `stage_size`
    rollouts (up to `config.n_max` in the step) to every prompt of stage 1 for which `more` gives a
    reason; the step ends when none gets one or the budget is spent. `ctx.info["stages"]` gets the
    number of stages that granted rollouts. Subclasses set `tag` and implement `more`."""

    tag: ClassVar[str]
    """Opens every grant's reason ("ar3po" -> "ar3po stage 2: ...")."""

    def __init__(self, config: Any | None = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self.order: list[str] = []
        """The prompts stage 1 gave rollouts, in sampler order."""
        self.stage = 0
        """The stage being granted."""

    @abstractmethod
    def more(self, ctx: StepContext, prompt_id: str, group: GroupResult) -> tuple[str, float | None] | None:
        """(reason, predicted pass rate) when the prompt should get more rollouts, None when it is settled."""

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        grants = whole_groups(ctx, self.config.stage_size, f"{self.tag} stage 1")
        self.order = [g.prompt_id for g in grants if g.n > 0]
        self.stage = 1
        return grants

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        c = self.config
        self.stage += 1
        grants = []
        for pid in self.order:
            g = results.get(pid)
            want = None if g is None else self.more(ctx, pid, g)
            if want is not None:
                grants.append(Grant(pid, min(c.stage_size, c.n_max - g.n), *want))
        grants = [g for g in fit_to_budget(grants, ctx.budget) if g.n > 0]
        ctx.info.update(stages=self.stage if grants else self.stage - 1)
        return grants
