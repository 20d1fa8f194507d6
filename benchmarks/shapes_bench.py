"""`workbench bench shapes`: the rollout phase of each rollout shape against independent sampling, on
the organism, at the same number of rollouts a step (docs/rollout-shapes.md).

Each shape trains one run of the same config and seed (the training prompts cut to `train_size`, so a
prompt comes back every few steps and a speculative run has drafts); per step it reads the engine's
own figures and reports medians over the steps after the first:

- `generate_s_per_rollout`: the step's `timing_s/generate` (every teacher-forced pass and tree step of
  the shape included) over its rollouts; `vs_independent`: that over independent's (< 1: faster);
- `generate_cpu_s_per_rollout`: the same with the engine thread's CPU time (`timing_cpu_s/generate`), and
  `cpu_vs_independent`: on a machine shared with other jobs, where the wall time also counts the wait for
  a core, the steadier figure (one torch thread: the work itself);
- `tokens_per_rollout` (response tokens) and `fresh_tokens_per_rollout` (decoded, not reused);
- `reused_share`: reused over response tokens (speculative); `accept_rate`: reused over offered draft
  tokens; `zero_signal_frac` (median) and `zero_signal_mean`: share of groups whose rewards all agree;
  tree: `branches` a step;
- the shape's own phases per rollout, inside the generate time: `verify_s` (the cached teacher-forced
  pass over the drafts and the verification), `residual_s` (exact mode: the drafting weights' pass at
  the rejected positions and the residual draws), `keep_s` (keeping the new drafts; exact mode copies
  the weights), `tree_s` (the tree phase); the rest of the generate time is decoding.

On the real model (`organism = "smollm2"`) keep to a few steps and small groups: its figures are the
rollout phase's, not learning. Learning to a target pass@1 is not measured here (docs/rollout-shapes.md).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "independent": {},
    "speculative-exact": {"rollout.shape": "speculative", "rollout.speculative.mode": "exact"},
    "speculative-lenient": {"rollout.shape": "speculative", "rollout.speculative.mode": "lenient"},
    "tree-latr": {"rollout.shape": "tree"},
    "tree-entropy": {"rollout.shape": "tree", "rollout.tree.criterion": "entropy"},
}


ORGANISMS = ("small", "default", "smollm2")
"""small: the tiny run; default: the default config's organism; smollm2: the real model
(configs/smollm2.toml), where a training step takes about a minute on 2 CPU cores: keep it to a few
steps and small groups (`group`, `prompts_per_step`)."""


def _config(organism: str, steps: int, train_size: int, seed: int, over: dict[str, Any],
            sizes: dict[str, Any] | None = None) -> Any:
    from workbench.control.launch import resolve_config
    from benchmarks.tiny import tiny_run

    common = {"steps": steps, "seed": seed, "eval.every": 0, "eval.at_start": False, "checkpoint.every": 0,
              "task.train_size": train_size, **(sizes or {}), **over}
    if organism == "small":
        return tiny_run(common)
    if organism == "smollm2":
        from workbench.models.sources import smollm2_config

        return resolve_config(smollm2_config().to_dict(), {"name": "shapes-bench-smollm2", **common})
    return resolve_config({"name": "shapes-bench"}, common)


ALLOCATORS = ("uniform", "value_tracker")
"""The allocators a shape can be measured with (`--allocator`; both grant `n` rollouts per chosen prompt)."""


def _sizes(group: int | None, prompts_per_step: int | None, max_new_tokens: int | None,
           allocator: str | None = None) -> dict[str, Any]:
    """The overrides of the group size (`allocator.params.n`, the budget following), the prompts a step,
    the response length and the allocator; none given: the config's."""
    from workbench.errors import ConfigError

    for flag, value in (("--group", group), ("--prompts-per-step", prompts_per_step),
                        ("--max-new-tokens", max_new_tokens)):
        if value is not None and value < 1:
            raise ConfigError(f"bench shapes: {flag}: {value} must be at least 1")
    if allocator is not None and allocator not in ALLOCATORS:
        raise ConfigError(f"bench shapes: --allocator: {allocator!r} is not allowed ({', '.join(ALLOCATORS)})")
    out: dict[str, Any] = {"allocator.name": allocator} if allocator else {}
    if group is not None or prompts_per_step is not None:
        if group is None or prompts_per_step is None:
            raise ConfigError("bench shapes: --group and --prompts-per-step go together (the budget is their product)")
        out.update({"allocator.name": allocator or "uniform", "allocator.params": {"n": group},
                    "allocator.prompts_per_step": prompts_per_step, "allocator.budget": group * prompts_per_step})
    if max_new_tokens is not None:
        out["sampling.max_new_tokens"] = max_new_tokens
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _summary(steps: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    later = steps[1:] or steps
    n = [max(m.get("rollout/count", 0), 1) for m in later]
    tokens = [m.get("rollout/tokens_generated", 0) for m in later]
    fresh = [m.get("rollout/shape/fresh_tokens", t) for m, t in zip(later, tokens)]
    out: dict[str, Any] = {
        "generate_s_per_rollout": _median([m.get("timing_s/generate", 0.0) / k for m, k in zip(later, n)]),
        "generate_cpu_s_per_rollout": _median([m.get("timing_cpu_s/generate", 0.0) / k for m, k in zip(later, n)]),
        "tokens_per_rollout": _median([t / k for t, k in zip(tokens, n)]),
        "fresh_tokens_per_rollout": _median([f / k for f, k in zip(fresh, n)]),
        "zero_signal_frac": _median([m.get("rollout/zero_signal_frac", 0.0) for m in later]),
        "zero_signal_mean": statistics.fmean([m.get("rollout/zero_signal_frac", 0.0) for m in later]),
        "rollouts_per_step": _median([float(k) for k in n]),
        "wall_s": round(wall_s, 2),
    }
    if any("rollout/shape/reused_tokens" in m for m in later):
        out["reused_share"] = _median([m.get("rollout/shape/reused_tokens", 0) / max(t, 1)
                                       for m, t in zip(later, tokens)])
        out["accept_rate"] = _median([m["rollout/shape/accept_rate"] for m in later
                                      if m.get("rollout/shape/draft_tokens")])
    for key in ("verify_s", "residual_s", "keep_s", "tree_s"):  # the shape's own phases, inside timing_s/generate
        if any(f"rollout/shape/{key}" in m for m in later):
            out[f"{key}_per_rollout"] = _median([m.get(f"rollout/shape/{key}", 0.0) / k for m, k in zip(later, n)])
    if any("rollout/shape/branches" in m for m in later):
        out["branches_per_step"] = _median([float(m.get("rollout/shape/branches", 0)) for m in later])
    return out


def run_bench(store_path: str | Path | None = None, *, organism: str = "small", steps: int = 12,
              train_size: int = 16, seed: int = 0, shapes: tuple[str, ...] = tuple(SHAPES),
              group: int | None = None, prompts_per_step: int | None = None,
              max_new_tokens: int | None = None, allocator: str | None = None, rounds: int = 1) -> dict[str, Any]:
    """One run per shape (`rounds` times, the shapes alternating); the summary per shape and its ratios to
    independent, each round's shape against that round's independent run, the median over rounds (see
    the module docstring)."""
    from workbench.engine import run
    from workbench.errors import ConfigError
    from benchmarks.tiny import shared_smollm2, small_organism_models

    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        raise ConfigError(f"bench shapes: --shape: {unknown[0]!r} is not allowed (one of {', '.join(SHAPES)})")
    if organism not in ORGANISMS:
        raise ConfigError(f"bench shapes: --organism: {organism!r} is not allowed ({', '.join(ORGANISMS)})")
    if rounds < 1:
        raise ConfigError(f"bench shapes: --rounds: {rounds} must be at least 1")
    if steps < 2:
        raise ConfigError(f"bench shapes: --steps: {steps} is too few (at least 2: the first step has no drafts)")
    sizes = _sizes(group, prompts_per_step, max_new_tokens, allocator)
    tmp = None
    if store_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="shapes-bench-")
        store_path = tmp.name
    try:
        root = Path(store_path)
        if organism in ("small", "smollm2") and not (root / "models").exists():  # the shared, converted models
            root.mkdir(parents=True, exist_ok=True)
            (root / "models").symlink_to(small_organism_models() if organism == "small" else
                                         shared_smollm2().parent)
        order = ("independent",) + tuple(s for s in shapes if s != "independent")
        per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
        for _ in range(rounds):  # the shapes alternate: round 1 runs each once, then round 2, ...
            for name in order:
                seen: list[dict[str, Any]] = []
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                run(_config(organism, steps, train_size, seed, SHAPES[name], sizes), store=str(root),
                    on_step=lambda step, m: seen.append(m) if step > 0 else None)
                row = _summary(seen, time.perf_counter() - t0)
                row["load_avg"] = [round(load, 2), round(os.getloadavg()[0], 2)]  # 1-min load, start and end
                per_round[name].append(row)
    finally:
        if tmp is not None:
            tmp.cleanup()
    results = {name: _over_rounds(rows) for name, rows in per_round.items()}
    for k in range(rounds):
        base = per_round["independent"][k]["generate_s_per_rollout"] or 1e-12
        for rows in per_round.values():
            rows[k]["generate_vs_independent"] = round((rows[k]["generate_s_per_rollout"] or 0.0) / base, 3)
        base_cpu = per_round["independent"][k]["generate_cpu_s_per_rollout"] or 1e-12
        for rows in per_round.values():
            rows[k]["cpu_vs_independent"] = round((rows[k]["generate_cpu_s_per_rollout"] or 0.0) / base_cpu, 3)
    for name, r in results.items():  # a ratio per round (each shape against the independent run of its round)
        for key in ("generate_vs_independent", "cpu_vs_independent"):
            ratios = [row[key] for row in per_round[name]]
            r[key] = round(statistics.median(ratios), 3)
            if rounds > 1:
                r[f"{key}_rounds"] = ratios
    return {"organism": organism, "steps": steps, "train_size": train_size, "seed": seed, "rounds": rounds,
            **sizes, "shapes": results}


def _over_rounds(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One round's summary as it is; several: the median of each figure over the rounds, the rounds' own
    figures under `rounds` (generate time and load)."""
    if len(rows) == 1:
        return dict(rows[0])
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            vals = [r[key] for r in rows if r.get(key) is not None]
            out[key] = statistics.median(vals) if vals else None
        else:
            out[key] = value
    out["rounds"] = [{"generate_s_per_rollout": r["generate_s_per_rollout"],
                      "generate_cpu_s_per_rollout": r.get("generate_cpu_s_per_rollout"), "wall_s": r["wall_s"],
                      "load_avg": r["load_avg"]} for r in rows]
    return out
