"""The engine against TRL's GRPOTrainer on the real model (`workbench bench real-model trl`): the same
model (SmolLM2-135M-Instruct, the store's converted copy), task (configs/smollm2.toml's one-digit
additions through the chat template, the `number` verifier), batch (prompts x rollouts), response cap,
temperature, learning rate and loss family (a clipped token-level policy gradient, no KL), on the CPU
with the same torch threads; rollouts per second as the median over each side's timed steps, the
sides alternated `rounds` times so that drifting machine load hits both."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

WARMUP = 1
"""Steps of each run not timed (the first step also pays the set-up: loading, allocator, first forward)."""


def _engine_steps(cfg: Any, root: Path) -> list[dict[str, Any]]:
    """One engine run of `cfg`: each step's wall time (from the previous step's end, less the final
    evaluation's and checkpoint's time, which TRL's steps do not have) and its metrics."""
    from workbench.engine import run

    marks: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def on_step(step: int, m: dict[str, Any]) -> None:
        now = time.perf_counter()
        if step > 0:  # the final evaluation and checkpoint run inside the last step's callback window
            extra = m.get("timing_s/eval", 0.0) + m.get("timing_s/checkpoint", 0.0)
            marks.append({"wall_s": now - last[0] - extra, **m})
        last[0] = now

    run(cfg, store=str(root / "store"), on_step=on_step)
    return marks[WARMUP:]


def grpo_kwargs(cfg: Any, out: Path, max_steps: int) -> dict[str, Any]:
    """TRL's `GRPOConfig` arguments for the run config `cfg`'s settings (group size, lengths, sampling,
    loss, clip, learning rate), on the CPU without vLLM: what both sides of a comparison share."""
    n = int(cfg.allocator.params.get("n", 8))
    return dict(
        output_dir=str(out), per_device_train_batch_size=cfg.allocator.prompts_per_step * n, num_generations=n,
        max_completion_length=cfg.sampling.max_new_tokens, temperature=cfg.sampling.temperature, top_k=0,
        top_p=1.0, beta=0.0, loss_type="dapo", scale_rewards="group", learning_rate=cfg.optim.lr,
        max_steps=max_steps, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False,
        use_vllm=False, num_iterations=1, gradient_accumulation_steps=1, dataloader_num_workers=0, seed=cfg.seed,
        disable_dropout=True, disable_tqdm=True, epsilon=cfg.algorithm.clip_low, epsilon_high=cfg.algorithm.clip_high,
        max_grad_norm=cfg.optim.grad_clip)


def _trl_steps(cfg: Any, model_dir: Path, out: Path, steps: int) -> list[float]:
    """TRL's GRPOTrainer on `cfg`'s workload: the wall time of each timed step."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.config import task_config
    from workbench.models import load_model
    from workbench.tasks import get_task

    model, tokenizer = load_model(str(model_dir))
    task = get_task(task_config(cfg.task))
    prompts = {p.id: p for p in task.train_prompts()}
    chat = bool(cfg.model.chat_template)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p.text}] if chat else p.text, "pid": p.id}
                              for p in prompts.values()])

    def reward(prompts, completions, pid, **_: Any) -> list[float]:  # noqa: ANN001 - TRL's signature
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [task.verify(t, prompts_by_id[i]).reward for t, i in zip(texts, pid)]

    prompts_by_id = prompts
    marks: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            marks.append(time.perf_counter())

    args = GRPOConfig(**grpo_kwargs(cfg, out, steps + WARMUP))
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Timer()])
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)  # TRL as its users run it
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs; our stdout is JSON
            trainer.train()
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return [b - a for a, b in zip([t0] + marks[:-1], marks)][WARMUP:]


def trl_vs_engine(cache: str | Path, *, steps: int = 2, rounds: int = 1,
                  overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Rollouts/s of the engine and of TRL's GRPOTrainer on the real-model run, side by side."""
    import torch

    from workbench.models.sources import run_model_dir, smollm2_config
    from benchmarks.engine_bench import missing_peer
    from benchmarks.real_model import peak_rss_mb

    absent = missing_peer()
    if absent is not None:
        from workbench.errors import ConfigError

        raise ConfigError(f"bench real-model trl: {absent} is not installed (pip install -e '.[trl]')")
    cfg = smollm2_config(["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps + WARMUP}",
                          *overrides])
    model_dir = run_model_dir(cfg, Path(cache))  # converted into the cache's models/ when missing
    threads = cfg.model.threads or torch.get_num_threads()
    rollouts = cfg.allocator.prompts_per_step * int(cfg.allocator.params.get("n", 8))
    ours: list[dict[str, Any]] = []
    theirs: list[float] = []
    load = [os.getloadavg()[0]]
    root = Path(tempfile.mkdtemp(prefix="workbench-real-trl-"))
    try:
        (root / "store").mkdir()
        (root / "store" / "models").symlink_to((Path(cache) / "models").resolve())
        for r in range(rounds):
            ours += _engine_steps(cfg.replace(seed=cfg.seed + r), root)
            torch.set_num_threads(threads)
            theirs += _trl_steps(cfg, model_dir, root / f"trl-{r}", steps)
            load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours_s = statistics.median(m["wall_s"] for m in ours)
    theirs_s = statistics.median(theirs)
    return {
        "model": cfg.model.path, "batch": f"{cfg.allocator.prompts_per_step} prompts x "
        f"{rollouts // cfg.allocator.prompts_per_step} rollouts, max_new_tokens {cfg.sampling.max_new_tokens}, "
        f"temperature {cfg.sampling.temperature}, chat template {bool(cfg.model.chat_template)}",
        "threads": threads, "steps_timed_per_side": [len(ours), len(theirs)], "rounds": rounds,
        "engine_rollouts_per_s": round(rollouts / ours_s, 3), "trl_rollouts_per_s": round(rollouts / theirs_s, 3),
        "ratio_vs_trl": round(theirs_s / ours_s, 2),
        "engine_step_s": [round(m["wall_s"], 1) for m in ours], "trl_step_s": [round(s, 1) for s in theirs],
        "engine_phase_s": {k: round(statistics.median(m.get(f"timing_s/{k}", 0.0) for m in ours), 2)
                           for k in ("generate", "train", "verify", "log")},
        "engine_tokens_per_step": statistics.median(m.get("rollout/tokens_generated", 0) for m in ours),
        "load_average_1min": [round(x, 1) for x in load], "peak_rss_mb": round(peak_rss_mb(), 0),
        "trl_version": __import__("trl").__version__,
    }
