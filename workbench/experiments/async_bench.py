"""`workbench bench async`: the asynchronous pipeline side by side with the synchronous loop.

For each workload profile and each setting (synchronous at 1 and at 2 torch threads, then eta = 1, 2
with the generator thread and the trainer on 1 torch thread each), one run per seed of `steps` steps, in one
process, medians over the steps after the warm-up. Per setting:

- `rollouts_per_s`: on-policy rollouts / wall time per step (median);
- `speedup_vs_sync`: against the synchronous run at its best thread setting;
- `trainer_idle_frac`, `generator_idle_frac`: the share of the step each side waited;
- `t_gen_s`, `t_train_s`: the phase times measured in that very run (each side on its own thread);
- `bound_rollouts_per_s` = rollouts / max(t_gen, t_train) (a step takes no less than its longer
  phase) and `efficiency` = measured / bound;
- `pass1_end`: held-out pass@1 after the run (mean over seeds, with each seed's value).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from workbench.config import RunConfig, apply_overrides

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "organism.toml"
WARMUP_STEPS = 2

PROFILES = {"default": [], "long": ["task.profile=long", "sampling.max_new_tokens=24"]}


def _settings(etas: list[int], ray_workers: int = 0) -> list[tuple[str, list[str]]]:
    out = [("sync_1thread", ["model.threads=1"]), ("sync_2threads", ["model.threads=2"])]
    for eta in etas:
        out.append((f"eta{eta}", ["pipeline.threads_per_side=1", f"pipeline.max_staleness={eta}"]))
    if ray_workers:
        ray = ["rollout.backend=ray", f"rollout.workers={ray_workers}", "model.threads=1"]
        out.append((f"ray{ray_workers}_sync", ray))
        out += [(f"ray{ray_workers}_eta{eta}", ray + [f"pipeline.max_staleness={eta}"]) for eta in etas]
    return out


def _run(cfg: Any, cache: Path) -> list[dict[str, Any]]:
    """Run `cfg` in a temporary store (the organism linked from `cache`); per step: wall time since the
    previous step ended, and the step's metrics."""
    from workbench.engine import run
    from workbench.engine.setup import model_path

    model_path(cfg, cache)  # the organism, built in the cache when missing
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
        run(cfg, store=str(root), on_step=on_step, store_dir=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return marks


def _med(marks: list[dict[str, Any]], key: str) -> float:
    xs = [float(m[key]) for m in marks if key in m]
    return float(statistics.median(xs)) if xs else 0.0


def _figures(marks: list[dict[str, Any]], pipelined: bool) -> dict[str, float]:
    wall = _med(marks, "wall_s")
    rollouts = _med(marks, "rollout/count")
    # the batch's own production time (on the generator thread when pipelined), and the trainer's
    t_gen = _med(marks, "timing_s/generate") + _med(marks, "timing_s/verify") + _med(marks, "timing_s/allocate")
    t_train = _med(marks, "timing_s/trainer_busy") if pipelined else wall - t_gen
    bound = rollouts / max(t_gen, t_train, 1e-9)
    measured = rollouts / max(wall, 1e-9)
    return {
        "rollouts_per_s": measured, "step_s": wall, "t_gen_s": t_gen, "t_train_s": t_train,
        "trainer_idle_frac": _med(marks, "timing_s/trainer_idle") / max(wall, 1e-9) if pipelined else t_gen / max(wall, 1e-9),
        "generator_idle_frac": (_med(marks, "timing_s/generator_idle") / max(wall, 1e-9) if pipelined
                                else t_train / max(wall, 1e-9)),
        "bound_rollouts_per_s": bound, "efficiency": measured / bound if bound else 0.0,
        "staleness_max": max((float(m.get("rollout/staleness_max", 0)) for m in marks), default=0.0),
    }


def _config(overrides: list[str], small: bool) -> RunConfig:
    """The default experiment with `overrides`; `small`: on the small organism the tests use (a 2-layer,
    64-wide model: a quick look, with phase times unlike the default organism's)."""
    import tomllib

    data = tomllib.loads(CONFIG.read_text()) if CONFIG.is_file() else {}
    if small:
        from workbench.models.organism import small_recipe

        recipe = small_recipe().to_dict()
        data.setdefault("model", {})["organism"] = recipe
        data["task"] = dict(recipe["task"])
    return RunConfig.from_dict(apply_overrides(data, overrides))


def bench_async(*, steps: int = 10, seeds: int = 1, etas: list[int] | None = None,
                profiles: list[str] | None = None, overrides: list[str] | None = None,
                cache: str | Path = "store", small: bool = False, ray_workers: int = 0) -> dict[str, Any]:
    """The figures above for each profile and setting (see the module docstring)."""
    etas = [1, 2] if etas is None else etas
    out: dict[str, Any] = {"steps": steps, "seeds": seeds, "organism": "small" if small else "default",
                           "profiles": {}}
    for profile in profiles or list(PROFILES):
        rows: dict[str, Any] = {}
        for name, setting in _settings(etas, ray_workers):
            per_seed = []
            pass1 = []
            for seed in range(seeds):
                cfg = _config(PROFILES[profile] + setting + [
                    f"steps={steps}", f"seed={seed}", "eval.every=0", "eval.at_start=false",
                    "checkpoint.every=0"] + list(overrides or []), small)
                marks = _run(cfg, Path(cache))
                per_seed.append(_figures(marks[WARMUP_STEPS:-1] or marks, pipelined=cfg.pipeline.enabled))
                pass1.append(float(marks[-1].get("eval/pass1", float("nan"))) if marks else float("nan"))
            fig = {k: statistics.median([p[k] for p in per_seed]) for k in per_seed[0]}
            fig["pass1_end"] = statistics.mean(pass1)
            fig["pass1_per_seed"] = pass1
            rows[name] = fig
        best = max(rows["sync_1thread"]["rollouts_per_s"], rows["sync_2threads"]["rollouts_per_s"])
        for fig in rows.values():
            fig["speedup_vs_sync"] = fig["rollouts_per_s"] / best
        out["profiles"][profile] = rows
    return out
