"""`workbench bench episodes-speed`: the model's decode throughput inside episodes against single-turn
decoding of the same prompts, side by side, tool time excluded (issue #40's target: at least 0.8x).

    workbench bench episodes-speed --json                        # the tools organism, 64 prompts x 8, 5 rounds
    workbench bench episodes-speed --config configs/smollm2-tools.toml --prompts 4 --samples 4 --rounds 2 --json

Each round runs, in alternating order, the two ways on the same prompts, batch and seeds:

- episodes: the config's `EpisodeShape` (`decode_episodes` on the in-process backend, the real tools in
  their sandbox); model tokens per second = the tokens the model sampled / (the decoding's wall time
  minus the time it sat blocked on tools with no row left to decode, `EpisodeBatch.tool_time_s`). Rows
  waiting for their own tool while others decode are counted: that is the cost of episodes.
- single: `HFBackend.generate` (the backend the independent shape uses), one turn per row of up to an
  episode's tokens per turn (`rollout.episodes.turn_tokens`, else `sampling.max_new_tokens`; rows stop at
  their end of text, so the token counts differ a little and both are reported); tokens per second =
  generated tokens / generation wall time.

Reported: per round both throughputs and their ratio, the medians, the tokens of each side, the tool
time excluded, and the machine's load before and after. The ratio is the figure to read; absolute
tokens/s depend on the machine's load.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Sequence

CONFIG = "configs/organism-tools.toml"


def bench_episodes_speed(store_dir: str, *, config: Any = CONFIG, overrides: Sequence[str] = (), prompts: int = 64,
                         samples: int = 8, rounds: int = 5, threads: int = 1, seed: int = 0) -> dict[str, Any]:
    """Both ways, `rounds` times, alternated (module docstring); one JSON-able dict. `config`: a run
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
    questions = get_task(dict(cfg.task)).eval_prompts()
    questions = [questions[int(i)] for i in np.linspace(0, len(questions) - 1, min(prompts, len(questions)))]
    ids = [x for x in encode_prompts(tok, questions, cfg.model.chat_template) for _ in range(samples)]
    shape = EpisodeShape(cfg.rollout.episodes, cfg.tools, tok, cfg.sampling.max_new_tokens)
    temperature = cfg.sampling.temperature
    rows: list[dict[str, Any]] = []
    load_before = list(os.getloadavg())
    try:
        for r in range(rounds):
            seeds = [group_seed(seed, r, i // samples) for i in range(len(ids))]
            got: dict[str, Any] = {"round": r, "first": "episodes" if r % 2 == 0 else "single"}
            for way in (("episodes", "single") if r % 2 == 0 else ("single", "episodes")):
                if way == "episodes":
                    eb = shape.run(backend, ids, SamplingParams(temperature=temperature,
                                                                max_new_tokens=cfg.sampling.max_new_tokens), seeds=seeds)
                    decode_s = eb.gen_time_s - eb.tool_time_s
                    got.update(episode_tokens=int(sum(eb.model_tokens)), episode_decode_s=round(decode_s, 4),
                               tool_blocked_s=round(eb.tool_time_s, 4), longest=int(max(eb.model_tokens)),
                               calls=sum(t.call is not None for row in eb.turns for t in row),
                               episode_tok_s=round(sum(eb.model_tokens) / max(decode_s, 1e-9), 1))
                else:
                    b = backend.generate(ids, SamplingParams(temperature=temperature,
                                                             max_new_tokens=shape.limits.turn_tokens),
                                         seeds=seeds)
                    got.update(single_tokens=int(b.lengths.sum()), single_s=round(b.gen_time_s, 4),
                               single_tok_s=round(int(b.lengths.sum()) / max(b.gen_time_s, 1e-9), 1))
            got["ratio"] = round(got["episode_tok_s"] / got["single_tok_s"], 3)
            rows.append(got)
    finally:
        shape.close()
    return {"config": str(config) if isinstance(config, (str, os.PathLike)) else cfg.name,
            "model": Path(run_model_dir(cfg, store_dir, build=False)).name,
            "prompts": len(questions), "samples": samples, "rows": len(ids), "threads": threads, "rounds": rows,
            "median_episode_tok_s": statistics.median(r["episode_tok_s"] for r in rows),
            "median_single_tok_s": statistics.median(r["single_tok_s"] for r in rows),
            "median_ratio": statistics.median(r["ratio"] for r in rows),
            "load_before": load_before, "load_after": list(os.getloadavg())}
