"""The training loop: GRPO-family RL with per-prompt, multi-stage rollout allocation, every rollout logged.

Run it:

    workbench run                                  # the default experiment on the model organism
    workbench run configs/organism.toml --steps 50 --set optim.lr=5e-5
    workbench resume RUN_ID                        # from the last checkpoint, store rolled back to it

or from Python: `workbench.engine.run(load_config(path), store="store")` (see `runner.py`, which owns
the run's row, status and heartbeat; this module is the loop alone and reads top to bottom: set-up,
the rollout stage, the policy update, then one flat `for step in ...` loop).

How it departs from vanilla GRPO (Shao et al. 2024, one group of G samples per prompt, sequence-mean
loss, symmetric clip, KL to a reference):
1. Rollouts per prompt are decided by a pluggable allocator (uniform groups, dynamic sampling,
   multi-stage top-ups, ...) within a per-step budget of rollouts or generated tokens; an allocator
   may grant over several stages inside one step, seeing each stage's scored results. The engine
   never branches on the allocator's name and trims any grant that would exceed the budget.
2. Groups are pooled over the stages of a step; the allocator decides which pooled groups enter the
   update (e.g. dynamic sampling drops zero-variance groups). A group whose rewards all agree carries
   no policy gradient: it is counted (`rollout/zero_signal_frac`) and, without a KL penalty, skipped
   in the forward/backward pass while its tokens still count in the loss normaliser, so the update
   equals the full-batch one.
3. Defaults follow DAPO (Yu et al. 2025): token-level loss aggregation, clip-higher
   (clip_low 0.2, clip_high 0.28), no KL term (`algorithm.kl_coef` > 0 keeps a frozen reference).
4. One optimiser step per training step by default (exactly on-policy: the ratio is 1 and the clip
   only binds with `updates_per_step` > 1 or for reused off-policy responses); the loss uses the
   sampling temperature (logits / T) so trainer and sampler agree.
5. On allocator request (AR3PO-style reuse), an all-wrong group gets one earlier correct response of
   its prompt appended, flagged `off_policy`, with its behaviour log-probabilities as the ratio's old.
6. Per-prompt Beta posteriors of the pass rate (`PromptStats`) are updated every step from on-policy
   rewards and persisted, so allocators can decide from history.
7. A group's prompt is computed once, not once per response: generation prefills each distinct
   prompt once and the update runs it once per micro-batch, its key/value cache (with gradients)
   shared by the group's responses (`grouped_logprobs`); the numbers are those of per-row copies up
   to float rounding, and a step of the default experiment takes ~40% less time.
8. Seeds: the sampler order, the allocator's rng, and each stage's sampling generator are derived
   from (seed, step, stage), so a resumed run reproduces an uninterrupted one on the CPU.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import torch

from workbench.algorithms import get_advantage
from workbench.allocators.base import Budget, Candidate, GroupResult, PromptStats, StepContext, fit_to_budget
from workbench.config import RunConfig
from workbench.engine.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from workbench.engine.evaluate import decode, evaluate
from workbench.engine.setup import Setup, apply_controls, build_setup
from workbench.engine.steplog import Rollouts, StepWriter, rollouts_table
from workbench.engine.timing import PhaseTimer
from workbench.engine.update import policy_update
from workbench.faults import fault_point
from workbench.guards.engine import guard_step
from workbench.rollout.base import SamplingParams, group_seed


def _generator(device: torch.device, *key: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0] >> 1))
    return g


# -- one stage: generate the granted rollouts and score them ---------------------------------------

def stage_seeds(seed: int, step: int, stage: int, rows: list[int]) -> list[int]:
    """One sampling seed per row: a prompt's rollouts of a stage form one group with its own stream,
    derived from (run seed, step, stage, prompt index) and never from the worker or the batch."""
    per_prompt = {i: group_seed(seed, step, stage, i) for i in dict.fromkeys(rows)}
    return [per_prompt[i] for i in rows]


def rollout_stage(s: Setup, rows: list[int], stage: int, temperature: float, gen: torch.Generator | None,
                  timer: PhaseTimer, *, seeds: list[int] | None = None) -> Rollouts:
    """Generate one rollout per entry of `rows` (indices into the training prompts) and verify it.

    With `seeds` (one per row, `stage_seeds`) each prompt's group samples from its own stream, so
    any backend or split across workers gives the same rollouts; else `gen` drives the batch."""
    cfg = s.cfg.sampling
    sampling = SamplingParams(temperature=temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                              max_new_tokens=cfg.max_new_tokens)
    with timer("generate"):
        prompts = [s.train_tok[i] for i in rows]
        batch = (s.backend.generate(prompts, sampling, seeds=seeds) if seeds is not None
                 else s.backend.generate(prompts, sampling, generator=gen))
        fault_point("generate")
        texts = decode(s.tokenizer, batch)
    s.part_workers.append(batch.workers or ["local"] * len(rows))
    with timer("verify"):
        results = [s.task.verify(t, s.train[i]) for t, i in zip(texts, rows)]
    n = len(rows)
    return Rollouts(
        tokens=batch.tokens.cpu(), logprobs=batch.logprobs.float().cpu(), entropy=batch.entropy.float().cpu(),
        lengths=batch.lengths.cpu().long(), finished=batch.finished.cpu().bool(),
        prompt=np.asarray(rows, dtype=np.int64), stage=np.full(n, stage, dtype=np.int32),
        policy_version=np.full(n, s.backend.policy_version, dtype=np.int64),
        temperature=np.full(n, temperature, dtype=np.float64), off_policy=np.zeros(n, dtype=bool),
        responses=texts, rewards=np.asarray([r.reward for r in results], dtype=np.float64),
        verdicts=[r.verdict for r in results],
    )


def reused_row(s: Setup, prompt: int, stage: int) -> Rollouts:
    """The cached earlier correct response of a prompt, as one off-policy row."""
    c = s.reuse[s.train[prompt].id]
    t = len(c["tokens"])
    s.part_workers.append([c.get("worker", "local")])
    return Rollouts(
        tokens=torch.tensor([c["tokens"]], dtype=torch.long),
        logprobs=torch.tensor([c["logprobs"]], dtype=torch.float32),
        entropy=torch.tensor([c["entropy"]], dtype=torch.float32),
        lengths=torch.tensor([t]), finished=torch.tensor([c["finished"]]),
        prompt=np.array([prompt]), stage=np.array([stage], dtype=np.int32),
        policy_version=np.array([c["policy_version"]]), temperature=np.array([c["temperature"]]),
        off_policy=np.array([True]), responses=[c["response"]], rewards=np.array([c["reward"]]),
        verdicts=[c["verdict"]],
    )


# -- the loop ----------------------------------------------------------------------------------------

def train(cfg: RunConfig, *, store: Any, store_dir: str, run_id: str, resume: bool = False,
          on_step: Callable[[int, dict[str, float]], None] | None = None,
          stop_after: int | None = None) -> str:
    """Run (or continue) the training loop of `run_id`; returns the final status (finished | stopped).

    `stop_after` stops cleanly (checkpoint, status `stopped`) after that step: tests use it to
    interrupt a run exactly where a control command would."""
    s = build_setup(cfg, store_dir=store_dir, run_id=run_id,
                    writer=StepWriter(store, run_id, background=cfg.logging.background_writes,
                                      commit_max_rows=cfg.store.commit_max_rows,
                                      commit_interval_s=cfg.store.commit_interval_s,
                                      nice=cfg.store.writer_nice))
    try:
        status = _loop(s, cfg, store, run_id, resume, on_step, stop_after)
        while status == "rollback":  # on from the checkpoint a guard rolled the run back to
            status = _loop(s, cfg, store, run_id, True, on_step, stop_after)
        return status
    finally:
        s.writer.close()
        s.backend.close()  # Ray workers (and a local Ray runtime the run started)


def _loop(s: Setup, cfg: RunConfig, store: Any, run_id: str, resume: bool,
          on_step: Callable[[int, dict[str, float]], None] | None, stop_after: int | None) -> str:
    start = _restore(s, store, run_id) + 1 if resume else 1
    if start == 1 and cfg.eval.at_start:
        rows, metrics = _evaluate(s, 0)
        store.write_evals(run_id, 0, rows)
        if on_step:
            on_step(0, metrics)
    for step in range(start, cfg.steps + 1):
        s.live.replay_at(step)  # commands applied at this step before a crash (resume only)
        apply_controls(s, store, run_id, step=step, boundary="step")
        if s.live.stop_requested:
            _checkpoint(s, store, run_id, step - 1)
            return "stopped"
        timer, t_step = PhaseTimer(), time.perf_counter()
        live, alloc = s.live, s.live.allocator
        budget = Budget(live.budget_kind, live.budget, 0, s.tokens_per_rollout)
        rng = np.random.default_rng([cfg.seed, step, 0xA110C])

        # 1. candidates and the allocator's stages ------------------------------------------------
        def draw(k: int) -> list[Candidate]:
            return [Candidate(s.train[i].id, s.stats.setdefault(s.train[i].id, PromptStats(s.train[i].id)),
                              s.train[i].level) for i in s.sampler.draw(k)]

        with timer("allocate"):
            candidates = draw(alloc.candidates_wanted(cfg.allocator.prompts_per_step))
            ctx = StepContext(step=step, stage=0, budget=budget, candidates=candidates, stats=s.stats,
                              rng=rng, draw=draw, prompts_per_step=cfg.allocator.prompts_per_step)
            grants = alloc.begin_step(ctx)
        before = {pid: (st.alpha, st.beta) for pid, st in s.stats.items() if pid in {c.prompt_id for c in candidates}}
        parts: list[Rollouts] = []
        s.part_workers = []  # the worker of each row of `parts`, in order
        s.backend.expected_new_tokens = s.tokens_per_rollout  # balances a split across workers (Ray)
        alloc_rows: list[dict[str, Any]] = []
        results: dict[str, GroupResult] = {}
        stage = 0
        while True:
            asked = [g.n for g in grants]
            grants = fit_to_budget(grants, ctx.budget)
            rows = [s.index[g.prompt_id] for g in grants for _ in range(g.n)]
            for g, ask in zip(grants, asked):
                st = s.stats.setdefault(g.prompt_id, PromptStats(g.prompt_id))
                a0, b0 = before.get(g.prompt_id, (st.alpha, st.beta))
                alloc_rows.append(dict(step=step, stage=stage, prompt_id=g.prompt_id, allocator=alloc.name,
                                       asked=int(ask), granted=int(g.n), reason=g.reason,
                                       predicted_pass=g.predicted_pass, alpha_before=a0, beta_before=b0,
                                       budget_kind=budget.kind, budget=budget.amount))
            if rows:
                part = rollout_stage(s, rows, stage, live.temperature, None, timer,
                                     seeds=stage_seeds(cfg.seed, step, stage, rows))
                parts.append(part)
                _pool(results, part, s, stage)
                spent = len(rows) if budget.kind == "rollouts" else int(part.lengths.sum())
                ctx.budget = dataclasses.replace(ctx.budget, used=ctx.budget.used + spent)
            for row in alloc_rows[-len(grants):] if grants else []:
                row["budget_left"] = ctx.budget.left
            stage += 1
            if stage >= cfg.allocator.max_stages:
                break
            apply_controls(s, store, run_id, step=step, boundary="stage")
            ctx.stage = stage
            with timer("allocate"):
                grants = alloc.next_stage(ctx, results)
            if not grants:
                break
        with timer("allocate"):
            for pid in alloc.reuse_requests(results) if parts else []:
                if pid in s.reuse and pid in results and results[pid].correct == 0:
                    part = reused_row(s, s.index[pid], stage - 1)
                    parts.append(part)
                    _pool(results, part, s, stage - 1)
        events = [] if parts else [dict(level="warning", kind="empty_step", message=(
            f"step {step}: the allocator {alloc.name!r} granted no rollouts (budget {budget.amount} "
            f"{budget.kind}); nothing to learn from, the run goes on"))]
        r = Rollouts.concat(parts, s.pad_id) if parts else Rollouts.empty()
        workers = [w for ws in s.part_workers for w in ws]

        # 2. groups, advantages, the update --------------------------------------------------------
        pids = [s.train[int(i)].id for i in r.prompt]
        group_of = {pid: k for k, pid in enumerate(results)}
        gidx = np.asarray([group_of[p] for p in pids], dtype=np.int64)
        group_used = np.asarray([bool(alloc.use_in_update(g)) for g in results.values()], dtype=bool)
        group_signal = np.asarray([g.has_signal for g in results.values()], dtype=bool)
        used, signal = group_used[gidx], group_signal[gidx]
        adv = np.zeros(r.n)
        adv_metrics: dict[str, float] = {}
        if used.any():
            rows_u = np.flatnonzero(used)
            a_t, adv_metrics = get_advantage(cfg.algorithm.advantage)(
                torch.as_tensor(r.rewards[rows_u], dtype=torch.float32),
                torch.as_tensor(gidx[rows_u], dtype=torch.long), **cfg.algorithm.advantage_params)
            adv[rows_u] = a_t.double().numpy()
        train_metrics: dict[str, float] = {}
        if used.any() and (signal[used].any() or cfg.algorithm.kl_coef > 0):
            s.writer.release()  # the previous step's commit overlaps the update, not generation
            s.backend.offload()  # vLLM frees its GPU memory for the update
            with timer("train"):
                train_metrics = policy_update(s, r, adv, used, signal, rng)
            with timer("weight_sync"):  # to the rollout workers (Ray) / engine (vLLM); ~0 in-process
                s.backend.update_weights(s.model)

        # 3. per-prompt statistics, reuse cache, eval -----------------------------------------------
        onp = ~r.off_policy
        for pid, g in results.items():
            k = (gidx == group_of[pid]) & onp
            s.stats[pid].update(r.rewards[k].tolist(), step, int(r.lengths[torch.as_tensor(k)].sum()),
                                cfg.allocator.stats_decay)
        _remember_correct(s, r, pids, workers)
        tokens = int(r.lengths[torch.as_tensor(onp)].sum())
        n_onp = int(onp.sum())
        s.tokens_per_rollout = 0.9 * s.tokens_per_rollout + 0.1 * tokens / max(n_onp, 1)
        eval_rows: list[dict[str, Any]] = []
        eval_metrics: dict[str, float] = {}
        if (live.eval_every and step % live.eval_every == 0) or step == cfg.steps:
            with timer("eval"):
                eval_rows, eval_metrics = _evaluate(s, step)

        # 4. one store transaction for the step ----------------------------------------------------
        for row in alloc_rows:
            row["used_in_update"] = bool(group_used[group_of[row["prompt_id"]]]) if row["prompt_id"] in group_of else False
        with timer("log"):
            metrics = _step_metrics(s, r, results, group_used, group_signal, adv_metrics, train_metrics,
                                    eval_metrics, ctx, stage, tokens, n_onp)
            metrics.update({f"alloc/{k}": v for k, v in ctx.info.items() if isinstance(v, (int, float))})
            table = None
            if cfg.logging.rollouts and r.n:
                table = rollouts_table(run_id, step, r, prompt_ids=s.train_ids, idx=_idx(gidx),
                                       advantage=adv, used=used, token_ids=cfg.logging.token_ids,
                                       token_entropy=cfg.logging.token_entropy)
                table = table.append_column("worker", pa.array(workers, pa.string()))
            prompt_rows = [dict(prompt_id=pid, **_stats_row(s.stats[pid])) for pid in
                           dict.fromkeys([c.prompt_id for c in candidates] + list(results))]
        metrics.update(timer.metrics())  # timing_s/log: building the rows (the commit overlaps the next step)
        metrics.update(s.backend.take_metrics())  # Ray workers: perf/worker/<name>/rollouts_per_s, ...
        events += s.backend.take_events()  # e.g. a worker restarted by Ray, named
        metrics["timing_s/step"] = time.perf_counter() - t_step
        metrics["perf/rollouts_per_s"] = n_onp / max(metrics["timing_s/step"], 1e-9)
        metrics["perf/gen_tokens_per_s"] = tokens / max(metrics.get("timing_s/generate", 0.0), 1e-9)
        s.writer.write(step, metrics, table, alloc_rows, prompt_rows, eval_rows,
                       s.prompt_rows if step == start else [], events)  # the store skips known prompts
        if guard_step(s, store, run_id, step, metrics, table) == "rollback":
            return "rollback"  # a guard kept the steps since its checkpoint as an earlier attempt
        if on_step:
            on_step(step, metrics)
        if live.checkpoint_requested or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) \
                or step == cfg.steps or step == stop_after:
            live.checkpoint_requested = False
            _checkpoint(s, store, run_id, step)
        if step == stop_after:
            return "stopped"
    return "finished"


def _pool(results: dict[str, GroupResult], part: Rollouts, s: Setup, stage: int) -> None:
    for i, (p, rew) in enumerate(zip(part.prompt, part.rewards)):
        pid = s.train[int(p)].id
        g = results.setdefault(pid, GroupResult(pid, []))
        g.rewards.append(float(rew))
        g.tokens += int(part.lengths[i])
        g.stages.append(stage)


def _idx(gidx: np.ndarray) -> np.ndarray:
    """Index of each row within its prompt's pooled group (generation order)."""
    seen: dict[int, int] = {}
    out = np.empty(len(gidx), dtype=np.int64)
    for i, g in enumerate(gidx.tolist()):
        out[i] = seen.get(g, 0)
        seen[g] = out[i] + 1
    return out


def _remember_correct(s: Setup, r: Rollouts, pids: list[str], workers: list[str]) -> None:
    """Keep each prompt's latest on-policy correct response (for allocators that reuse responses)."""
    for i in np.flatnonzero((r.rewards >= 0.5) & ~r.off_policy):
        n = int(r.lengths[i])
        s.reuse[pids[i]] = dict(tokens=r.tokens[i, :n].tolist(), logprobs=r.logprobs[i, :n].tolist(),
                                entropy=r.entropy[i, :n].tolist(), finished=bool(r.finished[i]),
                                policy_version=int(r.policy_version[i]), temperature=float(r.temperature[i]),
                                response=r.responses[i], reward=float(r.rewards[i]), verdict=r.verdicts[i],
                                worker=workers[i])


def _stats_row(st: PromptStats) -> dict[str, Any]:
    return dict(alpha=st.alpha, beta=st.beta, pass_mean=st.mean, visits=st.visits, rollouts=st.rollouts,
                correct=st.correct, easy_streak=st.easy_streak, hard_streak=st.hard_streak,
                last_step=st.last_step, last_pass=st.last_pass)


def _step_metrics(s: Setup, r: Rollouts, results: dict[str, GroupResult], group_used: np.ndarray,
                  group_signal: np.ndarray, adv_metrics: dict[str, float], train_metrics: dict[str, float],
                  eval_metrics: dict[str, float], ctx: StepContext, stages: int, tokens: int,
                  n_onp: int) -> dict[str, Any]:
    onp = ~r.off_policy
    mask = r.mask() & torch.as_tensor(onp).unsqueeze(1)
    ent = float((r.entropy * mask).sum() / mask.sum().clamp(min=1))
    tok = r.entropy[mask].float()  # per-token quantiles: the dashboard's entropy band over the whole run
    levels = torch.tensor([0.1, 0.5, 0.9], device=tok.device)
    q = torch.quantile(tok, levels).tolist() if tok.numel() else [0.0, 0.0, 0.0]
    rew = r.rewards[onp]
    live = s.live
    m: dict[str, Any] = {
        "rollout/count": n_onp,
        "policy_version": s.backend.policy_version,
        "rollout/reused": int(r.off_policy.sum()),
        "rollout/prompts": len(results),
        "rollout/stages": stages,
        "rollout/tokens_generated": tokens,
        "rollout/reward_mean": float(rew.mean()) if len(rew) else 0.0,
        "rollout/reward_std": float(rew.std()) if len(rew) else 0.0,
        "rollout/entropy_mean": ent, **{f"rollout/entropy_p{p}": v for p, v in zip((10, 50, 90), q)},
        "rollout/length_mean": tokens / max(n_onp, 1),
        "rollout/stop_frac": float(r.finished[torch.as_tensor(onp)].float().mean()) if n_onp else 0.0,
        "rollout/frac_zero_signal_groups": float(1 - group_signal.mean()) if len(group_signal) else 0.0,
        "rollout/zero_signal_frac": float(1 - group_signal.mean()) if len(group_signal) else 0.0,
        "rollout/temperature": live.temperature,
        "alloc/groups_used": int(group_used.sum()),
        "alloc/groups_dropped": int((~group_used).sum()),
        "alloc/budget": live.budget,
        "alloc/budget_kind": live.budget_kind,
        "alloc/budget_used": ctx.budget.used,
        "alloc/allocator": live.allocator.name,
        "alloc/params": live.allocator_params(),
    }
    m.update(adv_metrics)
    m.update(train_metrics)
    m.update(eval_metrics)
    return m


def _evaluate(s: Setup, step: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    e = s.cfg.eval
    # eval mode only while evaluating: a run resumed from a checkpoint must train in the same mode as
    # one that never stopped (the mode is not in the checkpoint)
    s.model.eval()
    try:
        out = evaluate(s.backend, s.tokenizer, s.task, s.eval, s.eval_tok, samples=e.samples,
                       temperature=e.temperature, max_new_tokens=s.cfg.sampling.max_new_tokens, greedy=e.greedy,
                       generator=_generator(s.device, s.cfg.seed, step, 0xE7A1))
    finally:
        s.model.train()
    fault_point("eval")
    return out


def _checkpoint(s: Setup, store: Any, run_id: str, step: int) -> None:
    s.writer.flush()
    state = dict(
        model=s.model.state_dict(), ref_model=s.ref_model.state_dict() if s.ref_model is not None else None,
        optimizer=s.optimizer.state_dict(), scheduler=s.scheduler.state_dict(), rng=rng_state(),
        sampler=s.sampler.state_dict(), live=s.live.state_dict(),
        stats={pid: dataclasses.asdict(st) for pid, st in s.stats.items()}, reuse=s.reuse,
        tokens_per_rollout=s.tokens_per_rollout, policy_version=s.backend.policy_version,
    )
    path = save_checkpoint(s.ckpt_dir, step, state, keep=s.cfg.checkpoint.keep)
    store.add_event(run_id, "info", "checkpoint", f"checkpoint at step {step}", step=step,
                    data={"path": path.name})


def _restore(s: Setup, store: Any, run_id: str) -> int:
    """Load the last checkpoint (if any), roll the store back to it; return its step."""
    from workbench.engine.checkpoint import latest_checkpoint

    path = latest_checkpoint(s.ckpt_dir)
    if path is None:
        store.rollback_run(run_id, -1)
        s.live.plan_replay(store.controls(run_id).to_dicts(), 0)
        return 0
    st = load_checkpoint(path)
    s.model.load_state_dict(st["model"])
    if s.ref_model is not None and st["ref_model"] is not None:
        s.ref_model.load_state_dict(st["ref_model"])
    s.optimizer.load_state_dict(st["optimizer"])
    s.scheduler.load_state_dict(st["scheduler"])
    set_rng_state(st["rng"])
    s.sampler.load_state_dict(st["sampler"])
    s.live.load_state_dict(st["live"])
    s.stats = {pid: PromptStats(**d) for pid, d in st["stats"].items()}
    s.reuse = st["reuse"]
    s.tokens_per_rollout = st["tokens_per_rollout"]
    s.backend.update_weights(s.model)
    s.backend.policy_version = st["policy_version"]
    store.rollback_run(run_id, st["step"])
    replay = s.live.plan_replay(store.controls(run_id).to_dicts(), int(st["step"]))
    store.add_event(run_id, "info", "resume", f"resumed from the checkpoint of step {st['step']}",
                    step=st["step"], data={"replayed_controls": replay} if replay else None)
    return int(st["step"])

