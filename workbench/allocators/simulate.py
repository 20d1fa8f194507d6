"""The offline allocator simulator: every registered allocator on the same synthetic population of
prompts with known, drifting pass rates, through the same protocol the engine follows. Seconds, no model.

The population: prompt i has a latent logit a_i ~ Normal(`logit_mean`, `logit_sd`); its true pass rate
is sigmoid(a_i + g), g a global competence. Learning, as in RL: every group that enters the update with
both outcomes moves its prompt's logit up by `lr_prompt` * sqrt(n / 8) and g up by `lr_global` / 1000;
every step each logit also takes a Normal(0, `drift`) random step (the policy drifts). Rollouts are
Bernoulli(p_i); for a token budget every rollout costs `tokens_per_rollout` tokens.

A workload profile's population (`initial_pass`): instead of the Normal logits, the prompts' initial
pass rates are drawn from a measured list (e.g. the warm start's per-prompt pass rates on held-out
prompts, 16 samples each); rates of exactly 0 or 1 become logits of -/+`logit_clip`, so hopeless
prompts stay hopeless. `predict_savings` turns that into the prediction the leverage map plots: the
generated tokens each allocator needs to reach uniform's final mean pass rate, relative to uniform's.

`drive_step` is the engine's step, line by line (begin_step, stages of next_stage with the budget's
`used` advanced, reuse_requests, use_in_update, PromptStats.update). The contract tests drive allocators
through it too, with `check=True` turning every protocol breach into an AssertionError.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from workbench.checks import check_choice, check_float, check_int
from workbench.errors import ConfigError
from workbench.allocators.base import Allocator, Budget, Candidate, Grant, GroupResult, PromptStats, StepContext


@dataclass(frozen=True)
class SimConfig:
    population: int = 512
    """Prompts in the synthetic data set."""
    prompts_per_step: int = 32
    """The batch B the sampler is asked for."""
    group_size: int = 8
    """Uniform's n; the budget is budget_factor * B * group_size rollouts (or that many times tokens)."""
    budget_factor: float = 1.5
    """Budget per step as a multiple of uniform's spend (room for top-ups and over-sampling)."""
    budget_kind: Literal["rollouts", "tokens"] = "rollouts"
    """Budget unit."""
    tokens_per_rollout: int = 16
    """Generated tokens per rollout (token budgets)."""
    steps: int = 60
    """Training steps simulated per allocator and seed."""
    logit_mean: float = -0.5
    """Mean initial logit of the pass rates."""
    logit_sd: float = 2.5
    """Spread of the initial logits (large: many trivial and hopeless prompts)."""
    lr_prompt: float = 0.15
    """Logit gain of a prompt per informative group used in the update (times sqrt(n / 8))."""
    lr_global: float = 0.5
    """Global logit gain per 1000 informative groups."""
    drift: float = 0.03
    """Standard deviation of each logit's random step per step."""
    max_stages: int = 64
    """The engine's hard limit on stages per step."""
    initial_pass: tuple[float, ...] = ()
    """Measured initial pass rates to draw the population from (with replacement); empty: the
    Normal(`logit_mean`, `logit_sd`) logits."""
    logit_clip: float = 12.0
    """Bound of the logits made from `initial_pass` (a rate of 0 is logit -logit_clip)."""
    staleness: int = 0
    """The asynchronous pipeline's eta: the rollouts of step j are sampled from the policy as it was
    `staleness` steps earlier and allocated on the statistics of the steps up to j - 1 - staleness
    (0: the synchronous loop)."""

    def __post_init__(self) -> None:
        o = "simulate"
        check_int(o, "population", self.population, 1)
        check_int(o, "prompts_per_step", self.prompts_per_step, 1, self.population)
        check_int(o, "group_size", self.group_size, 1, 4096)
        check_float(o, "budget_factor", self.budget_factor, 0.0, 100.0)
        check_choice(o, "budget_kind", self.budget_kind, ("rollouts", "tokens"))
        check_int(o, "tokens_per_rollout", self.tokens_per_rollout, 1)
        check_int(o, "staleness", self.staleness, 0, 64)
        check_int(o, "steps", self.steps, 1)
        check_float(o, "logit_sd", self.logit_sd, 0.0, 20.0)
        check_float(o, "logit_mean", self.logit_mean, -20.0, 20.0)
        check_float(o, "lr_prompt", self.lr_prompt, 0.0, 10.0)
        check_float(o, "lr_global", self.lr_global, 0.0, 100.0)
        check_float(o, "drift", self.drift, 0.0, 10.0)
        check_int(o, "max_stages", self.max_stages, 1)
        check_float(o, "logit_clip", self.logit_clip, 0.1, 50.0)
        if any(not (0.0 <= float(p) <= 1.0) for p in self.initial_pass):
            raise ConfigError("simulate.initial_pass: every rate must be in [0, 1]")

    @property
    def budget_amount(self) -> int:
        rollouts = self.budget_factor * self.prompts_per_step * self.group_size
        scale = self.tokens_per_rollout if self.budget_kind == "tokens" else 1
        return int(round(rollouts * scale))


@dataclass
class StepOutcome:
    """What one driven step did."""

    grants: list[tuple[int, Grant]]
    """(stage, grant) in order."""
    results: dict[str, GroupResult]
    reused: list[str]
    """Prompts whose group got an earlier correct response appended (off-policy)."""
    used_in_update: dict[str, bool]
    rollouts: int
    stages: int
    info: dict[str, Any] = field(default_factory=dict)
    on_policy: dict[str, list[float]] = field(default_factory=dict)
    """Each prompt's rewards sampled this step (what the statistics are updated with)."""


class Sampler:
    """Epoch-wise shuffled draws over prompt ids; never the same prompt twice in one step."""

    def __init__(self, ids: list[str], stats: dict[str, PromptStats], rng: np.random.Generator) -> None:
        self.ids, self.stats, self.rng = ids, stats, rng
        self.queue: list[str] = []
        self.taken: set[str] = set()

    def new_step(self) -> None:
        self.taken = set()

    def draw(self, k: int) -> list[Candidate]:
        out: list[Candidate] = []
        budget = len(self.ids) - len(self.taken)
        while len(out) < min(k, budget):
            if not self.queue:
                self.queue = [self.ids[i] for i in self.rng.permutation(len(self.ids))]
            pid = self.queue.pop()
            if pid in self.taken:
                continue
            self.taken.add(pid)
            out.append(Candidate(pid, self.stats.setdefault(pid, PromptStats(pid))))
        return out


def _check_grants(grants: list[Grant], budget: Budget, stage: int) -> None:
    for g in grants:
        assert isinstance(g, Grant), f"stage {stage}: not a Grant: {g!r}"
        assert isinstance(g.n, int) and g.n >= 0, f"stage {stage}: bad n in {g}"
        assert isinstance(g.reason, str) and g.reason.strip(), f"stage {stage}: grant without reason {g}"
    total = sum(g.n for g in grants)
    assert total <= budget.rollouts_left(), f"stage {stage}: granted {total} > {budget.rollouts_left()} left"


def drive_step(
    alloc: Allocator,
    *,
    step: int,
    stats: dict[str, PromptStats],
    budget: Budget,
    draw: Callable[[int], list[Candidate]],
    prompts_per_step: int,
    sample: Callable[[str, int], list[float]],
    seed: int = 0,
    has_correct_before: Callable[[str], bool] | None = None,
    max_stages: int = 64,
    check: bool = False,
    update_stats: bool = True,
) -> StepOutcome:
    """Run one step of the protocol as the engine does; `sample(prompt_id, n)` returns n rewards.
    `update_stats` False: the caller folds the step's on-policy rewards (`StepOutcome.on_policy`) into
    `stats` itself (later, for stale statistics)."""
    rng = np.random.default_rng([seed, step])
    cands = draw(alloc.candidates_wanted(prompts_per_step)) if prompts_per_step > 0 else []
    ctx = StepContext(step, 0, budget, cands, stats, rng, draw, prompts_per_step)
    grants = alloc.begin_step(ctx)
    per_rollout = 1 if budget.kind == "rollouts" else budget.tokens_per_rollout
    log: list[tuple[int, Grant]] = []
    results: dict[str, GroupResult] = {}
    stage = 0
    while True:
        if check:
            _check_grants(grants, ctx.budget, stage)
        positive = [g for g in grants if g.n > 0]
        log += [(stage, g) for g in grants]
        for g in positive:
            res = results.setdefault(g.prompt_id, GroupResult(g.prompt_id, []))
            res.rewards += list(sample(g.prompt_id, g.n))
            res.stages += [stage] * g.n
            res.tokens += int(g.n * per_rollout)
        used = ctx.budget.used + int(math.ceil(sum(g.n for g in positive) * per_rollout))
        if stage > 0 and not positive:
            break
        stage += 1
        if stage >= max_stages:
            assert not check, f"allocator {alloc.name} did not end the step within {max_stages} stages"
            break
        ctx = dataclasses.replace(ctx, stage=stage, budget=dataclasses.replace(ctx.budget, used=used))
        grants = alloc.next_stage(ctx, results)
        if not grants:
            break
    reused = [
        pid for pid in alloc.reuse_requests(results)
        if pid in results and (has_correct_before is None or has_correct_before(pid))
    ]
    on_policy = {pid: list(g.rewards) for pid, g in results.items()}
    for pid in reused:
        results[pid].rewards.append(1.0)
        results[pid].stages.append(-1)
    used_in_update = {pid: bool(alloc.use_in_update(g)) for pid, g in results.items()}
    if update_stats:
        fold(stats, on_policy, step)
    n = sum(len(r) for r in on_policy.values())
    return StepOutcome(log, results, reused, used_in_update, n, stage, dict(ctx.info), on_policy)


def fold(stats: dict[str, PromptStats], on_policy: dict[str, list[float]], step: int) -> None:
    """Fold one step's on-policy rewards into the per-prompt statistics."""
    for pid, rewards in on_policy.items():
        stats.setdefault(pid, PromptStats(pid)).update(rewards, step)


def simulate_one(name: str, params: dict[str, Any] | None, cfg: SimConfig, seed: int) -> dict[str, Any]:
    """Simulate one allocator for `cfg.steps` steps; returns its metrics."""
    from workbench.allocators.registry import make_allocator

    alloc = make_allocator(name, params or {}, seed=seed)
    pop_rng = np.random.default_rng([seed, 1])
    ids = [f"sim-{i:05d}" for i in range(cfg.population)]
    if cfg.initial_pass:
        rates = np.asarray(cfg.initial_pass, dtype=float)[pop_rng.integers(0, len(cfg.initial_pass), cfg.population)]
        with np.errstate(divide="ignore"):
            logits = np.clip(np.log(rates) - np.log1p(-rates), -cfg.logit_clip, cfg.logit_clip)
    else:
        logits = pop_rng.normal(cfg.logit_mean, cfg.logit_sd, size=cfg.population)
    index = {pid: i for i, pid in enumerate(ids)}
    stats: dict[str, PromptStats] = {}
    sampler = Sampler(ids, stats, np.random.default_rng([seed, 2]))
    out_rng = np.random.default_rng([seed, 3])
    drift_rng = np.random.default_rng([seed, 4])
    g = 0.0
    # staleness: the policies the generator may still sample from (oldest first) and the steps whose
    # rewards the allocator's statistics do not hold yet
    behind: deque[tuple[np.ndarray, float]] = deque(maxlen=cfg.staleness + 1)
    unseen: deque[tuple[int, dict[str, list[float]]]] = deque()

    def true_pass() -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(logits + g)))

    def sample(pid: str, n: int) -> list[float]:
        old_logits, old_g = behind[0]
        p = 1.0 / (1.0 + math.exp(-(old_logits[index[pid]] + old_g)))
        return (out_rng.random(n) < p).astype(float).tolist()

    pass0 = float(true_pass().mean())
    per = 1 if cfg.budget_kind == "rollouts" else cfg.tokens_per_rollout
    curve = [(0.0, pass0)]
    tot = dict(groups=0, zero=0, informative=0, rollouts=0, stages=0, reused=0, dropped=0)
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        sampler.new_step()
        behind.append((logits.copy() if cfg.staleness else logits, g))
        budget = Budget(cfg.budget_kind, cfg.budget_amount, 0, float(cfg.tokens_per_rollout))
        o = drive_step(
            alloc, step=step, stats=stats, budget=budget, draw=sampler.draw,
            prompts_per_step=cfg.prompts_per_step, sample=sample, seed=seed,
            has_correct_before=lambda pid: pid in stats and stats[pid].correct > 0, max_stages=cfg.max_stages,
            update_stats=False,
        )
        unseen.append((step, o.on_policy))
        while len(unseen) > cfg.staleness:
            fold(stats, unseen[0][1], unseen[0][0])
            unseen.popleft()
        informative = 0
        for pid, grp in o.results.items():
            tot["groups"] += 1
            tot["zero"] += not grp.has_signal
            if o.used_in_update[pid] and grp.has_signal:
                informative += 1
                logits[index[pid]] += cfg.lr_prompt * math.sqrt(grp.n / 8.0)
            tot["dropped"] += not o.used_in_update[pid]
        g += cfg.lr_global * informative / 1000.0
        logits += drift_rng.normal(0.0, cfg.drift, size=cfg.population) if cfg.drift > 0 else 0.0
        tot["informative"] += informative
        tot["rollouts"] += o.rollouts
        tot["stages"] += o.stages
        tot["reused"] += len(o.reused)
        curve.append((curve[-1][0] + o.rollouts * cfg.tokens_per_rollout, float(true_pass().mean())))
    return {
        "allocator": name,
        "zero_signal_frac": tot["zero"] / max(tot["groups"], 1),
        "informative_per_1k": 1000.0 * tot["informative"] / max(tot["rollouts"], 1),
        "budget_used_frac": tot["rollouts"] * per / (cfg.budget_amount * cfg.steps) if cfg.budget_amount else 0.0,
        "informative_groups_per_step": tot["informative"] / cfg.steps,
        "rollouts_per_step": tot["rollouts"] / cfg.steps,
        "groups_per_step": tot["groups"] / cfg.steps,
        "dropped_groups_per_step": tot["dropped"] / cfg.steps,
        "reused_per_step": tot["reused"] / cfg.steps,
        "stages_per_step": tot["stages"] / cfg.steps,
        "pass_mean_start": pass0,
        "pass_mean_end": float(true_pass().mean()),
        "seconds": time.perf_counter() - t0,
        "curve": curve,
    }


def simulate(
    names: list[str] | None = None,
    cfg: SimConfig | None = None,
    seeds: int = 3,
    params: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every named allocator (default: all registered) on the same populations, one per seed; each
    metric is the mean over seeds (pass_gain = pass_mean_end - pass_mean_start)."""
    from workbench.allocators.registry import available_allocators, get_allocator

    cfg = cfg or SimConfig()
    names = names or available_allocators()
    for name in names:
        get_allocator(name)
    check_int("simulate", "seeds", seeds, 1, 1000)
    rows = []
    for name in names:
        runs = [simulate_one(name, (params or {}).get(name), cfg, seed) for seed in range(seeds)]
        row: dict[str, Any] = {"allocator": name}
        for key in runs[0]:
            if key not in ("allocator", "curve"):
                row[key] = float(np.mean([r[key] for r in runs]))
        row["pass_gain"] = row["pass_mean_end"] - row["pass_mean_start"]
        row["seeds"] = seeds
        rows.append(row)
    return rows


def _tokens_to(curve: np.ndarray, target: float) -> float | None:
    """Tokens at which a (tokens, pass) curve first reaches `target`, linear between steps."""
    above = np.nonzero(curve[:, 1] >= target)[0]
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0 or curve[i, 1] == curve[i - 1, 1]:
        return float(curve[i, 0])
    frac = (target - curve[i - 1, 1]) / (curve[i, 1] - curve[i - 1, 1])
    return float(curve[i - 1, 0] + frac * (curve[i, 0] - curve[i - 1, 0]))


def predict_savings(names: list[str], cfg: SimConfig, seeds: int = 3,
                    params: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The simulator's prediction for a workload: per allocator, generated tokens to reach uniform's
    final mean pass rate (curves averaged over seeds, same populations per seed) relative to uniform's,
    and the zero-signal fraction of its groups. `cfg` should mirror the real runs (prompts per step,
    group size, steps, the token budget per step = uniform's spend, tokens per rollout)."""
    check_int("simulate", "seeds", seeds, 1, 1000)
    names = ["uniform"] + [n for n in dict.fromkeys(names) if n != "uniform"]
    curves, zero = {}, {}
    for name in names:
        runs = [simulate_one(name, (params or {}).get(name), cfg, seed) for seed in range(seeds)]
        curves[name] = np.mean([np.asarray(r["curve"]) for r in runs], axis=0)
        zero[name] = float(np.mean([r["zero_signal_frac"] for r in runs]))
    target = float(curves["uniform"][-1, 1])
    ref = _tokens_to(curves["uniform"], target)
    rows = {}
    for name in names:
        got = _tokens_to(curves[name], target)
        rows[name] = {"predicted_saving": (ref / got) if (ref and got) else None,
                      "zero_signal_frac": zero[name],
                      "pass_start": float(curves[name][0, 1]), "pass_end": float(curves[name][-1, 1])}
    return {"target_pass": target, "uniform_zero_signal_frac": zero["uniform"], "allocators": rows}
