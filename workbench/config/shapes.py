"""The rollout shapes' settings: `rollout.shape` and the `[rollout.speculative]`, `[rollout.tree]` and
`[rollout.episodes]` tables (`docs/rollout-shapes.md` describes each shape against its paper,
`docs/episodes.md` the episodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.checks import check

@dataclass(frozen=True)
class SpeculativeConfig:
    """SPEC-RL's speculative rollouts: a prompt's rollouts of its previous visit are drafts, verified in one
    teacher-forced pass of the current policy (docs/rollout-shapes.md)."""

    mode: Literal["exact", "lenient"] = "exact"
    """"exact": accept a draft token x with probability min(1, p_new(x) / p_old(x)) and draw the first
    rejected position from the residual norm(max(0, p_new - p_old)): every rollout is distributed as
    a fresh sample of the current policy. "lenient": SPEC-RL's code: accept with probability
    min(1, e^spec_bias * p_new(x) / p_old(x)), drop the first rejected token and sample the rest fresh
    (more reuse, not the current policy's distribution)."""
    spec_bias: float = 0.5
    """Lenient mode's log-lenience: l = e^spec_bias (SPEC-RL's GRPO run: 0.5; 0 is l = 1, still
    without the residual). Ignored in exact mode (l = 1)."""

    max_draft_mb: float = 4096.0
    """Exact mode keeps, besides one float per draft token, a copy of the weights of each policy version
    that still has drafts (its residual needs p_old's row at the first rejected position, recomputed with
    them; SmolLM2-135M in float32: 538 MB a version); past this many megabytes the oldest version's
    weights are dropped with its drafts (their prompts' rows then sample independently;
    `rollout/shape/drafts_dropped` counts them)."""

    def __post_init__(self) -> None:
        check(self.max_draft_mb > 0, "rollout.speculative.max_draft_mb", "a number > 0 (megabytes)",
              self.max_draft_mb)
        check(0 <= self.spec_bias <= 5, "rollout.speculative.spec_bias", "a number in [0, 5]", self.spec_bias)


@dataclass(frozen=True)
class TreeConfig:
    """LATR's tree rollouts (defaults: its math scripts), or the entropy-branching variant
    (docs/rollout-shapes.md)."""

    criterion: Literal["latr", "entropy"] = "latr"
    """Where a row branches. "latr": LATR's rule over the top 2 tokens of the temperature-1 softmax
    (p_2 > tau_abs and p_1 - p_2 < tau_rel), rows greedy inside the tree. "entropy": ARPO / TreeRL
    style, where the temperature-1 entropy exceeds `entropy_threshold`, rows sampled inside the tree."""
    tau_abs: float = 0.15
    """LATR: the rank-2 token's probability must exceed this (math: 0.15)."""
    tau_rel: float = 0.25
    """LATR: p_1 - p_2 must be below this (math: 0.25; the code's direction since Jan 2026)."""
    entropy_threshold: float = 1.0
    """Entropy criterion: branch where the temperature-1 entropy (nats) exceeds this."""
    prune_steps: tuple[int, ...] = (20, 30, 50)
    """Lookahead: a branch this many tokens old is compared with its parent (math: 20, 30, 50)."""
    suffix_match: float = 0.2
    """Prune a branch whose suffix match with its parent over the window exceeds this (math: 0.2)."""
    rouge_l: float = 0.5
    """Prune a branch whose ROUGE-L with its parent over the window exceeds this (math: 0.5)."""
    eta_steps: tuple[int, ...] = (0, 100, 200, 300)
    """Training steps at which the tree's share of a group changes (math: 0, 100, 200, 300)."""
    eta_values: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)
    """eta from each of `eta_steps` on: a group of n grows round(n * eta) rows as a tree, the rest
    plainly (math: 1, 0.75, 0.5, 0.25)."""

    def __post_init__(self) -> None:
        w = "rollout.tree."
        check(0 <= self.tau_abs < 1, w + "tau_abs", "a number in [0, 1)", self.tau_abs)
        check(0 < self.tau_rel <= 1, w + "tau_rel", "a number in (0, 1]", self.tau_rel)
        check(self.entropy_threshold >= 0, w + "entropy_threshold", "a number >= 0 (nats)", self.entropy_threshold)
        check(all(r >= 1 for r in self.prune_steps), w + "prune_steps", "integers >= 1 (tokens)", self.prune_steps)
        check(0 <= self.suffix_match <= 1, w + "suffix_match", "a number in [0, 1]", self.suffix_match)
        check(0 <= self.rouge_l <= 1, w + "rouge_l", "a number in [0, 1]", self.rouge_l)
        check(len(self.eta_steps) >= 1 and len(self.eta_steps) == len(self.eta_values), w + "eta_values",
              "as many values as eta_steps (at least one)", self.eta_values)
        check(list(self.eta_steps) == sorted(set(self.eta_steps)) and self.eta_steps[0] == 0, w + "eta_steps",
              "increasing training steps starting at 0", self.eta_steps)
        check(all(0 <= v <= 1 for v in self.eta_values), w + "eta_values", "shares in [0, 1]", self.eta_values)


@dataclass(frozen=True)
class EpisodesConfig:
    """Multi-turn episodes with tool calls (rollout.shape = "episodes"; the tools themselves, the call
    syntax and the calls an episode may make: `[tools]`). The first limit an episode reaches ends it,
    and its finish reason names the limit (docs/episodes.md)."""

    max_turns: int = 4
    """Assistant turns per episode (finish reason `turns`), 1-64."""
    turn_tokens: int = 0
    """Tokens the model may sample in one assistant turn (finish reason `length`); 0: `sampling.max_new_tokens`."""
    max_model_tokens: int = 64
    """Tokens the model samples over the whole episode (finish reason `model_tokens`); what a token budget
    counts."""
    max_total_tokens: int = 128
    """Model tokens plus tool-result tokens (finish reason `total_tokens`): the longest row the update sees."""
    roc_oversample: int = 1
    """GRPO-RoC (rStar2-Agent): sample this many times the episodes the allocator grants a prompt, keep as many as
    it granted (correct ones with the lowest penalty, wrong ones a uniform sample, in proportion); the others are
    stored, marked dropped, never trained on (docs/episode-allocation.md). 1: off, 2: the paper's, at most 8."""
    roc_min_correct: int = 2
    """GRPO-RoC: correct episodes kept at least, when that many were sampled (rStar's min_non_zero_reward_trace_num)."""
    roc_min_wrong: int = 2
    """GRPO-RoC: wrong episodes kept at least, when that many were sampled (rStar's min_zero_reward_trace_num)."""
    arpo_branch: bool = False
    """ARPO: grow each prompt's group from `arpo_initial` of it sampled whole, branching episodes after tool
    results where the entropy rose (docs/episode-allocation.md); the shortfall is filled with whole episodes.
    Off: every episode sampled whole (the uniform run)."""
    arpo_initial: float = 0.5
    """ARPO: share of a prompt's group sampled as whole episodes first (the code's 8 of 16), at least one."""
    arpo_window: int = 20
    """ARPO: tokens of a turn whose entropies are summed (over ln |V|) for the branch rule (the code's 20)."""
    arpo_alpha: float = 0.2
    """ARPO: weight of the entropy change in the branch draw: branch when clip(u - alpha * dH, 0, 1) <= threshold."""
    arpo_threshold: float = 0.5
    """ARPO: the branch draw's threshold (the code's branch_probability, 0.5); AEPO's rule uses it too."""
    arpo_advantage: Literal["soft", "hard"] = "soft"
    """ARPO's credit of a branch's shared prefix (ARPO or AEPO branching): "soft" (the code's): each row trained
    with its own advantage; "hard" (the paper's alternative): a token shared by k branches gets, in each of them,
    the mean advantage of the k (docs/episode-allocation.md)."""
    aepo_branch: bool = False
    """AEPO (arXiv 2510.14545): ARPO's branching with AEPO's rollout: the split between whole episodes and branch
    slots chosen per prompt from a probe episode (`aepo_split`), and the branch rule with the consecutive-branch
    penalty (`aepo_penalty`); window, alpha and threshold are ARPO's settings. Not with `arpo_branch`."""
    aepo_split: bool = True
    """AEPO: choose each prompt's whole episodes m = min(n, int(n * sigmoid(aepo_beta * (H_root - mean H_tool))) + 1)
    from one probe episode (AEPO's code); off: ARPO's fixed `arpo_initial`."""
    aepo_beta: float = 0.5
    """AEPO: the split's temperature beta (the code's 0.5)."""
    aepo_penalty: float = 0.05
    """AEPO: branch when (u + alpha * dH) * (1 - aepo_penalty * c) >= threshold, c the prompt's consecutive
    branching rounds (the code's 0.05)."""

    def __post_init__(self) -> None:
        w = "rollout.episodes."
        check(1 <= self.roc_oversample <= 8, w + "roc_oversample", "an integer in [1, 8] (1: off)", self.roc_oversample)
        check(self.roc_min_correct >= 0, w + "roc_min_correct", "an integer >= 0", self.roc_min_correct)
        check(self.roc_min_wrong >= 0, w + "roc_min_wrong", "an integer >= 0", self.roc_min_wrong)
        check(0 < self.arpo_initial <= 1, w + "arpo_initial", "a share in (0, 1]", self.arpo_initial)
        check(1 <= self.arpo_window <= 4096, w + "arpo_window", "an integer in [1, 4096] (tokens)", self.arpo_window)
        check(self.arpo_alpha >= 0, w + "arpo_alpha", "a number >= 0", self.arpo_alpha)
        check(0 <= self.arpo_threshold <= 1, w + "arpo_threshold", "a number in [0, 1]", self.arpo_threshold)
        check(self.arpo_advantage in ("soft", "hard"), w + "arpo_advantage", "\"soft\" or \"hard\"",
              self.arpo_advantage)
        check(not (self.aepo_branch and self.arpo_branch), w + "aepo_branch",
              "false while arpo_branch is true (AEPO's branching replaces ARPO's: set one)", self.aepo_branch)
        check(0 <= self.aepo_beta <= 100, w + "aepo_beta", "a number in [0, 100]", self.aepo_beta)
        check(0 <= self.aepo_penalty <= 1, w + "aepo_penalty", "a number in [0, 1]", self.aepo_penalty)
        check(1 <= self.max_turns <= 64, w + "max_turns", "an integer in [1, 64]", self.max_turns)
        check(0 <= self.turn_tokens <= 65536, w + "turn_tokens", "an integer in [0, 65536] (0: sampling.max_new_tokens)",
              self.turn_tokens)
        check(1 <= self.max_model_tokens <= 1 << 20, w + "max_model_tokens", "an integer in [1, 1048576]",
              self.max_model_tokens)
        check(self.max_model_tokens <= self.max_total_tokens <= 1 << 20, w + "max_total_tokens",
              "an integer in [max_model_tokens, 1048576]", self.max_total_tokens)


SHAPE_BACKENDS = ("hf",)
"""The rollout backends a speculative or tree shape runs on today: the in-process one, whose model is the
trainer's (vLLM's engine and Ray's workers hold copies of their own, that the shapes' teacher-forced
passes and tree steps do not reach yet)."""


def shape_problem(shape: str, pipeline_enabled: bool, backend: str = "hf") -> str | None:
    """Why `rollout.shape` cannot run with the rest of the config (None: it can)."""
    if shape != "independent" and backend not in SHAPE_BACKENDS:
        return (f"rollout.shape = {shape!r} runs on rollout.backend = \"hf\" only, not {backend!r} yet (set "
                "rollout.backend = \"hf\", or rollout.shape = \"independent\")")
    if shape == "episodes" and pipeline_enabled:
        return ("rollout.shape = \"episodes\" runs in the synchronous loop only: the pipeline's partial rollouts "
                "would install new weights between an episode's turns, and an exact correction across a tool "
                "turn is not built (set pipeline.max_staleness = 0, or rollout.shape = \"independent\")")
    if shape != "independent" and pipeline_enabled:
        return (f"rollout.shape = {shape!r} runs in the synchronous loop only: its teacher-forced passes use the "
                "trainer's weights, which an asynchronous generator runs ahead of (set pipeline.max_staleness = 0, "
                "or rollout.shape = \"independent\")")
    return None


def history_warning(shape: str, mode: str, allocator: str, reads_history: bool) -> str | None:
    """What exact speculative mode cannot promise with an allocator that reads a prompt's earlier rewards
    (None: nothing to say). Such an allocator picks or weights a prompt by the rewards of its last visit,
    the very rollouts that serve as this visit's drafts: the drafts are no longer independent of their
    content, and the rows drawn from them no longer exact samples of the current policy
    (docs/rollout-shapes.md, "Exact, and what it assumes")."""
    if shape != "speculative" or mode != "exact" or not reads_history:
        return None
    return (f"rollout.speculative.mode = \"exact\" with allocator {allocator!r}: the allocator reads a prompt's "
            "earlier rewards, so a visit's drafts (the last visit's rollouts) are chosen by their own content and "
            "its rows are not exactly the current policy's samples (docs/rollout-shapes.md)")
