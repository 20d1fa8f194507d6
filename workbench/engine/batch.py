"""The producer of the training loop: `collect` returns one step's generated, scored and allocated
batch (a `Batch`), as nanochat's RL script hides rollouts behind `get_batch`.

The synchronous loop calls `collect` and then trains on what it returned; the asynchronous pipeline
(`workbench.engine.pipeline`) calls the same function on a generator thread, ahead of the trainer.
So everything a batch needs from the step's start is read here, once: the candidates and the
allocator's stages, the rollouts with the workers that made them, the reused responses, the
per-prompt statistics after folding the step's rewards in, and the live settings it was made under.
The statistics depend on rewards only, never on the weights, so folding them in here rather than
after the update changes nothing in the synchronous loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from workbench.allocators.base import Budget, Candidate, GroupResult, PromptStats, StepContext, fit_to_budget
from workbench.engine.context import RunContext
from workbench.engine.episode_filter import granted, group_notes, oversample, roc_filter, shared_model_tokens
from workbench.engine.evaluate import decode
from workbench.engine.setup import Setup, StepState
from workbench.engine.steplog import Rollouts
from workbench.engine.timing import PhaseTimer
from workbench.episodes import episode_from_rows, episode_rows
from workbench.faults import fault_point
from workbench.rollout.base import SamplingParams, group_seed
from workbench.rollout.shapes import IndependentShape, WeightFeed
from workbench.tasks.rewards import score


@dataclass
class Batch:
    """One step's generated, scored and allocated rollouts, and what the step's record needs of them."""

    step: int
    rollouts: Rollouts
    """Every row of the step (all stages, then reused responses), with the worker of each."""
    results: dict[str, GroupResult]
    """Each prompt's pooled group, in the order the groups were first generated."""
    alloc_rows: list[dict[str, Any]]
    """The `allocations` rows (without `used_in_update`, which the update decides)."""
    budget_used: int
    info: dict[str, Any]
    """What the allocator reported about the step (`ctx.info`)."""
    stages: int
    rng: np.random.Generator
    """The step's generator after the allocator drew from it (the update's shuffle continues it)."""
    prompt_rows: list[dict[str, Any]]
    """The `prompt_stats` rows after this step's rewards were folded in."""
    tokens: int
    """Tokens generated on-policy."""
    settings: dict[str, Any]
    """The live settings the batch was made under (`rollout/temperature`, `alloc/budget`, ...)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    """Figures of the backend that made the batch (Ray workers), when that is not the trainer's."""
    timer: PhaseTimer = field(default_factory=PhaseTimer)
    """Time spent producing the batch, per phase (generate, verify, allocate)."""

    @property
    def n_onp(self) -> int:
        return int((~self.rollouts.off_policy).sum())


# -- one stage: generate the granted rollouts and score them ---------------------------------------

def stage_seeds(seed: int, step: int, stage: int, rows: list[int]) -> list[int]:
    """One sampling seed per row: a prompt's rollouts of a stage form one group with its own stream,
    derived from (run seed, step, stage, prompt index) and never from the worker or the batch."""
    per_prompt = {i: group_seed(seed, step, stage, i) for i in dict.fromkeys(rows)}
    return [per_prompt[i] for i in rows]


def rollout_stage(s: Setup, rows: list[int], stage: int, temperature: float, gen: torch.Generator | None,
                  timer: PhaseTimer, *, seeds: list[int] | None = None, version: int = 0,
                  feed: WeightFeed | None = None) -> Rollouts:
    """Generate one rollout per entry of `rows` (indices into the training prompts) and verify it.

    With `seeds` (one per row, `stage_seeds`) each prompt's group samples from its own stream, so
    any backend or split across workers gives the same rollouts; else `gen` drives the batch. With a
    `feed` (partial rollouts) weights arriving mid-stage are installed and the stage continued."""
    cfg = s.cfg.sampling
    sampling = SamplingParams(temperature=temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                              max_new_tokens=cfg.max_new_tokens)
    shape = s.shape if seeds is not None else IndependentShape()  # unseeded (a `gen`): plain sampling
    factor, keep = int(getattr(shape, "oversample", 1)), granted(rows)
    if factor > 1 and seeds is not None:  # GRPO-RoC: sample factor x each grant, keep the grant (below)
        rows, seeds = oversample(rows, seeds, factor)
    n = len(rows)
    with timer("generate"):  # the one generate seam: the run's rollout shape (independent, speculative, tree)
        options: dict[str, Any] = {"generator": gen} if seeds is None else {"feed": feed} if feed is not None else {}
        shaped = shape.generate(s.model, s.backend, [s.prompts.train_tok[i] for i in rows], rows, sampling, seeds,
                                version if feed is not None else s.backend.policy_version, s.pad_id, **options)
        batch = shaped.batch
        fault_point("generate")
        texts = decode(s.tokenizer, batch)
    with timer("verify"):  # the verifier's verdicts and the reward's terms (`[rewards]`)
        model_tokens = (batch.lengths if shaped.loss_mask is None else shaped.loss_mask.sum(1)).cpu().numpy()
        scored = score(s.cfg.rewards, s.task, [s.prompts.train[i] for i in rows], texts, model_tokens,
                       batch.finished.cpu().numpy(), max_new_tokens=cfg.max_new_tokens)
    r = Rollouts(
        tokens=batch.tokens.cpu(), logprobs=batch.logprobs.float().cpu(), entropy=batch.entropy.float().cpu(),
        lengths=batch.lengths.cpu().long(), finished=batch.finished.cpu().bool(),
        prompt=np.asarray(rows, dtype=np.int64), stage=np.full(n, stage, dtype=np.int32),
        policy_version=np.full(n, s.backend.policy_version, dtype=np.int64),
        temperature=np.full(n, temperature, dtype=np.float64), off_policy=np.zeros(n, dtype=bool),
        responses=texts, rewards=scored.rewards, verdicts=scored.verdicts, reward_terms=scored.terms,
        correct=np.asarray([v.correct for v in scored.results], dtype=bool), workers=batch.workers or ["local"] * n,
        version_start=np.full(n, version, dtype=np.int64),
        version_end=shaped.version_end if shaped.version_end is not None else np.full(n, version, dtype=np.int64),
        segments=shaped.segments if shaped.segments is not None else np.ones(n, dtype=np.int32),
        shape=shaped.columns, loss_mask=None if shaped.loss_mask is None else shaped.loss_mask.cpu().bool(),
        episodes=shaped.episodes, finish_reasons=shaped.finish_reasons, branch=shaped.branch,
    )
    if factor > 1 and seeds is not None:
        with timer("verify"):
            shape.note_metrics(roc_filter(r, keep, seeds, s.cfg.rollout.episodes))
    return r


def reused_row(reuse: dict[str, dict[str, Any]], prompt_id: str, prompt: int, stage: int) -> Rollouts:
    """The cached earlier correct response of a prompt, as one off-policy row."""
    c = reuse[prompt_id]
    t = len(c["tokens"])
    mask = c.get("mask")
    return Rollouts(
        tokens=torch.tensor([c["tokens"]], dtype=torch.long),
        logprobs=torch.tensor([c["logprobs"]], dtype=torch.float32),
        entropy=torch.tensor([c["entropy"]], dtype=torch.float32),
        lengths=torch.tensor([t]), finished=torch.tensor([c["finished"]]),
        prompt=np.array([prompt]), stage=np.array([stage], dtype=np.int32),
        policy_version=np.array([c["policy_version"]]), temperature=np.array([c["temperature"]]),
        off_policy=np.array([True]), responses=[c["response"]], rewards=np.array([c["reward"]]),
        verdicts=[c["verdict"]], correct=np.array([c.get("correct", True)], dtype=bool),
        workers=[c.get("worker", "local")],
        version_start=np.array([c.get("version", -1)]), version_end=np.array([c.get("version", -1)]),
        segments=np.ones(1, dtype=np.int32),
        loss_mask=None if mask is None else torch.tensor([mask], dtype=torch.bool),
        episodes=None if c.get("episode") is None else [episode_from_rows(*c["episode"])],
        finish_reasons=None if c.get("finish_reason") is None else [c["finish_reason"]],
    )


# -- the producer: one step's batch ------------------------------------------------------------------

def collect(run: RunContext, step: int, version: int | None = None, *,
            on_stage: Callable[[int], None] = lambda stage: None, feed: WeightFeed | None = None) -> Batch:
    """Generate, score and allocate step `step`'s batch under policy `version` (default: step - 1,
    the synchronous loop's) with the run's parts and live settings; fold its rewards into the run's
    step state.

    `on_stage(stage)` runs at each stage boundary inside the step (the loop applies stage-boundary
    controls there)."""
    version = step - 1 if version is None else version
    s, state, live, timer = run.parts, run.state.step, run.state.live, PhaseTimer()
    cfg, train = s.cfg, s.prompts.train
    alloc = live.allocator
    # a granted rollout costs what is sampled for it: GRPO-RoC samples `oversample` x each grant
    budget = Budget(live.budget_kind, live.budget, 0, state.tokens_per_rollout * getattr(s.shape, "oversample", 1))
    rng = np.random.default_rng([cfg.seed, step, 0xA110C])
    stats = state.stats

    def draw(k: int) -> list[Candidate]:
        return [Candidate(train[i].id, stats.setdefault(train[i].id, PromptStats(train[i].id)),
                          train[i].level) for i in s.sampler.draw(k)]

    with timer("allocate"):
        candidates = draw(alloc.candidates_wanted(cfg.allocator.prompts_per_step))
        ctx = StepContext(step=step, stage=0, budget=budget, candidates=candidates, stats=stats,
                          rng=rng, draw=draw, prompts_per_step=cfg.allocator.prompts_per_step)
        grants = alloc.begin_step(ctx)
    before = {pid: (st.alpha, st.beta) for pid, st in stats.items() if pid in {c.prompt_id for c in candidates}}
    parts: list[Rollouts] = []
    s.backend.expected_new_tokens = state.tokens_per_rollout  # balances a split across workers (Ray)
    alloc_rows: list[dict[str, Any]] = []
    results: dict[str, GroupResult] = {}
    stage = 0
    while True:
        asked = [g.n for g in grants]
        grants = fit_to_budget(grants, ctx.budget)
        rows = [s.prompts.index[g.prompt_id] for g in grants for _ in range(g.n)]
        for g, ask in zip(grants, asked):
            st = stats.setdefault(g.prompt_id, PromptStats(g.prompt_id))
            a0, b0 = before.get(g.prompt_id, (st.alpha, st.beta))
            alloc_rows.append(dict(step=step, stage=stage, prompt_id=g.prompt_id, allocator=alloc.name,
                                   asked=int(ask), granted=int(g.n), reason=g.reason,
                                   predicted_pass=g.predicted_pass, alpha_before=a0, beta_before=b0,
                                   budget_kind=budget.kind, budget=budget.amount, stats_version=version))
        if rows:
            part = rollout_stage(s, rows, stage, live.temperature, None, timer,
                                 seeds=stage_seeds(cfg.seed, step, stage, rows), version=version, feed=feed)
            parts.append(part)
            _pool(results, part, s, stage)
            notes = group_notes(part)  # GRPO-RoC's decision per group, in its allocation's reason
            for row in alloc_rows[-len(grants):] if notes else []:
                note = notes.get(s.prompts.index[row["prompt_id"]])
                row["reason"] = f"{row['reason']}; {note}" if note else row["reason"]
            spent = len(rows) if budget.kind == "rollouts" else \
                int(part.model_tokens().sum()) - shared_model_tokens(part)  # never tool tokens; a branch's prefix once
            ctx.budget = dataclasses.replace(ctx.budget, used=ctx.budget.used + spent)
        for row in alloc_rows[-len(grants):] if grants else []:
            row["budget_left"] = ctx.budget.left
        stage += 1
        if stage >= cfg.allocator.max_stages:
            break
        on_stage(stage)
        ctx.stage = stage
        with timer("allocate"):
            grants = alloc.next_stage(ctx, results)
        if not grants:
            break
    with timer("allocate"):
        for pid in alloc.reuse_requests(results) if parts else []:
            if pid in state.reuse and pid in results and results[pid].correct == 0:
                part = reused_row(state.reuse, pid, s.prompts.index[pid], stage - 1)
                parts.append(part)
                _pool(results, part, s, stage - 1)
    events = [] if parts else [dict(level="warning", kind="empty_step", message=(
        f"step {step}: the allocator {alloc.name!r} granted no rollouts (budget {budget.amount} "
        f"{budget.kind}); nothing to learn from, the run goes on"))]
    r = Rollouts.concat(parts, s.pad_id) if parts else Rollouts.empty()
    tokens = _fold_in(s, state, r, results, step)
    prompt_rows = [dict(prompt_id=pid, **_stats_row(stats[pid])) for pid in
                   dict.fromkeys([c.prompt_id for c in candidates] + list(results))]
    settings = {"rollout/temperature": live.temperature, "alloc/budget": live.budget,
                "alloc/budget_kind": live.budget_kind, "alloc/allocator": alloc.name,
                "alloc/params": live.allocator_params()}
    return Batch(step=step, rollouts=r, results=results, alloc_rows=alloc_rows, budget_used=ctx.budget.used,
                 info=dict(ctx.info), stages=stage, rng=rng, prompt_rows=prompt_rows, tokens=tokens, settings=settings,
                 events=events, timer=timer)


def _fold_in(s: Setup, state: StepState, r: Rollouts, results: dict[str, GroupResult], step: int) -> int:
    """Fold the step's on-policy rewards into the per-prompt statistics, remember correct responses,
    update the running mean length; return the on-policy tokens generated."""
    onp, ok = ~r.off_policy, r.correct_mask()
    pids = [s.prompts.train[int(i)].id for i in r.prompt]
    group_of = {pid: g for g, pid in enumerate(results)}
    gidx = np.asarray([group_of[p] for p in pids], dtype=np.int64)  # one pass, not one per group
    model_tokens = r.model_tokens()  # episodes: the model's tokens, never a tool result's
    for g, pid in enumerate(results):
        k = (gidx == g) & onp & r.kept_mask()  # a filter's dropped rows: not in the prompt's statistics
        state.stats[pid].update(r.rewards[k].tolist(), step, int(model_tokens[torch.as_tensor(k)].sum()),
                                s.cfg.allocator.stats_decay, correct=ok[k].tolist())
    _remember_correct(state.reuse, r, pids)
    tokens = int(model_tokens[torch.as_tensor(onp)].sum())
    state.tokens_per_rollout = 0.9 * state.tokens_per_rollout + 0.1 * tokens / max(int(onp.sum()), 1)
    return tokens


def _pool(results: dict[str, GroupResult], part: Rollouts, s: Setup, stage: int) -> None:
    model_tokens, kept = part.model_tokens(), part.kept_mask()
    for i, (p, rew, ok) in enumerate(zip(part.prompt, part.rewards, part.correct_mask())):
        if not kept[i]:  # dropped by a filter (GRPO-RoC): the group is what the allocator granted
            continue
        pid = s.prompts.train[int(p)].id
        g = results.setdefault(pid, GroupResult(pid, []))
        g.rewards.append(float(rew))
        g.oks.append(bool(ok))
        g.tokens += int(model_tokens[i])
        g.stages.append(stage)


def _remember_correct(reuse: dict[str, dict[str, Any]], r: Rollouts, pids: list[str]) -> None:
    """Keep each prompt's latest on-policy correct response (for allocators that reuse responses)."""
    for i in np.flatnonzero(r.correct_mask() & ~r.off_policy & r.kept_mask()):
        n = int(r.lengths[i])
        reuse[pids[i]] = dict(tokens=r.tokens[i, :n].tolist(), logprobs=r.logprobs[i, :n].tolist(),
                              entropy=r.entropy[i, :n].tolist(), finished=bool(r.finished[i]),
                              policy_version=int(r.policy_version[i]), temperature=float(r.temperature[i]),
                              response=r.responses[i], reward=float(r.rewards[i]), verdict=r.verdicts[i],
                              correct=True, worker=r.workers[i], version=int(r.version_start[i]))
        if r.loss_mask is not None:  # episodes: a reused episode keeps its tool tokens out of the loss
            ep = (r.episodes or [None] * r.n)[i]
            reuse[pids[i]].update(mask=r.train_mask()[i, :n].tolist(), finish_reason=(r.finish_reasons or
                                  r.default_finish())[i], episode=None if ep is None else episode_rows(ep))


def _stats_row(st: PromptStats) -> dict[str, Any]:
    return dict(alpha=st.alpha, beta=st.beta, pass_mean=st.mean, visits=st.visits, rollouts=st.rollouts,
                correct=st.correct, easy_streak=st.easy_streak, hard_streak=st.hard_streak,
                last_step=st.last_step, last_pass=st.last_pass)
