"""`workbench bench episodes`: the organism's tool task (`task.profile = "tools"`) at its warm start, with
and without the calculator, side by side on the same held-out prompts and seeds.

    workbench bench episodes --json                  # 8 samples per held-out prompt, both arms
    workbench bench episodes --samples 16 --store S --json

Each arm samples `samples` episodes per held-out prompt with `decode_episodes` (the in-process backend,
the cache kept across turns). With the tool, each `<calc>...</calc>` runs in the sandbox
(`workbench/tools`, the real calculator under its limits) and the model reads `<result>value</result>`;
without it, every call is answered `unknown_tool` and the model reads an empty `<result></result>` (the
organism reads digits only). Reported per arm: pass@1 and pass@k (the unbiased estimator) with 90%
bootstrap intervals over prompts, the share of episodes that called the tool, the tool error rate, the
entropy of the first tokens after a tool result against the first turn's (ARPO's observation), the
calls' p50 / p95 seconds, and per level. Learning over RL training, against a run without the tool, is
`workbench bench episodes-learning` (benchmarks/episodes_learning.py).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np


def _interval(values: np.ndarray, seed: int, ci: float = 0.9, n_boot: int = 2000) -> list[float]:
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (n_boot, len(values)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - ci) / 2, (1 + ci) / 2])
    return [round(float(lo), 4), round(float(hi), 4)]


def _arm(backend, tok, prompts, task, samples: int, seed: int, box) -> dict[str, Any]:
    import polars as pl

    from workbench.analysis.episodes import entropy_after_tools
    from workbench.analysis.passk import pass_at_k
    from workbench.episodes import episode_rows
    from workbench.episodes import ToolCall
    from workbench.rollout.base import SamplingParams, group_seed
    from workbench.rollout.episode_decode import EpisodeLimits, decode_episodes, to_episodes
    from workbench.tools import parse

    def run_tool(text: str) -> ToolCall:
        parsed = parse(text, "calc", {"calculator"} if box is not None else set())
        args = str(parsed.arguments.get("expression", text))
        if parsed.kind != "call":
            res = parsed.failure()
            return ToolCall("calculator", args, res.text, error=res.kind, seconds=0.0)
        res = box.call("calculator", parsed.arguments)
        return ToolCall("calculator", args, res.text, error=res.kind if res.error else None, seconds=res.seconds,
                        truncated=res.truncated)

    def result_tokens(call: ToolCall) -> list[int]:
        shown = "" if call.error else call.result  # the organism reads digits only
        return tok("<result>" + shown + "</result>", add_special_tokens=False)["input_ids"]

    ids = [tok(p.text)["input_ids"] for p in prompts for _ in range(samples)]
    seeds = [group_seed(seed, i // samples) for i in range(len(ids))]
    t = time.perf_counter()
    batch = decode_episodes(backend, ids, SamplingParams(max_new_tokens=16), limits=EpisodeLimits(),
                            call_end_ids=[tok.convert_tokens_to_ids("</calc>")], run_tool=run_tool,
                            result_tokens=result_tokens, seeds=seeds)
    wall = time.perf_counter() - t
    eps = to_episodes(batch, [prompts[i // samples].text for i in range(len(ids))], ids,
                      lambda x: tok.decode(x, skip_special_tokens=False))
    correct = np.zeros(len(eps), dtype=bool)
    for i, ep in enumerate(eps):
        text = "".join(t.text if t.role == "assistant" else f"<result>{t.text}</result>" for t in ep.response_turns)
        correct[i] = task.verify(text.replace("<eos>", ""), prompts[i // samples]).reward >= 1
    per_prompt = correct.reshape(len(prompts), samples)
    c = per_prompt.sum(axis=1)
    p1, pk = c / samples, np.array([pass_at_k(samples, int(x), samples) for x in c], dtype=float)
    calls = [call for ep in eps for call in ep.tool_calls]
    secs = np.array([call.seconds for call in calls]) if calls else np.zeros(1)
    levels = {}
    for lv in sorted({p.level for p in prompts}):
        rows = np.array([p.level == lv for p in prompts])
        called = np.array([len(eps[i].tool_calls) > 0 for i in range(len(eps))]).reshape(len(prompts), samples)[rows]
        levels[str(lv)] = {"spec": prompts[int(np.flatnonzero(rows)[0])].metadata.get("spec"),
                           "pass1": round(float(p1[rows].mean()), 4), "call_rate": round(float(called.mean()), 4)}
    rows = []
    for i, ep in enumerate(eps):
        rows += episode_rows(ep, {"run_id": "bench", "step": 0, "stage": 0, "prompt_id": str(i // samples),
                                  "idx": i % samples})[0]
    dh = entropy_after_tools(pl.DataFrame(rows), k=10) if rows else None
    return {
        "episodes": len(eps), "pass1": round(float(p1.mean()), 4), "pass1_ci90": _interval(p1, seed),
        f"pass{samples}": round(float(pk.mean()), 4), f"pass{samples}_ci90": _interval(pk, seed + 1),
        "call_rate": round(float(np.mean([len(ep.tool_calls) > 0 for ep in eps])), 4),
        "calls": len(calls), "tool_error_rate": round(float(np.mean([c.error is not None for c in calls])), 4) if calls else None,
        "tool_s_p50": round(float(np.median(secs)), 5), "tool_s_p95": round(float(np.quantile(secs, 0.95)), 5),
        "entropy_after_tool_minus_first": (None if dh is None or dh.is_empty() else
                                           {"n": dh.height, "median": round(float(dh["dh"].median()), 4),
                                            "mean": round(float(dh["dh"].mean()), 4),
                                            "share_above_0": round(float((dh["dh"] > 0).mean()), 4)}),
        "model_tokens": int(sum(batch.model_tokens)), "decode_s": round(wall, 2),
        "finish_reasons": {r: batch.finish_reasons.count(r) for r in sorted(set(batch.finish_reasons))},
        "levels": levels,
    }


def bench_episodes(store_dir: str, *, samples: int = 8, seed: int = 0, threads: int = 1,
                   organism: dict[str, Any] | None = None, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both arms on the tools organism's held-out prompts (module docstring); one JSON-able dict.
    `organism` / `task` override the recipe and the task (tests: a small organism on two levels)."""
    import torch

    from workbench.models.loading import load_model
    from workbench.models.sources import run_model_dir
    from workbench.rollout.hf import HFBackend
    from workbench.tasks.arithmetic import ArithmeticTask, ArithmeticTaskConfig
    from workbench.tools import Sandbox, ToolLimits

    task_cfg = {"profile": "tools", **(task or {})}
    config = {"task": task_cfg, "model": {"organism": {**(organism or {}), "task": task_cfg}} if organism else {}}
    path = run_model_dir(config, store_dir)
    torch.set_num_threads(threads)
    model, tok = load_model(path)
    task_obj = ArithmeticTask(ArithmeticTaskConfig.from_dict(task_cfg))
    prompts = task_obj.eval_prompts()
    backend = HFBackend(model, tok)
    box = Sandbox(ToolLimits())
    try:
        with_tool = _arm(backend, tok, prompts, task_obj, samples, seed, box)
    finally:
        box.close()
    without = _arm(backend, tok, prompts, task_obj, samples, seed, None)
    return {"organism": str(path.name), "prompts": len(prompts), "samples": samples, "seed": seed,
            "load": list(os.getloadavg()), "with_tool": with_tool, "without_tool": without,
            "pass1_gain": round(with_tool["pass1"] - without["pass1"], 4)}
