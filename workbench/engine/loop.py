"""The training loop: GRPO-family RL with per-prompt, multi-stage rollout allocation, every rollout logged.

Run it:

    workbench run                                  # the default experiment on the model organism
    workbench run configs/organism.toml --steps 50 --set optim.lr=5e-5
    workbench resume RUN_ID                        # from the last checkpoint, store rolled back to it

or from Python: `workbench.engine.run(load_config(path), store="store")` (see `runner.py`, which owns
the run's row, status and heartbeat). This module is the loop, in phases as nanochat's RL script;
its functions pass one value, the run's `RunContext` (`context.py`: what the run is built from, what
changes as it runs, its store and id). Each step applies live controls, takes the step's generated, scored and allocated batch from the
producer (`batch.py:collect`, called on demand, or ahead of the trainer by the asynchronous pipeline,
`pipeline.py`), learns from it (`learn`: advantages, the policy update), hands the new weights to the
producer (`push`: the one weight sync, to the rollout backend or the pipeline's generator), evaluates,
and records it (`record`: one store transaction), then checkpoints.

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
9. Optionally asynchronous (`[pipeline]`, docs/async.md): a generator (by default a child process)
   with its own weights makes batches up to `max_staleness` versions ahead, the bound kept at admission; stale rows are
   corrected against the generator's own log-probabilities (bypass or decoupled with a truncated
   weight). At staleness 0 it is this loop exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import torch

from workbench.algorithms import get_advantage
from workbench.allocators.base import PromptStats
from workbench.config import RunConfig
from workbench.engine.batch import Batch
from workbench.engine.checkpoint import (latest_checkpoint, load_checkpoint, rng_state, save_checkpoint, save_weights,
                                        set_rng_state)
from workbench.engine.episode_filter import trained_advantages
from workbench.engine.evaluate import evaluate
from workbench.engine.context import RunContext, RunState, apply_controls
from workbench.engine.guards import guard_step
from workbench.engine.producer import Producer, make_producer
from workbench.engine.setup import Setup, build_setup
from workbench.engine.steplog import StepWriter, episode_rows_of, rollouts_table
from workbench.engine.timing import PhaseTimer
from workbench.engine.update import policy_update, weights_finite
from workbench.errors import WorkbenchError
from workbench.faults import fault_point
from workbench.store.protocols import RunStore
from workbench.tasks.rewards import term_means


def _generator(device: torch.device, *key: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0] >> 1))
    return g


# -- the loop ----------------------------------------------------------------------------------------

def train(cfg: RunConfig, *, store: RunStore, run_id: str, resume: bool = False,
          on_step: Callable[[int, dict[str, float]], None] | None = None,
          stop_after: int | None = None) -> str:
    """Run (or continue) the training loop of `run_id`; returns the final status (finished | stopped).

    `stop_after` stops cleanly (checkpoint, status `stopped`) after that step: tests use it to
    interrupt a run exactly where a control command would."""
    parts = build_setup(cfg, store_dir=store.handle.folder(), run_id=run_id,
                        writer=StepWriter(store, run_id, background=cfg.logging.background_writes,
                                          commit_max_rows=cfg.store.commit_max_rows,
                                          commit_interval_s=cfg.store.commit_interval_s,
                                          commit_spacing_s=cfg.store.commit_spacing_s,
                                          nice=cfg.store.writer_nice,
                                          max_queued_steps=cfg.store.max_queued_steps,
                                          status_dir=store.handle.folder()))
    ctx = RunContext(parts=parts, state=RunState.start(cfg, parts), store=store, run_id=run_id, on_step=on_step,
                     stop_after=stop_after)
    try:
        status = _loop(ctx, resume)
        while status == "rollback":  # on from the checkpoint a guard rolled the run back to
            status = _loop(ctx, True)
        return status
    finally:
        parts.writer.close()
        parts.backend.close()  # Ray workers (and a local Ray runtime the run started)
        getattr(parts.shape, "close", lambda: None)()  # episodes: the tools' sandbox process


def _loop(ctx: RunContext, resume: bool) -> str:
    """Restore, start the producer (synchronous, or a generator ahead of the trainer), run the steps."""
    start, queued = _restore(ctx) if resume else (0, [])
    start += 1
    producer = make_producer(ctx, start, queued, on_stage=lambda step, stage: apply_controls(
        ctx, step=step, boundary="stage"))
    try:
        return _steps(ctx, producer, start)
    finally:
        producer.close()


def _steps(ctx: RunContext, producer: Producer, start: int) -> str:
    s, st, cfg, store, run_id, on_step = ctx.parts, ctx.state, ctx.cfg, ctx.store, ctx.run_id, ctx.on_step
    if start == 1 and cfg.eval.at_start:
        rows, metrics = _evaluate(s, 0)
        store.write_evals(run_id, 0, rows)
        if on_step:
            on_step(0, metrics)
    for step in range(start, cfg.steps + 1):
        # 0. live controls at the step boundary ----------------------------------------------------
        st.live.replay_at(step)  # commands applied at this step before a crash (resume only)
        apply_controls(ctx, step=step, boundary="step")
        producer.set_eta(st.live.staleness)
        if st.live.stop_requested:
            _checkpoint(ctx, producer, step - 1)
            return "stopped"
        if st.nonfinite_step is not None:  # no guard rolled back, paused or stopped the run: it cannot go on
            raise WorkbenchError(
                f"step {step}: the weights are not finite since the update of step {st.nonfinite_step} "
                f"(train/loss = {st.nonfinite_metrics.get('train/loss')}, train/grad_norm = "
                f"{st.nonfinite_metrics.get('train/grad_norm')}); nothing can be sampled from them. `workbench "
                "resume RUN` goes on from the last checkpoint; a `nan` guard with action rollback (the "
                "default) would have done so at once")
        t_step = time.perf_counter()

        # 1. the step's batch: candidates, the allocator's stages, rollouts, rewards, statistics -----
        batch = producer.take(step)
        timer = batch.timer

        # 2. groups, advantages, the update; the new weights go to the producer's backend ---------------
        upd = learn(ctx, batch, timer)
        if not upd.finite and st.nonfinite_step is None:  # the run's guards act on it after the record
            st.nonfinite_step, st.nonfinite_metrics = step, dict(upd.metrics)
            batch.events.append(dict(level="error", kind="nonfinite_weights", message=(
                f"step {step}: the update left weights that are not finite (train/loss = "
                f"{upd.metrics.get('train/loss')}, train/grad_norm = {upd.metrics.get('train/grad_norm')}); "
                "no evaluation or checkpoint is made from them")))
        new = s.model if upd.updated and st.nonfinite_step is None else None  # non-finite weights stay here
        with timer("weight_sync") if new is not None else contextlib.nullcontext():  # Ray, vLLM, the pipeline
            producer.push(step, new)

        # 3. evaluation (never from weights that are not finite: sampling from them fails) -----------
        eval_rows: list[dict[str, Any]] = []
        eval_metrics: dict[str, float] = {}
        if ((st.live.eval_every and step % st.live.eval_every == 0) or step == cfg.steps) and st.nonfinite_step is None:
            with timer("eval"):
                eval_rows, eval_metrics = _evaluate(s, step)

        # 4. one store transaction for the step, then the run's guards over it ----------------------
        metrics, table = record(ctx, batch, upd, (eval_rows, eval_metrics), t_step,
                                prompts=s.prompts.rows if step == start else [],
                                producer_metrics=producer.take_metrics())
        if guard_step(ctx, step, metrics, table) == "rollback":
            return "rollback"  # a guard kept the steps since its checkpoint as an earlier attempt
        if on_step:
            on_step(step, metrics)
        if st.live.checkpoint_requested or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) \
                or step == cfg.steps or step == ctx.stop_after:
            st.live.checkpoint_requested = False
            _checkpoint(ctx, producer, step)
        if cfg.checkpoint.weights_every and step % cfg.checkpoint.weights_every == 0:
            save_weights(ctx.parts.ckpt_dir, step, ctx.parts.model.state_dict())  # for the Playground; never resumed from
        if step == ctx.stop_after:
            return "stopped"
    return "finished"


# -- the update ----------------------------------------------------------------------------------------

@dataclass
class Update:
    """What the update made of a batch: advantages, which rows and groups it used, its metrics."""

    adv: np.ndarray
    used: np.ndarray
    """[N] bool: the row's group entered the update."""
    group_used: np.ndarray
    group_signal: np.ndarray
    gidx: np.ndarray
    """[N] index of each row's group in `batch.results`."""
    metrics: dict[str, float]
    staleness: np.ndarray
    """[N] versions the trainer was ahead of each row's start version."""
    is_weight: np.ndarray | None = None
    """[N] each row's mean importance weight (NaN: not in the update); None: no pipeline."""
    updated: bool = False
    finite: bool = True
    """Every weight is finite after the update (a non-finite loss or gradient makes them NaN)."""


def learn(ctx: RunContext, batch: Batch, timer: PhaseTimer) -> Update:
    """Advantages over the groups the allocator lets in, then the policy update (the loop pushes the
    new weights to its producer)."""
    s = ctx.parts
    cfg, r, results, alloc = s.cfg, batch.rollouts, batch.results, ctx.state.live.allocator
    group_of = {pid: k for k, pid in enumerate(results)}
    gidx = np.asarray([group_of[s.prompts.train[int(i)].id] for i in r.prompt], dtype=np.int64)
    group_used = np.asarray([bool(alloc.use_in_update(g)) for g in results.values()], dtype=bool)
    group_signal = np.asarray([g.has_signal for g in results.values()], dtype=bool)
    used, signal = group_used[gidx] & r.kept_mask(), group_signal[gidx]  # a filter's dropped rows: never trained
    adv = np.zeros(r.n)
    metrics: dict[str, float] = {}
    if used.any():
        rows_u = np.flatnonzero(used)
        a_t, metrics = get_advantage(cfg.algorithm.advantage)(
            torch.as_tensor(r.rewards[rows_u], dtype=torch.float32),
            torch.as_tensor(gidx[rows_u], dtype=torch.long), **cfg.algorithm.advantage_params)
        adv[rows_u] = a_t.double().numpy()
    metrics = dict(metrics)
    staleness = (batch.step - 1) - r.version_start
    pipelined = cfg.pipeline.enabled
    is_weight = np.full(r.n, np.nan) if pipelined else None
    updated = bool(used.any() and (signal[used].any() or cfg.algorithm.kl_coef > 0))
    finite = True
    if updated:
        s.writer.release()  # the previous step's commit overlaps the update, not generation
        s.backend.offload()  # vLLM frees its GPU memory for the update
        with timer("train"):
            res = policy_update(s, r, trained_advantages(r, adv, cfg.rollout.episodes.arpo_advantage), used, signal,
                                batch.rng, stale=(staleness > 0) if pipelined else None)
        metrics.update(res.metrics)
        is_weight = res.row_weight if pipelined else None
        r.trainer_logprobs = res.trainer_logprobs  # the rollouts' record (`logging.token_logprobs`)
        finite = weights_finite(s.model)
    metrics.update(in_force(s, updated))  # every step, updated or not: no gap in the curves
    return Update(adv=adv, used=used, group_used=group_used, group_signal=group_signal, gidx=gidx,
                  metrics=metrics, staleness=staleness, is_weight=is_weight, updated=updated,
                  finite=finite)


def in_force(s: Setup, updated: bool) -> dict[str, float]:
    """The trainer's settings after the step, recorded on every step (a step whose groups carry no
    signal skips the update but keeps its learning rate): `train/lr` (the rate the next optimiser step
    uses, `set_lr` included) and `train/optimizer_steps` (0 on a skipped step)."""
    return {"train/lr": float(s.optimizer.param_groups[0]["lr"]),
            "train/optimizer_steps": float(s.cfg.algorithm.updates_per_step if updated else 0)}


# -- the record ----------------------------------------------------------------------------------------

def record(ctx: RunContext, batch: Batch, upd: Update, evaluated: tuple[list[dict[str, Any]], dict[str, float]],
           t_step: float, *, prompts: list[dict[str, Any]],
           producer_metrics: dict[str, float] | None = None) -> tuple[dict[str, Any], pa.Table | None]:
    """Hand the step's rows and its evaluation's (`evaluated`: rows, metrics) to the store's writer (one
    transaction); return the step's metrics and its rollouts table (what the guards read)."""
    s, run_id, (eval_rows, eval_metrics) = ctx.parts, ctx.run_id, evaluated
    cfg, r, timer = s.cfg, batch.rollouts, batch.timer
    group_of = {pid: k for k, pid in enumerate(batch.results)}
    for row in batch.alloc_rows:
        row["used_in_update"] = bool(upd.group_used[group_of[row["prompt_id"]]]) if row["prompt_id"] in group_of \
            else False
    with timer("log"):
        metrics = _step_metrics(s, batch, upd)
        metrics.update(eval_metrics)
        table, episodes = None, None
        if cfg.logging.rollouts and r.n and logs_rollouts(cfg.logging.rollouts_block, batch.step):
            table = rollouts_table(run_id, batch.step, r, prompt_ids=s.prompts.train_ids, idx=_idx(upd.gidx),
                                   advantage=upd.adv, used=upd.used, token_ids=cfg.logging.token_ids,
                                   token_entropy=cfg.logging.token_entropy, staleness=upd.staleness,
                                   token_logprobs=cfg.logging.token_logprobs,
                                   is_weight=upd.is_weight)
            table = table.append_column("worker", pa.array(r.workers, pa.string()))
            if r.episodes is not None:  # episodes: their turns and tool calls, in the same transaction
                episodes = episode_rows_of(run_id, batch.step, r, prompt_ids=s.prompts.train_ids, idx=_idx(upd.gidx))
    metrics.update(timer.metrics())  # timing_s/log: building the rows (the commit overlaps the next step)
    metrics.update(s.backend.take_metrics())  # Ray workers: perf/worker/<name>/rollouts_per_s, ...
    metrics.update(batch.metrics)  # Ray workers behind the pipeline's generator
    metrics.update(s.shape.take_metrics())  # rollout shapes (issue #32)
    metrics.update(producer_metrics or {})  # the pipeline: generator and trainer busy/idle seconds
    events = batch.events + s.backend.take_events()  # e.g. a worker restarted by Ray, named
    writer_cpu = s.writer.take_cpu_s()
    if writer_cpu is not None:  # the store writer's commits since the last step: logging's own CPU
        metrics["timing_cpu_s/writer"] = writer_cpu
    metrics["timing_s/step"] = time.perf_counter() - t_step
    if "timing_s/trainer_idle" in metrics:  # the pipeline: the trainer's own time is the step less its wait
        metrics["timing_s/trainer_busy"] = metrics["timing_s/step"] - metrics["timing_s/trainer_idle"]
    metrics["perf/rollouts_per_s"] = batch.n_onp / max(metrics["timing_s/step"], 1e-9)
    metrics["perf/gen_tokens_per_s"] = batch.tokens / max(metrics.get("timing_s/generate", 0.0), 1e-9)
    s.writer.write(batch.step, metrics, table, batch.alloc_rows, batch.prompt_rows, eval_rows,
                   prompts, events, episodes)  # the store skips known prompts
    return metrics, table


def logs_rollouts(block: int, step: int) -> bool:
    """Whether `step` logs its rollouts under `logging.rollouts_block` (0: always)."""
    return block <= 0 or (step // block) % 2 == 0


def _idx(gidx: np.ndarray) -> np.ndarray:
    """Index of each row within its prompt's pooled group (generation order)."""
    seen: dict[int, int] = {}
    out = np.empty(len(gidx), dtype=np.int64)
    for i, g in enumerate(gidx.tolist()):
        out[i] = seen.get(g, 0)
        seen[g] = out[i] + 1
    return out


def _step_metrics(s: Setup, batch: Batch, upd: Update) -> dict[str, Any]:
    r, n_onp, tokens = batch.rollouts, batch.n_onp, batch.tokens
    onp = ~r.off_policy
    mask = r.train_mask() & torch.as_tensor(onp).unsqueeze(1)  # sampled tokens (never a tool result's)
    ent = float((r.entropy * mask).sum() / mask.sum().clamp(min=1))
    tok = r.entropy[mask].float()  # per-token quantiles: the dashboard's entropy band over the whole run
    levels = torch.tensor([0.1, 0.5, 0.9], device=tok.device)
    q = torch.quantile(tok, levels).tolist() if tok.numel() else [0.0, 0.0, 0.0]
    rew = r.rewards[onp]
    group_used, group_signal = upd.group_used, upd.group_signal
    m: dict[str, Any] = {
        "rollout/count": n_onp,
        "policy_version": s.backend.policy_version,
        "rollout/reused": int(r.off_policy.sum()),
        "rollout/prompts": len(batch.results),
        "rollout/stages": batch.stages,
        "rollout/tokens_generated": tokens,
        "rollout/reward_mean": float(rew.mean()) if len(rew) else 0.0,
        "rollout/reward_std": float(rew.std()) if len(rew) else 0.0,
        "rollout/entropy_mean": ent, **{f"rollout/entropy_p{p}": v for p, v in zip((10, 50, 90), q)},
        "rollout/length_mean": tokens / max(n_onp, 1),
        "rollout/stop_frac": float(r.finished[torch.as_tensor(onp)].float().mean()) if n_onp else 0.0,
        "rollout/zero_signal_frac": float(1 - group_signal.mean()) if len(group_signal) else 0.0,
        **term_means(r.reward_terms, onp),  # reward/<term>
        "alloc/groups_used": int(group_used.sum()),
        "alloc/groups_dropped": int((~group_used).sum()),
        "alloc/budget_used": batch.budget_used,
        **batch.settings,
    }
    m.update(upd.metrics)
    m.update({f"alloc/{k}": v for k, v in batch.info.items() if isinstance(v, (int, float))})
    if len(upd.staleness):
        m["rollout/staleness_mean"] = float(upd.staleness[onp].mean()) if n_onp else 0.0
        m["rollout/staleness_max"] = int(upd.staleness[onp].max()) if n_onp else 0
    return m


def _evaluate(s: Setup, step: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    e = s.cfg.eval
    # eval mode only while evaluating: a run resumed from a checkpoint must train in the same mode as
    # one that never stopped (the mode is not in the checkpoint)
    s.model.eval()
    try:
        out = evaluate(s.backend, s.tokenizer, s.task, s.prompts.eval, s.prompts.eval_tok, samples=e.samples,
                       temperature=e.temperature, max_new_tokens=s.cfg.sampling.max_new_tokens, greedy=e.greedy,
                       generator=_generator(s.device, s.cfg.seed, step, 0xE7A1),
                       generate=getattr(s.shape, "generate_flat", None))  # episodes: evaluated as episodes
    finally:
        s.model.train()
    fault_point("eval")
    return out


def _checkpoint(ctx: RunContext, producer: Producer, step: int) -> None:
    """Everything the loop needs to go on from `step`; the pipeline's generator is held between batches
    meanwhile, and the batches it made but the trainer has not taken go in too (none is lost or
    trained twice after a resume)."""
    ctx.parts.writer.flush()
    if ctx.state.nonfinite_step is not None:  # a checkpoint of such weights could not be resumed from
        ctx.store.add_event(ctx.run_id, "warning", "checkpoint", f"no checkpoint at step {step}: the weights are "
                            f"not finite since step {ctx.state.nonfinite_step}; a resume goes on from the last "
                            "checkpoint", step=step)
        return
    with producer.paused() as queued:
        _save(ctx, queued, step)


def _save(ctx: RunContext, queued: list, step: int) -> None:
    s, state, live = ctx.parts, ctx.state.step, ctx.state.live
    saved = dict(
        model=s.model.state_dict(), ref_model=s.ref_model.state_dict() if s.ref_model is not None else None,
        optimizer=s.optimizer.state_dict(), scheduler=s.scheduler.state_dict(), rng=rng_state(),
        sampler=s.sampler.state_dict(), live=live.state_dict(),
        stats={pid: dataclasses.asdict(st) for pid, st in state.stats.items()}, reuse=state.reuse,
        tokens_per_rollout=state.tokens_per_rollout, policy_version=s.backend.policy_version, queued=queued,
        shape=s.shape.state_dict(),  # speculative: the drafts
    )
    path = save_checkpoint(s.ckpt_dir, step, saved, keep=s.cfg.checkpoint.keep)
    ctx.store.add_event(ctx.run_id, "info", "checkpoint", f"checkpoint at step {step}", step=step,
                    data={"path": path.name})


def _restore(ctx: RunContext) -> tuple[int, list]:
    """Load the last checkpoint (if any), roll the store back to it; return its step and the pipeline's
    batches made but not yet trained on."""
    s, state, live, store, run_id = ctx.parts, ctx.state.step, ctx.state.live, ctx.store, ctx.run_id
    path = latest_checkpoint(s.ckpt_dir)
    if path is None:
        store.rollback_run(run_id, -1)
        live.plan_replay(store.controls(run_id).to_dicts(), 0)
        return 0, []
    st = load_checkpoint(path)
    s.model.load_state_dict(st["model"])
    if s.ref_model is not None and st["ref_model"] is not None:
        s.ref_model.load_state_dict(st["ref_model"])
    s.optimizer.load_state_dict(st["optimizer"])
    s.scheduler.load_state_dict(st["scheduler"])
    set_rng_state(st["rng"])
    s.sampler.load_state_dict(st["sampler"])
    live.load_state_dict(st["live"])
    state.stats = {pid: PromptStats(**d) for pid, d in st["stats"].items()}
    state.reuse = st["reuse"]
    state.tokens_per_rollout = st["tokens_per_rollout"]
    s.shape.load_state_dict(st.get("shape") or {})
    s.backend.update_weights(s.model)
    s.backend.policy_version = st["policy_version"]
    ctx.state.nonfinite_step, ctx.state.nonfinite_metrics = None, {}
    store.rollback_run(run_id, st["step"])
    replay = live.plan_replay(store.controls(run_id).to_dicts(), int(st["step"]))
    store.add_event(run_id, "info", "resume", f"resumed from the checkpoint of step {st['step']}",
                    step=st["step"], data={"replayed_controls": replay} if replay else None)
    return int(st["step"]), list(st.get("queued") or [])

