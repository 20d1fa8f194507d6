"""The TRL logger's cost: TRL's GRPOTrainer steps/s with and without `workbench.integrations.trl`, side by
side on the organism (`python -m benchmarks.trl_overhead --steps 4 --rounds 2`). A harness that
spans parts (models, tasks, store, the integration), so it lives above them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.integrations.trl import check_trl_version, with_workbench


def measure_overhead(*, steps: int = 4, prompts: int = 32, generations: int = 8, rounds: int = 2,
                     recipe: str = "small", store: str | Path | None = None) -> dict[str, Any]:
    """TRL steps/s with and without the logger, side by side on the same workload (the organism, its
    arithmetic prompts, `prompts` x `generations` completions of at most 8 tokens per step, CPU).
    Runs alternate (plain, logged) `rounds` times; each run's first step is a warm-up. Reports the
    median step wall time and the median process CPU time per step (all threads, the writer's too):
    on a loaded machine the wall time is noisy and the CPU time says what the logger costs."""
    import contextlib
    import io
    import tempfile

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.models import load_model
    from benchmarks.tiny import SMALL_ORGANISMS
    from workbench.models.organism import OrganismRecipe, ensure_organism, small_recipe
    from workbench.tasks import ArithmeticTask, verify

    rec = small_recipe() if recipe == "small" else OrganismRecipe()
    cache = Path(store) if store else SMALL_ORGANISMS
    path = ensure_organism(cache, rec)
    data = Dataset.from_list([{"prompt": p.text, "answer": p.answer} for p in ArithmeticTask(rec.task).train_prompts()])

    def reward(prompts, completions, answer, **_):  # noqa: ANN001
        return [verify(c, a, method="exact").reward for c, a in zip(completions, answer)]

    costs: list[tuple[float, float]] = []  # per logged run: median training-thread hook s, writer CPU s per step

    def one(logged: bool, tmp: Path) -> tuple[list[float], list[float]]:
        marks: list[tuple[float, float]] = []

        class Timer(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
                marks.append((time.perf_counter(), time.process_time()))

        model, tokenizer = load_model(str(path))
        args = GRPOConfig(
            output_dir=str(tmp / "out"), per_device_train_batch_size=prompts * generations,
            num_generations=generations, max_completion_length=8, temperature=1.0, top_k=0, top_p=1.0, beta=0.0,
            loss_type="dapo", scale_rewards="group", learning_rate=1e-4, max_steps=steps + 1, logging_steps=1,
            report_to="none", save_strategy="no", use_cpu=True, bf16=False, use_vllm=False, num_iterations=1,
            gradient_accumulation_steps=1, dataloader_num_workers=0, seed=0, disable_dropout=True, disable_tqdm=True)
        cls, extra = (with_workbench(GRPOTrainer), dict(store=tmp / "store", run_name="overhead")) if logged \
            else (GRPOTrainer, {})
        trainer = cls(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer,
                      callbacks=[Timer()], **extra)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()  # the logged run's last commit is waited for inside train(): not in a step's time
        walls = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
        cpus = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
        if logged:
            from workbench.store import open_store

            with open_store(tmp / "store", read_only=True) as s:
                hook = float(s.run_steps(trainer.workbench_run_id)["time_log_s"].median())
            stats = trainer.workbench_writer_stats
            costs.append((hook, stats["writer_cpu_s"] / max(stats["steps_written"], 1)))
        return walls, cpus

    res: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    torch.use_deterministic_algorithms(False)
    with tempfile.TemporaryDirectory(prefix="trl-overhead-") as tmp:
        for r in range(rounds):
            for logged in (False, True):
                walls, cpus = one(logged, Path(tmp) / f"{logged}-{r}")
                res[logged][0].extend(walls)
                res[logged][1].extend(cpus)
    med = {k: (float(np.median(w)), float(np.median(c))) for k, (w, c) in res.items()}
    return {"workload": f"{prompts} prompts x {generations} completions per step, organism recipe {recipe}",
            "steps_timed_per_run": steps, "rounds": rounds,
            "plain_steps_per_s": 1 / med[False][0], "logged_steps_per_s": 1 / med[True][0],
            "wall_overhead_pct": 100 * (med[True][0] / med[False][0] - 1),
            "plain_cpu_s_per_step": med[False][1], "logged_cpu_s_per_step": med[True][1],
            "cpu_overhead_pct": 100 * (med[True][1] / med[False][1] - 1),
            "hook_s_per_step": float(np.median([c[0] for c in costs])),
            "writer_cpu_s_per_step": float(np.median([c[1] for c in costs])),
            "trl_version": check_trl_version(), "torch_threads": torch.get_num_threads()}


if __name__ == "__main__":  # python -m benchmarks.trl_overhead [--steps N --rounds R --recipe small|default]
    import argparse
    import json

    ap = argparse.ArgumentParser(description="TRL steps/s with and without the workbench logger")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--recipe", choices=["small", "default"], default="small")
    ap.add_argument("--store", default=None, help="where the organism is cached (default: the temp dir)")
    ns = ap.parse_args()
    print(json.dumps(measure_overhead(steps=ns.steps, rounds=ns.rounds, prompts=ns.prompts,
                                      generations=ns.generations, recipe=ns.recipe, store=ns.store), indent=2))
