"""A stand-in trainer for the SDK tests: logs deterministic rollouts (a function of step and rank, never
of a sampler) through `workbench.init`, checkpoints its next step to a file after each flush, and on a
restart continues from that checkpoint, as a real trainer would.

    python tests/sdk/sdk_trainer.py STORE RUN_ID STEPS --rank 0 --world 2 --ckpt FILE --sleep 0.05
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import numpy as np

PER_RANK = 12
"""Rollouts each rank logs per step (3 prompts x 4)."""


def step_data(step: int, rank: int) -> dict:
    """The rollouts rank `rank` logs at `step` (float32-exact values, UTF-8 text with a non-ASCII char)."""
    rng = np.random.default_rng(1000 * step + rank)
    lengths = rng.integers(1, 9, PER_RANK)
    prompts = [f"r{rank} q{(step + k // 4) % 5}: 2+{k // 4}=?" for k in range(PER_RANK)]
    return {
        "prompts": prompts,
        "responses": [f"answer é {step}-{rank}-{k}" for k in range(PER_RANK)],
        "rewards": (rng.integers(0, 3, PER_RANK) / 2).tolist(),
        "token_ids": [rng.integers(0, 50_000, n).tolist() for n in lengths],
        "token_entropy": [rng.random(n).astype(np.float32) for n in lengths],
        "token_logprobs": [-rng.random(n).astype(np.float32) for n in lengths],
        "advantages": rng.standard_normal(PER_RANK).astype(np.float32).tolist(),
        "reward_terms": {"format": rng.integers(0, 2, PER_RANK).astype(float).tolist()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("run_id")
    ap.add_argument("steps", type=int)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-every", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.0)
    # 0: commit as soon as the writer is idle, so that the store gets ahead of the checkpoint between
    # checkpoints and a restart has committed steps to skip; the kill tests also run the SDK's default
    ap.add_argument("--commit-window", type=float, default=0.0)
    # N > 0: after its N-th step this process commits it and SIGKILLs itself before any checkpoint can cover
    # it (the run's checkpoints fall on multiples of --ckpt-every), so a restart has a committed step to skip
    ap.add_argument("--die-after", type=int, default=0)
    a = ap.parse_args()
    import workbench

    run = workbench.init(store=a.store, name="sdk-test", run_id=a.run_id, rank=a.rank, world_size=a.world,
                         config={"steps": a.steps}, wait_s=120, commit_window_s=a.commit_window)
    ckpt = Path(a.ckpt) if a.ckpt else None
    start = int(ckpt.read_text()) if ckpt is not None and ckpt.exists() else 0
    print(f"rank {a.rank} starts at step {start} (store has {run.last_step})", flush=True)
    for step in range(start, a.steps):
        data = step_data(step, a.rank)
        run.log_rollouts(step, **data)
        run.log_step(step, {"train/loss": 1.0 / (step + 1)})
        if a.sleep:
            time.sleep(a.sleep)
        if a.die_after and step - start + 1 == a.die_after:
            if (step + 1) % a.ckpt_every == 0:
                raise SystemExit(f"--die-after {a.die_after}: step {step} is a checkpoint step; pick another")
            run.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if ckpt is not None and (step + 1) % a.ckpt_every == 0:
            run.flush()  # a checkpoint never covers an uncommitted step
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(str(step + 1))
            os.replace(tmp, ckpt)
    run.finish()
    print(f"rank {a.rank} done; problems: {run.problems}", flush=True)


if __name__ == "__main__":
    main()
