"""`workbench bench async`: the asynchronous pipeline side by side with the synchronous loop.

For each workload profile and each setting (synchronous at 1 and at 2 torch threads; then, at each
eta, the pipeline with its generator process and the trainer on 1 torch thread each, with partial
rollouts off and on; optionally the generator thread and Ray workers), one run per seed of `steps`
steps, one after another in one command, medians over the steps after the warm-up. Per setting:

- `rollouts_per_s`: rollouts / wall time per step (median);
- `speedup_vs_sync`: against the synchronous run at its best thread setting;
- `trainer_idle_frac`, `generator_idle_frac`: the share of the step each side waited;
- `t_gen_s`, `t_train_s`: the phase times measured in that very run (generation + verification +
  allocation, and the trainer's busy time): where the time goes;
- `bound_rollouts_per_s` = rollouts / max(t_gen, t_train), a step taking no less than its longer
  phase, with each phase's time the shortest it took on one torch thread in any in-process setting of
  the profile (the synchronous 1-thread run and the pipelined runs: the split of the machine the
  pipeline runs under, one core a side), and `efficiency` = measured / bound. Phase times taken
  inside each pipelined run alone would hide the slowdown the two sides cause each other; the
  synchronous run's alone were longer than the pipeline's (its writer and trainer share a core), so
  they would not bound it.
- `pass1_end`: held-out pass@1 after the run (mean over seeds, with each seed's value), and
  `pass1_diff_vs_sync` with its 90% interval (paired by seed; Student's t) against the synchronous
  1-thread run after the same number of steps; `tokens_vs_sync`: the generated tokens against that
  run's (1.0: the comparison is also one at equal generated tokens).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.config import RunConfig, apply_overrides
from benchmarks.intervals import T90

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "organism.toml"
WARMUP_STEPS = 2

PROFILES = {"default": [], "long": ["task.profile=long", "sampling.max_new_tokens=24"]}


def _settings(etas: list[int], ray_workers: int = 0, thread: bool = False,
              partial: bool = True) -> list[tuple[str, list[str]]]:
    out = [("sync_1thread", ["model.threads=1"]), ("sync_2threads", ["model.threads=2"])]
    for eta in etas:
        side = ["pipeline.threads_per_side=1", f"pipeline.max_staleness={eta}"]
        out.append((f"eta{eta}", side))
        if partial:
            out.append((f"eta{eta}_partial", side + ["pipeline.partial_rollouts=true"]))
        if thread:
            out.append((f"eta{eta}_thread", side + ["pipeline.generator=thread"]))
    if ray_workers:
        ray = ["rollout.backend=ray", f"rollout.workers={ray_workers}", "model.threads=1"]
        out.append((f"ray{ray_workers}_sync", ray))
        out += [(f"ray{ray_workers}_eta{eta}", ray + [f"pipeline.max_staleness={eta}"]) for eta in etas]
    return out


def _run(cfg: Any, cache: Path) -> list[dict[str, Any]]:
    """Run `cfg` in a temporary store (the organism linked from `cache`); per step: wall time since the
    previous step ended, and the step's metrics."""
    from workbench.engine import run
    from workbench.models.sources import run_model_dir

    run_model_dir(cfg, cache)  # the organism, built in the cache when missing
    root = Path(tempfile.mkdtemp(prefix="workbench-async-bench-"))
    marks: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def on_step(step: int, m: dict[str, Any]) -> None:
        now = time.perf_counter()
        marks.append({"wall_s": now - last[0], **m})
        last[0] = now

    try:
        (root / "models").symlink_to((cache / "models").resolve())
        last[0] = time.perf_counter()
        run(cfg, store=str(root), on_step=on_step)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return marks


def _med(marks: list[dict[str, Any]], key: str) -> float:
    xs = [float(m[key]) for m in marks if key in m]
    return float(statistics.median(xs)) if xs else 0.0


def paired_interval(a: list[float], b: list[float]) -> tuple[float, list[float]]:
    """Mean of a - b (paired by seed) and its 90% interval (Student's t; zero width with one seed)."""
    d = [x - y for x, y in zip(a, b)]
    mean = statistics.mean(d)
    if len(d) < 2:
        return mean, [mean, mean]
    half = T90.get(len(d) - 1, 1.645) * statistics.stdev(d) / len(d) ** 0.5
    return mean, [mean - half, mean + half]


def _figures(marks: list[dict[str, Any]], pipelined: bool) -> dict[str, float]:
    wall = _med(marks, "wall_s")
    rollouts = _med(marks, "rollout/count")
    # the batch's own production time (on the generator's side when pipelined), and the trainer's
    t_gen = _med(marks, "timing_s/generate") + _med(marks, "timing_s/verify") + _med(marks, "timing_s/allocate")
    t_train = _med(marks, "timing_s/trainer_busy") if pipelined else wall - t_gen
    return {
        "rollouts_per_s": rollouts / max(wall, 1e-9), "rollouts_per_step": rollouts, "step_s": wall,
        "t_gen_s": t_gen, "t_train_s": t_train,
        "trainer_idle_frac": _med(marks, "timing_s/trainer_idle") / max(wall, 1e-9) if pipelined else t_gen / max(wall, 1e-9),
        "generator_idle_frac": (_med(marks, "timing_s/generator_idle") / max(wall, 1e-9) if pipelined
                                else t_train / max(wall, 1e-9)),
        "staleness_max": max((float(m.get("rollout/staleness_max", 0)) for m in marks), default=0.0),
    }


def _config(overrides: list[str], small: bool, config: Path | None = None) -> RunConfig:
    """The default experiment (or the run file `config`) with `overrides`; `small`: on the small
    organism the tests use (a 2-layer, 64-wide model: a quick look, with phase times unlike the
    default organism's)."""
    import tomllib

    config = config or CONFIG
    data = tomllib.loads(config.read_text()) if config.is_file() else {}
    if small:
        from workbench.models.organism import small_recipe

        recipe = small_recipe().to_dict()
        data.setdefault("model", {})["organism"] = recipe
        data["task"] = dict(recipe["task"])
    return RunConfig.from_dict(apply_overrides(data, overrides))


def bench_async(*, steps: int = 10, seeds: int = 1, etas: list[int] | None = None,
                profiles: list[str] | None = None, overrides: list[str] | None = None,
                cache: str | Path = "store", small: bool = False, ray_workers: int = 0, thread: bool = False,
                partial: bool = True, config: Path | None = None) -> dict[str, Any]:
    """The figures above for each profile and setting (see the module docstring); `config`: another
    run file than the default experiment's (the real model's: `bench real-model async`)."""
    etas = [1, 2] if etas is None else etas
    out: dict[str, Any] = {"steps": steps, "seeds": seeds, "organism": "small" if small else "default",
                           "profiles": {}}
    for profile in profiles or list(PROFILES):
        rows: dict[str, Any] = {}
        for name, setting in _settings(etas, ray_workers, thread, partial):
            per_seed, pass1, tokens = [], [], []
            for seed in range(seeds):
                cfg = _config(PROFILES[profile] + setting + [
                    f"steps={steps}", f"seed={seed}", "eval.every=0", "eval.at_start=false",
                    "checkpoint.every=0"] + list(overrides or []), small, config)
                marks = _run(cfg, Path(cache))
                per_seed.append(_figures(marks[WARMUP_STEPS:-1] or marks, pipelined=cfg.pipeline.enabled))
                pass1.append(float(marks[-1].get("eval/pass1", float("nan"))) if marks else float("nan"))
                tokens.append(sum(float(m.get("rollout/tokens_generated", 0.0)) for m in marks))
            fig = {k: statistics.median([p[k] for p in per_seed]) for k in per_seed[0]}
            fig.update(pass1_end=statistics.mean(pass1), pass1_per_seed=pass1, tokens_generated=statistics.mean(tokens))
            rows[name] = fig
        out["profiles"][profile] = _against_sync(rows)
    return out


def _against_sync(rows: dict[str, Any]) -> dict[str, Any]:
    """Speed-up, bound and efficiency, pass@1 difference and tokens, each against the synchronous runs
    (the bound: see the module docstring)."""
    sync = rows["sync_1thread"]
    best = max(sync["rollouts_per_s"], rows["sync_2threads"]["rollouts_per_s"])
    one_core = [fig for name, fig in rows.items() if name == "sync_1thread" or name.startswith("eta")]
    t_bound = max(min(f["t_gen_s"] for f in one_core), min(f["t_train_s"] for f in one_core), 1e-9)
    for fig in rows.values():
        fig["speedup_vs_sync"] = fig["rollouts_per_s"] / best
        fig["bound_rollouts_per_s"] = fig["rollouts_per_step"] / t_bound
        fig["efficiency"] = fig["rollouts_per_s"] / fig["bound_rollouts_per_s"]
        diff, interval = paired_interval(fig["pass1_per_seed"], sync["pass1_per_seed"])
        fig["pass1_diff_vs_sync"], fig["pass1_diff_interval90"] = diff, interval
        fig["tokens_vs_sync"] = fig["tokens_generated"] / max(sync["tokens_generated"], 1e-9)
    return rows


def markdown(out: dict[str, Any]) -> str:
    """The figures as one markdown table per profile (docs/bench/async.md)."""
    lines = []
    for profile, rows in out["profiles"].items():
        bound = next(iter(rows.values()))["bound_rollouts_per_s"]
        lines += [f"`{profile}` ({out['steps']} steps, {out['seeds']} seed(s); bound {bound:.0f} rollouts/s):", "",
                  "| setting | rollouts/s | vs sync | efficiency | step s | t_gen s | t_train s | trainer idle "
                  "| generator idle | staleness max | pass@1 end | pass@1 − sync [90%] |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, f in rows.items():
            lo, hi = f["pass1_diff_interval90"]
            lines.append(f"| {name} | {f['rollouts_per_s']:.0f} | {f['speedup_vs_sync']:.2f}x | {f['efficiency']:.2f} "
                         f"| {f['step_s']:.3f} | {f['t_gen_s']:.3f} | {f['t_train_s']:.3f} "
                         f"| {f['trainer_idle_frac']:.2f} | {f['generator_idle_frac']:.2f} | {f['staleness_max']:.0f} "
                         f"| {f['pass1_end']:.3f} | {f['pass1_diff_vs_sync']:+.3f} [{lo:+.3f}, {hi:+.3f}] |")
        lines.append("")
    return "\n".join(lines)
