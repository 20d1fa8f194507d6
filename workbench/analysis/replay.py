"""What-if replay: run any allocator over a finished run's logged per-prompt outcomes.

    from workbench.analysis.replay import replay_run
    r = replay_run(store, run_id, "dynamic_sampling", {"n": 8, "oversample": 2.0}, seed=0)
    r.summary()          # rollouts, tokens, informative groups, zero-signal fraction, ...
    r.steps              # one row per step;  r.grants: every replayed decision;  r.groups: pooled groups

How a step is replayed (the engine's step, line by line, with generation replaced by drawing):
1. The step's candidates are the prompts the run's sampler drew at that step (the prompts with a
   stage-0 allocation, or with statistics but no allocation), in the order the frame lists them;
   `ctx.draw(k)` serves the prompts the run drew mid-step, then prompts the run saw at the nearest
   other steps.
2. The allocator sees `PromptStats` it keeps itself, updated from what it drew (`stats="replayed"`,
   the default), or the run's logged statistics before the step (`stats="logged"`).
3. A grant of n rollouts for prompt p at step t is served by drawing from p's observed on-policy
   (reward, length) pairs at step t: without replacement while they last (so a grant of the logged
   group size reproduces the logged group exactly, in a shuffled order); beyond them ("resampled")
   from the Beta posterior of the prompt's pass rate at that step (binary rewards; `extrapolate=
   "posterior"`, the default) or the observations again with replacement (`"empirical"`). A prompt with no rollouts at step t borrows its outcomes from the nearest step that
   has some ("nearby"); a prompt never observed draws Bernoulli(posterior mean) ("prior"). The step
   table counts rollouts per source: the more "observed", the more the estimate can be trusted.
4. Budgets, stage limits, trimming with `fit_to_budget`, `reuse_requests` and `use_in_update` are
   applied as the engine applies them. The policy does not change under the replay: every allocator
   is judged against the same logged policy trajectory, so the replay estimates what an allocator
   would have spent and how many informative groups (reward variance > 0) it would have found, not
   how training would have gone.

The frames are shaped like the store's `allocations`, `rollouts` and `prompt_stats` tables, so the
replay runs without a model or a store (`replay`); `replay_run` reads them from a store. A run
imported from another engine logged no allocation decisions: `load_run` then tells its steps from
its rollouts (`allocations_from_rollouts`: each prompt's group a stage-0 grant of the rollouts it
got, the step's budget the rollouts it generated).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

import numpy as np
import polars as pl

from workbench.allocators import make_allocator
from workbench.allocators.base import (
    Allocator,
    Budget,
    Candidate,
    GroupResult,
    PromptStats,
    StepContext,
    fit_to_budget,
)
from workbench.analysis.replay_logged import SOURCES, LoggedStep, Outcomes, logged_stats, logged_steps
from workbench.correctness import run_rule, with_correct
from workbench.errors import DataError
from workbench.readers import RolloutReader

ROLLOUT_COLUMNS = ["step", "stage", "prompt_id", "idx", "reward", "correct", "length", "off_policy"]
"""The `rollouts` columns the replay reads."""


@dataclass
class ReplayResult:
    """One replay: every decision, every pooled group, and per-step totals."""

    allocator: str
    params: dict[str, Any]
    seed: int
    grants: pl.DataFrame
    """step, stage, prompt_id, asked, granted, reason, predicted_pass (one row per decision)."""
    groups: pl.DataFrame
    """step, prompt_id, n, correct, tokens, has_signal, used_in_update, reused (one row per pooled group)."""
    steps: pl.DataFrame
    """step, budget_kind, budget, rollouts, tokens, stages, groups, informative_groups, informative_used,
    zero_signal_frac and one `from_<source>` count per outcome source."""
    info: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Totals over the replayed steps (see `summarize_steps`)."""
        return {"allocator": self.allocator, "seed": self.seed, **summarize_steps(self.steps)}


def summarize_steps(steps: pl.DataFrame) -> dict[str, Any]:
    """Totals of a per-step frame with rollouts, tokens, groups, informative_groups (and optionally
    informative_used and from_<source>) columns: spend, informative groups, their rate per 1,000 rollouts,
    the zero-signal fraction, and the share of rollouts served from the step's own observations."""
    rollouts = int(steps["rollouts"].sum()) if steps.height else 0
    groups = int(steps["groups"].sum()) if steps.height else 0
    informative = int(steps["informative_groups"].sum()) if steps.height else 0
    out: dict[str, Any] = {
        "steps": steps.height,
        "rollouts": rollouts,
        "tokens": int(steps["tokens"].sum()) if steps.height else 0,
        "groups": groups,
        "informative_groups": informative,
        "informative_per_1k": 1000.0 * informative / rollouts if rollouts else 0.0,
        "zero_signal_frac": 1.0 - informative / groups if groups else 0.0,
    }
    if "informative_used" in steps.columns:
        out["informative_used"] = int(steps["informative_used"].sum()) if steps.height else 0
    if "from_observed" in steps.columns:
        out["observed_frac"] = float(steps["from_observed"].sum()) / rollouts if rollouts else 1.0
    return out


# -- the replay ------------------------------------------------------------------------------------

@dataclass
class _State:
    alloc: Allocator
    outcomes: Outcomes
    stats: dict[str, PromptStats]
    decay: float
    max_stages: int
    tokens_per_rollout: float
    grants: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)


def replay(
    allocations: pl.DataFrame,
    rollouts: pl.DataFrame,
    prompt_stats: pl.DataFrame | None = None,
    *,
    allocator: str,
    params: dict[str, Any] | None = None,
    seed: int = 0,
    prompts_per_step: int | None = None,
    budget: int | None = None,
    budget_kind: Literal["rollouts", "tokens"] | None = None,
    stats: Literal["replayed", "logged"] = "replayed",
    stats_decay: float = 1.0,
    max_stages: int = 8,
    steps: list[int] | None = None,
    extrapolate: Literal["posterior", "empirical"] = "posterior",
    tokens_per_rollout: float | None = None,
) -> ReplayResult:
    """Replay allocator `allocator` (with `params`) over the logged outcomes in the frames.

    `seed` seeds the allocator and its per-step rng exactly as the engine does (the run's seed
    reproduces the run's own decisions) and the outcome draws. `prompts_per_step` defaults to the
    number of candidates the run drew at each step; `budget` / `budget_kind` override the logged
    budget; `stats_decay` and `max_stages` are the run's `allocator.stats_decay` / `max_stages`.
    `extrapolate` says how rollouts beyond a prompt's observed ones are drawn: "posterior" (binary
    rewards: Bernoulli of a pass rate drawn once per step from Beta(1 + correct, 1 + wrong) of the
    observations, so an all-wrong logged group can still show a success when asked for more) or
    "empirical" (resampled from the observations with replacement: never more signal than logged).
    `tokens_per_rollout` is the initial estimate token budgets convert with (the engine starts from
    `sampling.max_new_tokens`, then follows a running mean); default: the mean logged length."""
    if stats not in ("replayed", "logged"):
        raise DataError(f"replay: stats must be 'replayed' or 'logged', got {stats!r}")
    plan = logged_steps(allocations, prompt_stats)
    if steps is not None:
        wanted = set(steps)
        plan = [s for s in plan if s.step in wanted]
    outcomes = Outcomes(rollouts, seed, extrapolate)
    st = _State(make_allocator(allocator, params or {}, seed=seed), outcomes, {}, stats_decay, max_stages,
                tokens_per_rollout or outcomes.mean_length or 8.0)
    history = logged_stats(prompt_stats) if stats == "logged" else {}
    logged_now: dict[str, PromptStats] = {}
    done = sorted(history)
    for i, ls in enumerate(plan):
        if stats == "logged":
            while done and done[0] < ls.step:
                logged_now.update(history[done.pop(0)])
            st.stats = {k: dataclasses.replace(v) for k, v in logged_now.items()}
        b = Budget(budget_kind or ls.budget_kind, int(budget if budget is not None else ls.budget), 0,
                   st.tokens_per_rollout)
        pool = _draw_pool(ls, plan, i)
        _replay_step(st, ls, b, pool, prompts_per_step or len(ls.candidates), seed)
    frames = _frames(st)
    return ReplayResult(allocator, dict(params or {}), seed, *frames,
                        info={"stats": stats, "steps": len(plan)})


def _draw_pool(ls: LoggedStep, plan: list[LoggedStep], i: int) -> Iterator[str]:
    """Prompts `ctx.draw` serves at a step, in order: the run's candidates, its mid-step draws, then the
    prompts of the nearest other steps (i+1, i-1, i+2, ...); lazily, repeats allowed."""
    yield from ls.candidates
    yield from ls.drawn
    for d in range(1, len(plan)):
        for j in (i + d, i - d):
            if 0 <= j < len(plan):
                yield from plan[j].candidates
                yield from plan[j].drawn


def _replay_step(st: _State, ls: LoggedStep, budget: Budget, pool: Iterator[str], batch: int, seed: int) -> None:
    """One step of the engine's protocol with generation replaced by `Outcomes.draw`."""
    step, alloc, out = ls.step, st.alloc, st.outcomes
    out.start_step(step)
    taken: set[str] = set()

    def draw(k: int) -> list[Candidate]:
        got: list[Candidate] = []
        while len(got) < k:
            pid = next(pool, None)
            if pid is None:
                break
            if pid not in taken:
                taken.add(pid)
                got.append(Candidate(pid, st.stats.setdefault(pid, PromptStats(pid))))
        return got

    wanted = alloc.candidates_wanted(batch)
    candidates = draw(wanted)
    ctx = StepContext(step=step, stage=0, budget=budget, candidates=candidates, stats=st.stats,
                      rng=np.random.default_rng([seed, step, 0xA110C]), draw=draw, prompts_per_step=batch)
    grants = alloc.begin_step(ctx)
    results: dict[str, GroupResult] = {}
    sources = dict.fromkeys(SOURCES, 0)
    lengths: dict[str, list[int]] = {}
    stage = 0
    while True:
        asked = [g.n for g in grants]
        grants = fit_to_budget(grants, ctx.budget)
        spent = 0
        for g, ask in zip(grants, asked):
            st.grants.append(dict(step=step, stage=stage, prompt_id=g.prompt_id, asked=int(ask),
                                  granted=int(g.n), reason=g.reason, predicted_pass=g.predicted_pass))
            if g.n <= 0:
                continue
            prior = st.stats.setdefault(g.prompt_id, PromptStats(g.prompt_id)).mean
            rewards, lens, oks, counts = out.draw_judged(g.prompt_id, g.n, prior)
            res = results.setdefault(g.prompt_id, GroupResult(g.prompt_id, []))
            res.rewards += rewards
            res.oks += oks
            res.stages += [stage] * g.n
            res.tokens += int(sum(lens))
            lengths.setdefault(g.prompt_id, []).extend(lens)
            spent += g.n if budget.kind == "rollouts" else int(sum(lens))
            for k, v in counts.items():
                sources[k] += v
        ctx.budget = dataclasses.replace(ctx.budget, used=ctx.budget.used + spent)
        stage += 1
        if stage >= st.max_stages:
            break
        ctx.stage = stage
        grants = alloc.next_stage(ctx, results)
        if not grants:
            break
    _finish_step(st, ls, ctx, results, lengths, sources, stage)


def _finish_step(st: _State, ls: LoggedStep, ctx: StepContext, results: dict[str, GroupResult],
                 lengths: dict[str, list[int]], sources: dict[str, int], stages: int) -> None:
    """Reuse, use_in_update, statistics and the step's rows."""
    alloc, step = st.alloc, ls.step
    on_policy = {pid: list(g.rewards) for pid, g in results.items()}
    on_policy_ok = {pid: list(g.oks) for pid, g in results.items()}
    reused = set()
    for pid in alloc.reuse_requests(results) if results else []:
        if pid in results and results[pid].correct == 0 and st.stats[pid].correct > 0:
            results[pid].rewards.append(1.0)
            results[pid].oks.append(True)
            results[pid].stages.append(stages - 1)
            reused.add(pid)
    informative = used_informative = 0
    for pid, g in results.items():
        used = bool(alloc.use_in_update(g))
        signal = len(set(on_policy[pid])) > 1
        informative += signal
        used_informative += signal and used
        st.groups.append(dict(step=step, prompt_id=pid, n=len(on_policy[pid]),
                              correct=sum(on_policy_ok[pid]), tokens=g.tokens,
                              has_signal=signal, used_in_update=used, reused=pid in reused))
    for pid, rewards in on_policy.items():
        st.stats[pid].update(rewards, step, int(sum(lengths[pid])), st.decay, correct=on_policy_ok[pid])
    n = sum(len(r) for r in on_policy.values())
    tokens = sum(sum(v) for v in lengths.values())
    if n:
        st.tokens_per_rollout = 0.9 * st.tokens_per_rollout + 0.1 * tokens / n
    st.steps.append(dict(step=step, budget_kind=ctx.budget.kind, budget=ctx.budget.amount, rollouts=n,
                         tokens=tokens, stages=stages, groups=len(results), informative_groups=informative,
                         informative_used=used_informative,
                         zero_signal_frac=1.0 - informative / len(results) if results else 0.0,
                         **{f"from_{k}": v for k, v in sources.items()}))


def _frames(st: _State) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    grants = pl.DataFrame(st.grants, schema={
        "step": pl.Int64, "stage": pl.Int64, "prompt_id": pl.Utf8, "asked": pl.Int64, "granted": pl.Int64,
        "reason": pl.Utf8, "predicted_pass": pl.Float64})
    groups = pl.DataFrame(st.groups, schema={
        "step": pl.Int64, "prompt_id": pl.Utf8, "n": pl.Int64, "correct": pl.Int64, "tokens": pl.Int64,
        "has_signal": pl.Boolean, "used_in_update": pl.Boolean, "reused": pl.Boolean})
    step_schema = {"step": pl.Int64, "budget_kind": pl.Utf8, "budget": pl.Int64, "rollouts": pl.Int64,
                   "tokens": pl.Int64, "stages": pl.Int64, "groups": pl.Int64, "informative_groups": pl.Int64,
                   "informative_used": pl.Int64, "zero_signal_frac": pl.Float64,
                   **{f"from_{k}": pl.Int64 for k in SOURCES}}
    return grants, groups, pl.DataFrame(st.steps, schema=step_schema)


# -- what the run itself did -----------------------------------------------------------------------

def logged_result(allocations: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """The run's own per-step totals in the replay's `steps` shape (on-policy rollouts only)."""
    frame = rollouts
    if "off_policy" in frame.columns:
        frame = frame.filter(~pl.col("off_policy").fill_null(False))
    if "length" not in frame.columns:
        frame = frame.with_columns(pl.lit(0).alias("length"))
    groups = frame.group_by(["step", "prompt_id"]).agg(
        pl.len().alias("n"), pl.col("length").sum().alias("tokens"),
        (pl.col("reward").n_unique() > 1).alias("has_signal"))
    if "used_in_update" in allocations.columns:
        used = allocations.group_by(["step", "prompt_id"]).agg(pl.col("used_in_update").any().alias("used"))
        groups = groups.join(used, on=["step", "prompt_id"], how="left")
    else:
        groups = groups.with_columns(pl.lit(True).alias("used"))
    per = groups.group_by("step").agg(
        pl.col("n").sum().alias("rollouts"), pl.col("tokens").sum().alias("tokens"), pl.len().alias("groups"),
        pl.col("has_signal").sum().alias("informative_groups"),
        (pl.col("has_signal") & pl.col("used").fill_null(False)).sum().alias("informative_used"))
    stages = allocations.group_by("step").agg(
        (pl.col("stage").max() + 1).alias("stages"), pl.col("budget_kind").first(), pl.col("budget").first())
    return (per.join(stages, on="step", how="left")
            .with_columns((1.0 - pl.col("informative_groups") / pl.col("groups")).alias("zero_signal_frac"))
            .select("step", "budget_kind", "budget", "rollouts", "tokens", "stages", "groups",
                    "informative_groups", "informative_used", "zero_signal_frac")
            .sort("step"))


def allocations_from_rollouts(rollouts: pl.DataFrame) -> pl.DataFrame:
    """An `allocations`-shaped frame told by the rollouts alone, for a run that logged no allocation
    decisions (imported from another engine): per step, each prompt's rollouts as one stage-0 grant
    of that many, under a rollout budget equal to the step's rollouts (the order of first appearance
    kept, as the replay reads candidates in the frame's order)."""
    frame = rollouts
    if "off_policy" in frame.columns:
        frame = frame.filter(~pl.col("off_policy").fill_null(False))
    groups = frame.group_by(["step", "prompt_id"], maintain_order=True).agg(pl.len().alias("granted"))
    return (groups.with_columns(pl.lit(0).alias("stage"), pl.lit("logged").alias("allocator"),
                                pl.col("granted").alias("asked"), pl.lit("logged group").alias("reason"),
                                pl.lit("rollouts").alias("budget_kind"),
                                pl.col("granted").sum().over("step").alias("budget"),
                                pl.lit(True).alias("used_in_update"))
            .select("step", "stage", "prompt_id", "allocator", "asked", "granted", "reason", "budget_kind",
                    "budget", "used_in_update"))


# -- from a store ----------------------------------------------------------------------------------

@dataclass
class RunFrames:
    """A run's frames the replay reads, and the settings of its config it needs."""

    run_id: str
    allocations: pl.DataFrame
    rollouts: pl.DataFrame
    prompt_stats: pl.DataFrame
    allocator: str
    params: dict[str, Any]
    seed: int
    prompts_per_step: int | None
    stats_decay: float
    max_stages: int
    tokens_per_rollout: float | None = None


def load_run(store: RolloutReader, run_id: str) -> RunFrames:
    """Read what a replay of `run_id` needs through the store's readers."""
    run = store.run(run_id)
    cfg = run.get("config") or {}
    a = cfg.get("allocator") or {}
    n = store.count_rollouts(run_id)
    rollouts = with_correct(store.rollouts(run_id, limit=max(n, 1), columns=ROLLOUT_COLUMNS), run_rule(cfg))
    allocations = store.allocations(run_id)
    if allocations.height == 0 and rollouts.height:  # imported: no decisions logged, the rollouts tell the steps
        allocations = allocations_from_rollouts(rollouts)
    return RunFrames(
        run_id=run_id, allocations=allocations, rollouts=rollouts,
        prompt_stats=store.prompt_stats(run_id), allocator=a.get("name", "uniform"),
        params=dict(a.get("params") or {}), seed=int(run.get("seed") or cfg.get("seed") or 0),
        prompts_per_step=a.get("prompts_per_step"), stats_decay=float(a.get("stats_decay", 1.0)),
        max_stages=int(a.get("max_stages", 8)),
        tokens_per_rollout=(cfg.get("sampling") or {}).get("max_new_tokens"))


def replay_run(store: RolloutReader, run_id: str, allocator: str | None = None, params: dict[str, Any] | None = None,
               seed: int | None = None, *, frames: RunFrames | None = None, **kwargs: Any) -> ReplayResult:
    """Replay `allocator` (default: the run's own, with its logged parameters) over run `run_id`.

    `seed` defaults to the run's seed; `frames` (from `load_run`) saves re-reading the store when
    replaying several allocators; other keywords go to `replay` (budget, budget_kind, stats, ...)."""
    f = frames or load_run(store, run_id)
    own = allocator is None or allocator == f.allocator
    kwargs.setdefault("prompts_per_step", f.prompts_per_step)
    kwargs.setdefault("stats_decay", f.stats_decay)
    kwargs.setdefault("max_stages", f.max_stages)
    kwargs.setdefault("tokens_per_rollout", f.tokens_per_rollout)
    return replay(f.allocations, f.rollouts, f.prompt_stats, allocator=allocator or f.allocator,
                  params=params if params is not None else (f.params if own else {}),
                  seed=f.seed if seed is None else seed, **kwargs)


def compare_allocators(store: RolloutReader, run_id: str, allocators: dict[str, tuple[str, dict[str, Any]]],
                       seeds: int = 3, **kwargs: Any) -> pl.DataFrame:
    """One row per (label, seed): the run as logged (label "logged") and each replayed allocator
    (`{label: (name, params)}`), with `summarize_steps`'s totals."""
    f = load_run(store, run_id)
    rows = [{"label": "logged", "allocator": f.allocator, "seed": f.seed,
             **summarize_steps(logged_result(f.allocations, f.rollouts)), "observed_frac": 1.0}]
    for label, (name, params) in allocators.items():
        for k in range(seeds):
            r = replay_run(store, run_id, name, params, seed=f.seed + k, frames=f, **kwargs)
            rows.append({"label": label, **r.summary()})
    return pl.DataFrame(rows, infer_schema_length=None)
