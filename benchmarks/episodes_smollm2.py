"""`workbench bench episodes-smollm2`: SmolLM2-135M-Instruct on its calculator task (configs/smollm2-tools.toml)
at step 0, with and without the tool, side by side on the same held-out word problems and seeds.

    workbench bench episodes-smollm2 --json                       # every held-out question x 8, both arms
    workbench bench episodes-smollm2 --prompts 12 --samples 8 --set model.threads=2 --json

- With the tool: the config's prompt (the calculator described in the user turn, Hermes syntax; or, with
  `model.chat_tools`, its schema in the chat template's system turn: configs/smollm2-tools-warm.toml) through
  the run's own `EpisodeShape` (the engine's episodes: `decode_episodes` on the in-process backend, each
  call run in the sandbox, the result fed back through `tools.result_template`, the ChatML user turn).
- Without it: the same questions asked plainly (`--plain-template`, "... Answer with the number only.",
  no tool described) and sampled as one turn by `HFBackend.generate`, with the same per-question seeds.

Both are judged by the config's task (the `number` verifier on the text after the last tool result).
Reported per arm: pass@1 and pass@k (the unbiased estimator) with 90% percentile-bootstrap intervals
over questions, and for the tool arm the share of episodes that called, the calls that failed (by
kind), the finish reasons, model tokens and decode seconds, and a few episodes as text.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

CONFIG = "configs/smollm2-tools.toml"
PLAIN_TEMPLATE = "A shop packs {a} boxes with {b} pens in each box. How many pens does the shop pack? " \
                 "Answer with the number only."
"""The tool arm's question without the tool's description (configs/smollm2-tools.toml's last line)."""


def interval(values: np.ndarray, seed: int, ci: float = 0.9, n_boot: int = 2000) -> list[float]:
    """Percentile-bootstrap interval of the mean of `values` (one value per question)."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (n_boot, len(values)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - ci) / 2, (1 + ci) / 2])
    return [round(float(lo), 4), round(float(hi), 4)]


def pass_figures(correct: np.ndarray, samples: int, seed: int) -> dict[str, Any]:
    """pass@1 and pass@samples with 90% intervals from a [questions, samples] array of verdicts."""
    from workbench.analysis.passk import pass_at_k

    c = correct.sum(axis=1)
    p1 = c / samples
    pk = np.array([pass_at_k(samples, int(x), samples) for x in c], dtype=float)
    return {"pass1": round(float(p1.mean()), 4), "pass1_ci90": interval(p1, seed),
            f"pass{samples}": round(float(pk.mean()), 4), f"pass{samples}_ci90": interval(pk, seed + 1),
            "questions_solved_once": int((c > 0).sum())}


def _tool_arm(cfg, backend, tok, task, prompts, ids, seeds, samples: int, seed: int) -> dict[str, Any]:
    from workbench.rollout.base import SamplingParams
    from workbench.rollout.shapes.episodes import EpisodeShape, flatten

    shape = EpisodeShape(cfg.rollout.episodes, cfg.tools, tok, cfg.sampling.max_new_tokens)
    sampling = SamplingParams(temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens)
    t = time.perf_counter()
    try:
        eb = shape.run(backend, ids, sampling, seeds=seeds)
    finally:
        shape.close()
    wall = time.perf_counter() - t
    episodes = shape.episodes(eb, ids)
    batch, mask = flatten(eb, backend.pad_token_id)
    texts = tok.batch_decode([row[:n] for row, n in zip(batch.tokens.tolist(), batch.lengths.tolist())],
                             skip_special_tokens=True)
    correct = np.array([task.verify(text, prompts[i // samples]).reward >= 1 for i, text in enumerate(texts)])
    calls = [c for ep in episodes for c in ep.tool_calls]
    errors: dict[str, int] = {}
    for c in calls:
        if c.error:
            errors[c.error] = errors.get(c.error, 0) + 1
    called = np.array([len(ep.tool_calls) > 0 for ep in episodes])
    ok_call = np.array([any(c.error is None for c in ep.tool_calls) for ep in episodes])
    return {
        **pass_figures(correct.reshape(len(prompts), samples), samples, seed),
        "episodes": len(episodes), "call_rate": round(float(called.mean()), 4),
        "right_call_rate": round(float(ok_call.mean()), 4),
        "pass1_when_called": round(float(correct[called].mean()), 4) if called.any() else None,
        "pass1_when_not_called": round(float(correct[~called].mean()), 4) if (~called).any() else None,
        "calls": len(calls), "tool_error_rate": round(len([c for c in calls if c.error]) / len(calls), 4) if calls else None,
        "tool_errors": errors, "tool_tokens_masked": int((~mask & (batch.tokens != backend.pad_token_id)).sum()),
        "finish_reasons": {r: eb.finish_reasons.count(r) for r in sorted(set(eb.finish_reasons))},
        "model_tokens": int(sum(eb.model_tokens)), "decode_s": round(wall, 2),
        "model_tokens_per_s": round(sum(eb.model_tokens) / max(wall, 1e-9), 2),
        "examples": [{"correct": bool(correct[i]), "text": texts[i][:400]} for i in range(0, len(texts), max(1, len(texts) // 6))],
    }


def _plain_arm(cfg, backend, tok, task, prompts, ids, seeds, samples: int, seed: int) -> dict[str, Any]:
    from workbench.rollout.base import SamplingParams

    sampling = SamplingParams(temperature=cfg.sampling.temperature, max_new_tokens=cfg.sampling.max_new_tokens)
    t = time.perf_counter()
    batch = backend.generate(ids, sampling, seeds=seeds)
    wall = time.perf_counter() - t
    texts = tok.batch_decode([row[:n] for row, n in zip(batch.tokens.tolist(), batch.lengths.tolist())],
                             skip_special_tokens=True)
    correct = np.array([task.verify(text, prompts[i // samples]).reward >= 1 for i, text in enumerate(texts)])
    return {**pass_figures(correct.reshape(len(prompts), samples), samples, seed), "episodes": len(texts),
            "model_tokens": int(batch.lengths.sum()), "decode_s": round(wall, 2),
            "examples": [{"correct": bool(correct[i]), "text": texts[i][:300]} for i in range(0, len(texts), max(1, len(texts) // 4))]}


def bench_episodes_smollm2(store_dir: str, *, config: str = CONFIG, overrides: Sequence[str] = (), samples: int = 8,
                           prompts: int = 0, seed: int = 0, plain_template: str = PLAIN_TEMPLATE,
                           arms: Sequence[str] = ("tool", "plain")) -> dict[str, Any]:
    """Both arms on the config's held-out questions (module docstring); one JSON-able dict. `prompts`:
    the first that many held-out questions spread over the levels (0: all)."""
    import torch

    from workbench.config import load_config
    from workbench.engine.setup import chat_tools, encode_prompts
    from workbench.models.loading import load_model
    from workbench.models.sources import run_model_dir
    from workbench.rollout.base import group_seed
    from workbench.rollout.hf import HFBackend
    from workbench.tasks import get_task
    from workbench.tasks.base import Prompt

    cfg = load_config(config, list(overrides))
    if cfg.tools is None or cfg.rollout.shape != "episodes":
        from workbench.errors import ConfigError

        raise ConfigError(f"bench episodes-smollm2: {config} must set rollout.shape = \"episodes\" and [tools]")
    path = run_model_dir(cfg, store_dir)
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    model, tok = load_model(path)
    task = get_task(dict(cfg.task))
    questions = task.eval_prompts()
    if prompts:
        questions = [questions[int(i)] for i in np.linspace(0, len(questions) - 1, min(prompts, len(questions)))]
    backend = HFBackend(model, tok)
    seeds = [group_seed(seed, i // samples) for i in range(len(questions) * samples)]
    plain_task = get_task({**cfg.task, "template": plain_template})
    plain = {p.id: p for p in plain_task.eval_prompts()}
    out: dict[str, Any] = {"config": config, "model": path.name, "prompts": len(questions), "samples": samples,
                           "seed": seed, "threads": torch.get_num_threads(), "load_before": list(os.getloadavg())}
    for arm in arms:
        qs: list[Prompt] = questions if arm == "tool" else [plain[q.id] for q in questions]
        tools = chat_tools(cfg) if arm == "tool" else None  # model.chat_tools: the schema in the system turn
        ids = [x for x in encode_prompts(tok, qs, True, tools) for _ in range(samples)]
        run = _tool_arm if arm == "tool" else _plain_arm
        out["with_tool" if arm == "tool" else "without_tool"] = run(cfg, backend, tok, task, qs, ids, seeds,
                                                                    samples, seed)
    if "with_tool" in out and "without_tool" in out:
        out["pass1_gain"] = round(out["with_tool"]["pass1"] - out["without_tool"]["pass1"], 4)
    out["load_after"] = list(os.getloadavg())
    return out


CURVE_METRICS = ("rollout/reward_mean", "episodes/call_rate", "episodes/tool_calls", "episodes/tool_error_rate",
                 "episodes/model_tokens", "episodes/tool_tokens", "episodes/turns", "rollout/zero_signal_frac",
                 "timing_s/generate", "timing_s/train", "timing_s/step")
"""A training run's per-step figures `run_curve` reports (the metric catalogue's names)."""


def run_curve(store_dir: str, run_id: str) -> dict[str, Any]:
    """A finished run's curve from the store: per step the CURVE_METRICS, per evaluation held-out pass@1
    with its 90% interval over questions (`workbench bench episodes-smollm2 --curve RUN`)."""
    from workbench.store import open_store

    with open_store(store_dir) as st:
        steps = st.run_steps(run_id)
        evals = st.evals(run_id)
        run = st.run(run_id)
    out: dict[str, Any] = {"run_id": run_id, "name": run.get("name"), "status": run.get("status"), "steps": []}
    for row in steps.sort("step").to_dicts():
        metrics = row.get("metrics") or {}
        got = {k: metrics.get(k) for k in CURVE_METRICS}
        out["steps"].append({"step": row["step"], **{k: (round(float(v), 4) if v is not None else None)
                                                      for k, v in got.items()}})
    for step, group in evals.group_by("step", maintain_order=True):
        rate = (group["correct"] / group["samples"]).to_numpy()
        out.setdefault("evals", []).append({"step": int(step[0]), "questions": group.height,
                                            "samples": int(group["samples"].max()),
                                            "pass1": round(float(rate.mean()), 4), "pass1_ci90": interval(rate, 0)})
    out["evals"] = sorted(out.get("evals", []), key=lambda e: e["step"])
    return out
