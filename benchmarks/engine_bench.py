"""Engine benchmarks: `workbench bench engine` (speed, logging overhead, rollout overhead, TRL peer)
and `workbench bench learn` (does the default experiment learn?). The GPU check lives in `gpu_check.py`.

Every figure is measured side by side in one process, as medians over steps (the first steps, which
warm caches up, and the last, which evaluates, are left out). Runs go to a temporary store; the
organism comes from the default store's cache (built there on first use).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "organism.toml"
WARMUP_STEPS = 2


def base_config(overrides: list[str], base: dict[str, Any] | None = None):
    """The default experiment (or `base`, a run config as a dict) with `overrides` applied."""
    from workbench.config import RunConfig, apply_overrides, load_config

    if base is not None:
        return RunConfig.from_dict(apply_overrides(dict(base), overrides))
    return load_config(DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None, overrides)


PEER_HINT = "add the peer with: pip install -e '.[trl]'"


def missing_peer() -> str | None:
    """None when TRL's GRPOTrainer can be benchmarked here, else the missing package's name."""
    for name in ("trl", "datasets"):
        try:
            __import__(name)
        except ImportError:
            return name
    return None


@contextmanager
def temp_store(organism_cache: Path, cfg) -> Iterator[Path]:
    """A temporary store whose models/ is the cache's (the organism is built there once)."""
    from workbench.models.sources import run_model_dir

    run_model_dir(cfg, organism_cache)  # build the organism in the cache when missing
    root = Path(tempfile.mkdtemp(prefix="workbench-bench-"))
    try:
        if (organism_cache / "models").is_dir():
            (root / "models").symlink_to((organism_cache / "models").resolve())
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def timed_run(cfg, store: Path) -> list[dict[str, Any]]:
    """Run `cfg`; per step: wall time since the previous step ended, this process's CPU time in it (all
    threads), and the step's metrics."""
    from workbench.engine import run

    marks: list[dict[str, Any]] = []
    last = [time.perf_counter(), _cpu()]

    def on_step(step: int, m: dict[str, Any]) -> None:
        now, cpu = time.perf_counter(), _cpu()
        if step > 0:
            marks.append({"step": step, "wall_s": now - last[0], "cpu_s": cpu - last[1], **m})
        last[0], last[1] = now, cpu

    run(cfg, store=str(store), on_step=on_step)
    return marks[WARMUP_STEPS:-1] if len(marks) > WARMUP_STEPS + 1 else marks


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def logging_cpu(on: list[dict[str, Any]]) -> dict[str, float]:
    """What logging costs in CPU, per step of the runs that log every rollout: the store writer thread's
    commits (`timing_cpu_s/writer`, off the critical path) and the rows built on the step's path
    (`timing_s/log`), in ms (medians), and the writer's share of the process's CPU over those steps.
    CPU time does not count the wait for a core, so it moves far less with the machine's load than the
    wall-clock overhead does: on a machine whose cores the step keeps busy, the writer's share is about
    what logging can cost the step."""
    writer = [m.get("timing_cpu_s/writer", 0.0) for m in on]
    cpu = sum(m["cpu_s"] for m in on)
    return {"writer_ms_per_step": round(1000 * median(writer), 2),
            "build_ms_per_step": round(1000 * median([m.get("timing_s/log", 0.0) for m in on]), 2),
            "process_cpu_ms_per_step": round(1000 * median([m["cpu_s"] for m in on]), 1),
            "writer_share_pct": round(100 * sum(writer) / cpu, 2) if cpu > 0 else float("nan")}


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


INTERLEAVE_BLOCK = 4
"""Steps per block in the interleaved logging run: rollouts logged in one block, not in the next."""


def interleaved_overhead(marks: list[dict[str, Any]], block: int) -> dict[str, float]:
    """The logging overhead within runs whose rollouts were logged in alternate blocks of `block`
    steps (`logging.rollouts_block`): steps of logged blocks against steps of unlogged ones, the first
    step of each block left out (it still carries the previous block's background commit)."""
    from workbench.engine.loop import logs_rollouts

    body = [m for m in marks if m["step"] % block != 0]
    on = [m for m in body if logs_rollouts(block, m["step"])]
    off = [m for m in body if not logs_rollouts(block, m["step"])]
    return {**overhead_interval(on, off), "steps_on": len(on), "steps_off": len(off), "block": block}


def overhead_interval(on: list[dict[str, Any]], off: list[dict[str, Any]], *, level: float = 0.9,
                      resamples: int = 2000, seed: int = 0) -> dict[str, float]:
    """The logging overhead (median step time with logging over without, in %) with a bootstrap
    interval: the steps of each side resampled `resamples` times (seeded). Steps of a round sit beside
    the other side's steps of the same round (the rounds interleave), so drifting load widens the
    interval instead of moving the figure; an interval that straddles 0 says the overhead is below
    what this machine can resolve."""
    import random

    a, b = [m["wall_s"] for m in on], [m["wall_s"] for m in off]
    if not a or not b:
        return {"low": float("nan"), "median": float("nan"), "high": float("nan"), "level": level}
    rng = random.Random(seed)
    draws = sorted(100 * (median(rng.choices(a, k=len(a))) / median(rng.choices(b, k=len(b))) - 1)
                   for _ in range(resamples))
    tail = (1 - level) / 2
    return {"low": round(draws[int(tail * (resamples - 1))], 2), "median": round(100 * (median(a) / median(b) - 1), 2),
            "high": round(draws[int((1 - tail) * (resamples - 1))], 2), "level": level}


def rollout_vs_bare(cfg, store: Path, repeats: int = 7) -> dict[str, float]:
    """Our rollout phase (generate, decode, verify) against bare `model.generate` of the same grants."""
    import torch

    from workbench.engine.batch import rollout_stage, stage_seeds
    from workbench.engine.setup import build_setup
    from workbench.engine.timing import PhaseTimer
    from workbench.rollout.base import SamplingParams
    from workbench.rollout.hf import bare_generate

    s = build_setup(cfg.replace(rollout=type(cfg.rollout)()), store_dir=store, run_id="bench")  # in-process
    n = cfg.allocator.params.get("n", 8)
    rows = [i for i in range(cfg.allocator.prompts_per_step) for _ in range(n)]
    sampling = SamplingParams(temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens)
    ours, bare, ours_tok, bare_tok = [], [], [], []
    for k in range(repeats + 1):
        t0 = time.perf_counter()
        r = rollout_stage(s, rows, 0, cfg.sampling.temperature, None, PhaseTimer(),
                          seeds=stage_seeds(k, 0, 0, rows))
        t1 = time.perf_counter()
        torch.manual_seed(k)
        b = bare_generate(s.model, s.tokenizer, [s.prompts.train_tok[i] for i in rows], sampling, device=s.device)
        t2 = time.perf_counter()
        if k:  # the first pair warms up
            ours.append(t1 - t0)
            bare.append(t2 - t1)
            ours_tok.append(int(r.lengths.sum()))
            bare_tok.append(int((b.tokens != s.pad_id).sum()))
    return {"ours_s": median(ours), "bare_s": median(bare), "ratio": median(ours) / median(bare),
            "ours_tokens_per_s": sum(ours_tok) / sum(ours), "bare_tokens_per_s": sum(bare_tok) / sum(bare)}


def trl_rollouts_per_s(cfg, store: Path, steps: int) -> dict[str, float]:
    """TRL's GRPOTrainer on the same workload (organism, task, prompts x generations, max new tokens,
    CPU), rollouts per second as the median over steps."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.config import task_config
    from workbench.models.sources import run_model_dir
    from workbench.models import load_model
    from workbench.tasks import get_task, verify

    model, tokenizer = load_model(str(run_model_dir(cfg, store)))
    task = get_task(task_config(cfg.task))
    data = Dataset.from_list([{"prompt": p.text, "answer": p.answer} for p in task.train_prompts()])
    n = cfg.allocator.params.get("n", 8)

    def reward(prompts, completions, answer, **_: Any) -> list[float]:
        return [verify(c, a, method="exact").reward for c, a in zip(completions, answer)]

    marks: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            marks.append(time.perf_counter())

    out = Path(tempfile.mkdtemp(prefix="trl-", dir=store))
    args = GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=cfg.allocator.prompts_per_step * n, num_generations=n,
        max_completion_length=cfg.sampling.max_new_tokens, temperature=cfg.sampling.temperature, top_k=0,
        top_p=1.0, beta=0.0, loss_type="dapo", scale_rewards="group", learning_rate=cfg.optim.lr,
        max_steps=steps + WARMUP_STEPS + 1, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        bf16=False, use_vllm=False, num_iterations=1, gradient_accumulation_steps=1, dataloader_num_workers=0,
        seed=cfg.seed, disable_dropout=True, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Timer()])
    t0 = time.perf_counter()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)  # TRL as its users run it (our runs set it on; see setup.py)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs; our stdout is JSON
            trainer.train()
    finally:
        torch.use_deterministic_algorithms(deterministic)
    walls = [b - a for a, b in zip([t0] + marks[:-1], marks)][WARMUP_STEPS:]
    step_s = median(walls)
    return {"steps_per_s": 1 / step_s, "rollouts_per_s": cfg.allocator.prompts_per_step * n / step_s}


def bench_engine(*, steps: int = 12, with_trl: bool = True, rounds: int = 2, overrides: list[str] | None = None,
                 cache: str | os.PathLike | None = None, backend: str = "hf", workers: list[int] | None = None,
                 base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The engine's speed figures on the default workload (see docs/engine.md).

    `backend="ray"` also times the run with the Ray backend for each count in `workers`, interleaved
    with the in-process runs: `ray[N].rollouts_per_s` and `rayN_vs_inprocess`. Without TRL installed
    (`missing_peer()`), the peer is skipped and `trl_missing` names the package."""
    from workbench.store import default_store_path

    base_over = ["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps + WARMUP_STEPS + 1}"]
    base_over += list(overrides or [])
    on_cfg = base_config(base_over, base)
    off_cfg = base_config(base_over + ["logging.rollouts=false"], base)
    inter_cfg = base_config([*base_over[:-1], f"steps={2 * steps + WARMUP_STEPS + 1}",
                             f"logging.rollouts_block={INTERLEAVE_BLOCK}"], base)
    ray_cfgs = {n: base_config(base_over + ["rollout.backend=\"ray\"", f"rollout.workers={n}"], base)
                for n in (workers or [1, 2])} if backend == "ray" else {}
    absent = missing_peer() if with_trl else None
    cache_dir = Path(cache) if cache else default_store_path()
    with temp_store(cache_dir, on_cfg) as store, _ray_runtime(bool(ray_cfgs)):
        on, off, ray_marks, per_round, inter = [], [], {n: [] for n in ray_cfgs}, [], []
        for _ in range(rounds):  # interleaved, so drifting machine load hits every side alike
            inter += timed_run(inter_cfg, store)
            a, b = timed_run(on_cfg, store), timed_run(off_cfg, store)
            on, off = on + a, off + b
            a_s, b_s = median([m["wall_s"] for m in a]), median([m["wall_s"] for m in b])
            per_round.append(100 * (a_s - b_s) / b_s)
            for n, cfg in ray_cfgs.items():
                ray_marks[n] += timed_run(cfg, store)
        bare = rollout_vs_bare(on_cfg, store)
        trl = trl_rollouts_per_s(on_cfg, store, steps) if with_trl and absent is None else None
    step_on, step_off = median([m["wall_s"] for m in on]), median([m["wall_s"] for m in off])
    wall = sum(m["wall_s"] for m in on)
    rollouts = median([m["rollout/count"] for m in on])
    share = {k: sum(m.get(f"timing_s/{k}", 0.0) for m in on) / wall for k in ("generate", "verify", "train", "log")}
    out: dict[str, Any] = {
        "steps_per_s": 1 / step_on,
        "rollouts_per_s": rollouts / step_on,
        "gen_tokens_per_s": median([m["perf/gen_tokens_per_s"] for m in on]),
        "timing_share": share,
        "logging_overhead_pct": 100 * (step_on - step_off) / step_off,
        "logging_overhead_pct_per_round": per_round,
        "logging_overhead_pct_median_of_rounds": median(per_round),
        "logging_overhead_pct_interval": overhead_interval(on, off),
        "logging_overhead_interleaved": interleaved_overhead(inter, INTERLEAVE_BLOCK),
        "logging_cpu": logging_cpu(on),
        "rollout_vs_bare_ratio": bare["ratio"],
        "trl_rollouts_per_s": trl["rollouts_per_s"] if trl else None,
        "ratio_vs_trl": (rollouts / step_on) / trl["rollouts_per_s"] if trl else None,
        "detail": {
            "step_s_logging_on": step_on, "step_s_logging_off": step_off, "steps_timed_per_side": len(on),
            "rollouts_per_step": rollouts, "rollout_phase_s": bare["ours_s"], "bare_generate_s": bare["bare_s"],
            "trl_steps_per_s": trl["steps_per_s"] if trl else None, "torch_threads": _threads(),
        },
    }
    if with_trl and absent is not None:
        out["trl_missing"] = f"{absent} is not installed: {PEER_HINT}"
    if ray_cfgs:
        out["inprocess_rollouts_per_s"] = out["rollouts_per_s"]
        out["ray"] = {}
        for n, marks in ray_marks.items():
            step_s = median([m["wall_s"] for m in marks])
            out["ray"][str(n)] = _ray_figures(marks, step_s)
            out[f"ray{n}_vs_inprocess"] = out["ray"][str(n)]["rollouts_per_s"] / out["rollouts_per_s"]
    return out


def _ray_figures(marks: list[dict[str, Any]], step_s: float) -> dict[str, Any]:
    """Rollouts/s of the Ray runs, their phase times (median per step) and each worker's own rate."""
    workers = sorted({k.split("/")[2] for m in marks for k in m if k.startswith("perf/worker/")
                      and k.endswith("/rollouts_per_s")})
    return {
        "rollouts_per_s": median([m["rollout/count"] for m in marks]) / step_s,
        "step_s": step_s,
        "generate_s": median([m.get("timing_s/generate", 0.0) for m in marks]),
        "train_s": median([m.get("timing_s/train", 0.0) for m in marks]),
        "weight_sync_s": median([m.get("timing_s/weight_sync", 0.0) for m in marks]),
        "worker_rollouts_per_s": {w: median([m[f"perf/worker/{w}/rollouts_per_s"] for m in marks
                                              if f"perf/worker/{w}/rollouts_per_s" in m]) for w in workers},
        "steps_timed": len(marks),
    }


@contextmanager
def _ray_runtime(needed: bool) -> Iterator[None]:
    """One local Ray runtime for every Ray run of the benchmark (not one per run)."""
    if not needed:
        yield
        return
    import ray

    from workbench.rollout.ray_backend import start_local_ray

    started = not ray.is_initialized()
    if started:
        start_local_ray(attempts=5, num_cpus=os.cpu_count())
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def bench_learn(*, seeds: int = 3, store: str | os.PathLike | None = None, overrides: list[str] | None = None,
                cache: str | os.PathLike | None = None, model: str = "organism") -> dict[str, Any]:
    """The default experiment (`model` "organism") or the real-model run (`model` "smollm2",
    configs/smollm2.toml) once per seed: held-out pass@1 (T=1) before and after, in points, with the
    90% bootstrap interval of the mean gain over seeds."""
    from workbench.store import default_store_path
    from workbench.engine import run

    def config(over: list[str]):
        if model == "smollm2":
            from workbench.models.sources import smollm2_config

            return smollm2_config(over)
        return base_config(over)

    cfgs = [config([f"seed={seed}", "eval.every=0"] + list(overrides or [])) for seed in range(seeds)]
    cache_dir = Path(cache) if cache else default_store_path()
    warm, final, minutes, run_ids = [], [], [], []

    def one(cfg, root: Path) -> None:
        evals: dict[int, float] = {}

        def on_step(step: int, m: dict[str, Any]) -> None:
            if "eval/pass1" in m:
                evals[step] = m["eval/pass1"]

        t0 = time.perf_counter()
        run_ids.append(run(cfg, store=str(root), on_step=on_step))
        minutes.append((time.perf_counter() - t0) / 60)
        warm.append(evals[0])
        final.append(evals[cfg.steps])

    if store is not None:
        for cfg in cfgs:
            one(cfg, Path(store))
    else:
        with temp_store(cache_dir, cfgs[0]) as root:
            for cfg in cfgs:
                one(cfg, root)
    from benchmarks.intervals import bootstrap_mean

    gains = [100 * (f - w) for f, w in zip(final, warm)]
    return {
        "warm_pass1": statistics.mean(warm),
        "final_pass1": final,
        "gain_points_mean": statistics.mean(gains),
        "gain_points_std": statistics.stdev(gains) if len(gains) > 1 else 0.0,
        "gain_points_ci90": bootstrap_mean(gains) if len(gains) > 1 else None,
        "model": cfgs[0].model.path,
        "minutes": statistics.mean(minutes),
        "minutes_max": max(minutes),
        "steps": cfgs[0].steps,
        "run_ids": run_ids if store is not None else [],
    }

