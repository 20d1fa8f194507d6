"""Measurements on the real model (SmolLM2-135M-Instruct, `model.path = "smollm2"`), each a function
that returns a JSON-able dict (`workbench bench real-model ...` prints them; docs/real-model.md
records them):

- `step0`: held-out pass@1 and pass@k of the untrained model on the configured task (configs/
  smollm2.toml), with 90% bootstrap intervals over prompts, and example responses with their verdicts.
- `gsm8k`: the same on the first items of a GSM8K-format JSONL file (worked answers, `#### x`).
- `agreement`: the behaviour log-probs recorded at generation against the trainer's log-probs of the
  same tokens at the same weights (mean and max |difference| per token, the k3 KL estimate).
- `speed`: the rollout phase against bare `model.generate` on the same batch, a few training steps
  split by phase, and the process's peak resident memory.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from workbench.models.sources import smollm2_config

LEVEL = 0.90


def _interval(values: np.ndarray, replicates: int = 2000, seed: int = 0) -> list[float]:
    """90% percentile-bootstrap interval of the mean of `values` (one per prompt)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (replicates, len(values)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return [round(float(lo), 4), round(float(hi), 4)]


def pass_figures(correct: Sequence[int], samples: int, ks: Sequence[int] = (1, 8)) -> dict[str, Any]:
    """pass@k (unbiased estimator) over prompts with its 90% bootstrap interval over prompts."""
    from workbench.analysis.passk import pass_at_k

    c = np.asarray(correct, dtype=np.int64)
    out: dict[str, Any] = {"prompts": int(len(c)), "samples": samples}
    for k in sorted({*ks, samples}):
        if k <= samples:
            per = np.asarray(pass_at_k(np.full(len(c), samples), c, k), dtype=float)
            out[f"pass{k}"] = round(float(per.mean()), 4)
            out[f"pass{k}_ci90"] = _interval(per)
    return out


def sample_prompts(model: Any, tokenizer: Any, task: Any, prompts: list[Any], *, samples: int, max_new_tokens: int,
                   chat_template: bool, seed: int = 0, batch: int = 64, examples: int = 12) -> dict[str, Any]:
    """Sample `samples` responses per prompt (T=1, the engine's backend and per-prompt seeds) and
    judge them with the task's verifier: per-prompt correct counts, pass@1/@8 with intervals, finish
    reasons, tokens/s, and the first `examples` responses with their verdicts."""
    from workbench.engine.evaluate import decode
    from workbench.engine.setup import encode_prompts
    from workbench.rollout.base import SamplingParams, group_seed
    from workbench.rollout.hf import HFBackend

    backend = HFBackend(model, tokenizer)
    ids = encode_prompts(tokenizer, prompts, chat_template)
    rows = [i for i in range(len(prompts)) for _ in range(samples)]
    per = max(1, batch // samples) * samples
    correct = np.zeros(len(prompts), dtype=np.int64)
    shown: list[dict[str, Any]] = []
    reasons: dict[str, int] = {}
    tokens, gen_s = 0, 0.0
    for start in range(0, len(rows), per):
        part = rows[start:start + per]
        out = backend.generate([ids[i] for i in part], SamplingParams(max_new_tokens=max_new_tokens),
                               seeds=[group_seed(seed, i) for i in part])
        tokens += int(out.lengths.sum())
        gen_s += out.gen_time_s
        for i, text, reason in zip(part, decode(tokenizer, out), out.finish_reasons()):
            verdict = task.verify(text, prompts[i])
            correct[i] += bool(verdict.correct)
            reasons[reason] = reasons.get(reason, 0) + 1
            if len(shown) < examples:
                shown.append({"prompt": prompts[i].text, "answer": prompts[i].answer, "response": text,
                              "finish": reason, "verdict": verdict.verdict})
    return {**pass_figures(correct.tolist(), samples), "correct": correct.tolist(), "finish_reasons": reasons,
            "max_new_tokens": max_new_tokens, "tokens": tokens, "tokens_per_s": round(tokens / gen_s, 1),
            "examples": shown}


def _load(cfg: Any, cache: str | Path) -> tuple[Any, Any]:
    import torch

    from workbench.models.sources import run_model_dir
    from workbench.models import load_model

    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    return load_model(str(run_model_dir(cfg, cache)))


def step0(cache: str | Path, *, samples: int = 8, prompts: int = 0, overrides: Sequence[str] = (),
          seed: int = 0) -> dict[str, Any]:
    """The untrained model on the held-out split of the real-model task (all of it, or `prompts`)."""
    from workbench.config import task_config
    from workbench.tasks import get_task

    cfg = smollm2_config(overrides)
    t0 = time.perf_counter()
    model, tokenizer = _load(cfg, cache)
    load_s = time.perf_counter() - t0
    task = get_task(task_config(cfg.task))
    held_out = task.eval_prompts()[:prompts or None]
    out = sample_prompts(model, tokenizer, task, held_out, samples=samples, seed=seed,
                         max_new_tokens=cfg.sampling.max_new_tokens, chat_template=cfg.model.chat_template)
    return {"model": cfg.model.path, "task": dict(cfg.task), "load_s": round(load_s, 1), **out}


def gsm8k(cache: str | Path, data: str | Path, *, items: int = 16, samples: int = 4, max_new_tokens: int = 256,
          seed: int = 0) -> dict[str, Any]:
    """The untrained model on the first `items` rows of a GSM8K-format JSONL (question, answer ending
    `#### x`), with the chat template and the math verifier."""
    from workbench.tasks import FileTaskConfig, get_task

    cfg = smollm2_config()
    model, tokenizer = _load(cfg, cache)
    task = get_task(FileTaskConfig(path=str(data), prompt_field="question", answer_field="answer",
                                   answer_extraction="gsm8k", verifier="math", eval_frac=0.0,
                                   template="{prompt}\nPut the final answer after ####."))
    rows = task.train_prompts()[:items]
    out = sample_prompts(model, tokenizer, task, rows, samples=samples, seed=seed, max_new_tokens=max_new_tokens,
                         chat_template=True, batch=32, examples=4)
    return {"model": cfg.model.path, "data": Path(data).name, "items": len(rows), **out}


def agreement(cache: str | Path, *, prompts: int = 4, samples: int = 4, overrides: Sequence[str] = (),
              seed: int = 0) -> dict[str, Any]:
    """Behaviour log-probs (recorded by the rollout backend while sampling) against the trainer's
    log-probs of the same tokens (`grouped_logprobs`, the model in train mode as in the update),
    float32: mean and max |difference| per generated token and the k3 estimate of KL(behaviour ||
    trainer) (`exp(d) - 1 - d`, d = trainer - behaviour, averaged over tokens)."""
    import torch

    from workbench.algorithms.logprobs import group_sequences, grouped_logprobs
    from workbench.config import task_config
    from workbench.engine.setup import encode_prompts
    from workbench.rollout.base import SamplingParams, group_seed
    from workbench.rollout.hf import HFBackend
    from workbench.tasks import get_task

    cfg = smollm2_config(overrides)
    model, tokenizer = _load(cfg, cache)
    task = get_task(task_config(cfg.task))
    chosen = task.train_prompts()[:prompts]
    ids = encode_prompts(tokenizer, chosen, cfg.model.chat_template)
    rows = [ids[i] for i in range(len(chosen)) for _ in range(samples)]
    backend = HFBackend(model, tokenizer)
    out = backend.generate(rows, SamplingParams(temperature=cfg.sampling.temperature,
                                                max_new_tokens=cfg.sampling.max_new_tokens),
                           seeds=[group_seed(seed, i // samples) for i in range(len(rows))])
    model.train()
    batch = group_sequences(rows, out.tokens, out.lengths, backend.pad_token_id)
    with torch.no_grad():
        trainer, _ = grouped_logprobs(model, batch, pad_token_id=backend.pad_token_id,
                                      temperature=cfg.sampling.temperature)
    mask = batch.response_mask.bool()
    d = (trainer - out.logprobs)[mask].double()
    return {"sequences": len(rows), "tokens": int(mask.sum()), "dtype": str(next(model.parameters()).dtype),
            "mean_abs_diff": float(d.abs().mean()), "max_abs_diff": float(d.abs().max()),
            "k3_kl": float((d.exp() - 1 - d).mean()), "finish_reasons": out.finish_reasons()}


def peak_rss_mb() -> float:
    """This process's peak resident memory (MB) so far (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def speed(cache: str | Path, *, steps: int = 3, repeats: int = 2, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Rollout phase vs bare `model.generate` on the same grants (medians of `repeats` pairs after one
    warm-up pair), then `steps` training steps of the real-model run with each step's time split by
    phase (medians), and the process's peak resident memory."""
    import tempfile

    from workbench.engine import run
    from benchmarks.engine_bench import rollout_vs_bare

    cfg = smollm2_config(["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps}",
                          *overrides])
    root = Path(tempfile.mkdtemp(prefix="workbench-real-"))
    models = Path(cache) / "models"
    models.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(models.resolve())
    marks: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def on_step(step: int, m: dict[str, Any]) -> None:
        now = time.perf_counter()
        if step > 0:
            marks.append({"wall_s": now - last[0], **m})
        last[0] = now

    try:
        bare = rollout_vs_bare(cfg, root, repeats=repeats)
        run(cfg, store=str(root), on_step=on_step)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    phases = {k: statistics.median(m.get(f"timing_s/{k}", 0.0) for m in marks)
              for k in ("generate", "verify", "train", "log")}
    step_s = statistics.median(m.get("timing_s/step", m["wall_s"]) for m in marks)  # the step alone, not the
    # set-up before step 1 nor the final evaluation and checkpoint after the last (they are in wall_s)
    return {"model": cfg.model.path, "batch": f"{cfg.allocator.prompts_per_step} prompts x "
            f"{cfg.allocator.params.get('n')} rollouts, max_new_tokens {cfg.sampling.max_new_tokens}",
            "threads": _threads(), "rollout_vs_bare": bare, "steps": len(marks), "step_s": round(step_s, 2),
            "step_wall_s": [round(m["wall_s"], 1) for m in marks],
            "phase_s": {k: round(v, 2) for k, v in phases.items()},
            "phase_share": {k: round(v / step_s, 3) for k, v in phases.items()},
            "tokens_per_step": statistics.median(m.get("rollout/tokens_generated", 0) for m in marks),
            "gen_tokens_per_s": round(statistics.median(m.get("perf/gen_tokens_per_s", 0.0) for m in marks), 1),
            "peak_rss_mb": round(peak_rss_mb(), 0)}


def _threads() -> int:
    import torch

    return torch.get_num_threads()
