"""`workbench bench episodes-speed`: the model's decode throughput inside episodes against single-turn
decoding of the same prompts, side by side, tool time excluded (issue #40's target: at least 0.8x), and
what each calculator call adds to its episode (issue #40: at most 20 ms p95).

    workbench bench episodes-speed --json                        # the tools organism, 64 prompts x 8, 5 rounds
    workbench bench episodes-speed --config configs/smollm2-tools.toml --prompts 4 --samples 4 --rounds 2 --json

Each round first runs the episodes once untimed (which tells each row's count of sampled tokens: the
same seeds give the same episodes whatever the timing), then times three ways in rotated order on the
same prompts, batch and seeds:

- episodes: the config's `EpisodeShape` (`decode_episodes` on the in-process backend, the real tools in
  their sandbox); model tokens per second = the tokens the model sampled / (the decoding's wall time
  minus the time it sat blocked on tools with no row left to decode, `EpisodeBatch.tool_time_s`). Rows
  waiting for their own tool while others decode, and the forwards that feed tool results, are counted:
  that is the cost of episodes.
- same tokens (issue #40's baseline, "single-turn decoding of the same number of model tokens"): each
  row decodes, in one turn from its prompt, exactly as many tokens as its episode sampled (end of text
  does not stop it; `HFBackend.decode` with per-row limits); tokens per second = those tokens /
  wall time (prefill included, as on the episodes side). `ratio_same_tokens` is the issue's figure.
- turn-capped single: `HFBackend.generate` (the backend the independent shape uses), one turn per row
  of up to an episode's tokens per turn (`rollout.episodes.turn_tokens`, else `sampling.max_new_tokens`)
  that stops at end of text, so its token count differs from the episodes' (both reported);
  `ratio_turn_capped` is the figure this bench reported first (0.62 on a quiet machine).

Reported: per round the three throughputs and both ratios, their medians, the tool time excluded, the
calls' added milliseconds (from the call token to its result reaching the decoding loop: the sandbox's
round trip plus up to one decoding step; p50 / p95 / max over every call of every timed round) and the
sandbox's own seconds per call, and the machine's load before and after. Absolute tokens/s depend on the
machine's load; the ratios are the figures to read. On a busy machine the wall-clock ratios swing from
round to round; `cpu_ratio_same_tokens` divides by the decoding thread's own CPU time instead
(`time.thread_time`: the tool threads and the sandbox's processes are not in it), which a busy machine
moves far less: read it beside the wall-clock figure, never instead of it.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

CONFIG = "configs/organism-tools.toml"


def bench_episodes_speed(store_dir: str, *, config: Any = CONFIG, overrides: Sequence[str] = (), prompts: int = 64,
                         samples: int = 8, rounds: int = 5, threads: int = 1, seed: int = 0) -> dict[str, Any]:
    """The three ways, `rounds` times, rotated (module docstring); one JSON-able dict. `config`: a run
    config's path, or a RunConfig (tests: the small tools organism's tiny run)."""
    import numpy as np
    import torch

    from workbench.config import load_config
    from workbench.engine.setup import encode_prompts
    from workbench.errors import ConfigError
    from workbench.models.loading import load_model
    from workbench.models.sources import run_model_dir
    from workbench.rollout.base import SamplingParams, group_seed
    from workbench.rollout.hf import HFBackend
    from workbench.rollout.shapes.episodes import EpisodeShape
    from workbench.tasks import get_task

    cfg = load_config(config, list(overrides)) if isinstance(config, (str, os.PathLike)) else config
    if cfg.tools is None or cfg.rollout.shape != "episodes":
        raise ConfigError(f"bench episodes-speed: {config} must set rollout.shape = \"episodes\" and [tools]")
    torch.set_num_threads(threads)
    model, tok = load_model(run_model_dir(cfg, store_dir))
    backend = HFBackend(model, tok)
    # the same module, but end of text ends no row: each decodes exactly the tokens it is allowed
    no_eos = HFBackend(model, tok, eos_token_ids=[], pad_token_id=backend.pad_token_id)
    questions = get_task(dict(cfg.task)).eval_prompts()
    questions = [questions[int(i)] for i in np.linspace(0, len(questions) - 1, min(prompts, len(questions)))]
    ids = [x for x in encode_prompts(tok, questions, cfg.model.chat_template) for _ in range(samples)]
    shape = EpisodeShape(cfg.rollout.episodes, cfg.tools, tok, cfg.sampling.max_new_tokens)
    temperature = cfg.sampling.temperature
    episode_sampling = SamplingParams(temperature=temperature, max_new_tokens=cfg.sampling.max_new_tokens)
    rows: list[dict[str, Any]] = []
    added_ms: list[float] = []
    sandbox_ms: list[float] = []
    load_before = list(os.getloadavg())
    try:
        for r in range(rounds):
            seeds = [group_seed(seed, r, i // samples) for i in range(len(ids))]
            counts = shape.run(backend, ids, episode_sampling, seeds=seeds).model_tokens  # untimed
            got: dict[str, Any] = {"round": r}
            ways = ["episodes", "single", "same_tokens"]
            ways = ways[r % 3:] + ways[:r % 3]
            got["first"] = ways[0]
            for way in ways:
                cpu = time.thread_time()
                if way == "episodes":
                    got.update(_time_episodes(shape, backend, ids, episode_sampling, seeds, counts,
                                              added_ms, sandbox_ms))
                elif way == "single":
                    b = backend.generate(ids, SamplingParams(temperature=temperature,
                                                             max_new_tokens=shape.limits.turn_tokens),
                                         seeds=seeds)
                    got.update(single_tokens=int(b.lengths.sum()), single_s=round(b.gen_time_s, 4),
                               single_tok_s=round(int(b.lengths.sum()) / max(b.gen_time_s, 1e-9), 1))
                else:
                    n, wall = _same_tokens(no_eos, ids, counts, temperature, seeds)
                    cpu = time.thread_time() - cpu
                    got.update(same_tokens=n, same_s=round(wall, 4), same_tok_s=round(n / max(wall, 1e-9), 1),
                               same_cpu_tok_s=round(n / max(cpu, 1e-9), 1))
            got["ratio_same_tokens"] = round(got["episode_tok_s"] / got["same_tok_s"], 3)
            got["ratio_turn_capped"] = round(got["episode_tok_s"] / got["single_tok_s"], 3)
            got["cpu_ratio_same_tokens"] = round(got["episode_cpu_tok_s"] / got["same_cpu_tok_s"], 3)
            rows.append(got)
    finally:
        shape.close()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    return {"config": str(config) if isinstance(config, (str, os.PathLike)) else cfg.name,
            "model": Path(run_model_dir(cfg, store_dir, build=False)).name,
            "prompts": len(questions), "samples": samples, "rows": len(ids), "threads": threads, "rounds": rows,
            "median_episode_tok_s": median("episode_tok_s"), "median_same_tok_s": median("same_tok_s"),
            "median_single_tok_s": median("single_tok_s"),
            "median_ratio_same_tokens": median("ratio_same_tokens"),
            "median_ratio_turn_capped": median("ratio_turn_capped"),
            "median_cpu_ratio_same_tokens": median("cpu_ratio_same_tokens"),
            "tool_added_ms": _ms(added_ms), "tool_sandbox_ms": _ms(sandbox_ms),
            "load_before": load_before, "load_after": list(os.getloadavg())}


def _time_episodes(shape: Any, backend: Any, ids: Sequence[Sequence[int]], sampling: Any, seeds: Sequence[int],
                   counts: list[int], added_ms: list[float], sandbox_ms: list[float]) -> dict[str, Any]:
    """One timed episodes batch: its figures; each call's added and sandbox milliseconds go on the lists."""
    cpu = time.thread_time()
    eb = shape.run(backend, ids, sampling, seeds=seeds)
    cpu = time.thread_time() - cpu
    decode_s = eb.gen_time_s - eb.tool_time_s
    tools = [t for row in eb.turns for t in row if t.role == "tool"]
    added_ms += [1000 * t.result_s for t in tools]
    sandbox_ms += [1000 * t.call.seconds for t in tools if t.call is not None]
    tokens = int(sum(eb.model_tokens))
    return dict(episode_tokens=tokens, episode_decode_s=round(decode_s, 4), tool_blocked_s=round(eb.tool_time_s, 4),
                longest=int(max(eb.model_tokens)), calls=len(tools), same_counts=eb.model_tokens == counts,
                episode_tok_s=round(tokens / max(decode_s, 1e-9), 1),
                episode_cpu_tok_s=round(tokens / max(cpu, 1e-9), 1))


def _ms(values: list[float]) -> dict[str, Any]:
    """Count, p50, p95 and max of a list of milliseconds (None when empty)."""
    import numpy as np

    if not values:
        return {"calls": 0, "p50": None, "p95": None, "max": None}
    return {"calls": len(values), "p50": round(float(np.quantile(values, 0.5)), 2),
            "p95": round(float(np.quantile(values, 0.95)), 2), "max": round(max(values), 2)}


def _same_tokens(backend: Any, ids: Sequence[Sequence[int]], counts: Sequence[int], temperature: float,
                 seeds: Sequence[int]) -> tuple[int, float]:
    """One turn per row of exactly `counts[i]` tokens (a backend whose end of text ends no row), from
    the rows' own seeds; (tokens decoded, wall seconds, prefill included)."""
    import torch

    from workbench.rollout.base import SamplingParams
    from workbench.rollout.hf import GroupStreams

    start = time.perf_counter()
    was_training = backend.model.training
    backend.model.eval()
    try:
        with torch.inference_mode():
            state = backend._prefill(ids)
            state.limits = torch.tensor(list(counts), dtype=torch.long)
            out = backend.decode(state, SamplingParams(temperature=temperature, max_new_tokens=max(counts)),
                                 None, GroupStreams(seeds))
    finally:
        backend.model.train(was_training)
    return int(out[3].sum()), time.perf_counter() - start
