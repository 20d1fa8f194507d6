"""Checkpoints of a run under `<store>/runs/<run_id>/checkpoints/step-NNNNNN.pt`.

One file per checkpoint holds everything the loop needs to continue exactly where it was: model,
reference model (when a KL penalty is on), optimiser and scheduler states, RNG states, sampler
position, live settings with the allocator's state, per-prompt statistics and the reuse cache. It is
written to a temporary name and renamed, so a crash mid-write never leaves a half checkpoint.

Weights-only snapshots (`checkpoint.weights_every`) sit beside them as `weights-NNNNNN.pt`: the policy's
state dict alone (no optimiser, no reference model), for comparing checkpoints in the Playground; the
run never resumes from one, and `checkpoint.keep` does not prune them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from workbench.faults import fault_point

_NAME = re.compile(r"^step-(\d{6,})\.pt$")
_WEIGHTS = re.compile(r"^weights-(\d{6,})\.pt$")


def run_dir(store_dir: str | Path, run_id: str) -> Path:
    return Path(store_dir) / "runs" / run_id


def checkpoint_dir(store_dir: str | Path, run_id: str) -> Path:
    return run_dir(store_dir, run_id) / "checkpoints"


def rng_state() -> dict[str, Any]:
    import random

    import numpy as np

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: Path, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Write `state` as the checkpoint of `step`; keep the newest `keep` checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save({"step": step, **state}, tmp)
    fault_point("checkpoint")
    os.replace(tmp, path)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def save_weights(directory: Path, step: int, model_state: dict[str, Any]) -> Path:
    """Write the weights-only snapshot of `step` (`{"step": step, "model": state dict}`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"weights-{step:06d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save({"step": step, "model": model_state}, tmp)
    os.replace(tmp, path)
    return path


def weights_steps(directory: Path) -> list[int]:
    """The steps that have a weights-only snapshot, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _WEIGHTS.match(p.name)))


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def checkpoint_step(path: Path) -> int:
    """The step whose state the checkpoint file `path` holds."""
    m = _NAME.match(path.name)
    if m is None:
        raise ValueError(f"{path.name!r} is not a checkpoint file name (step-NNNNNN.pt)")
    return int(m.group(1))


def checkpoint_steps(directory: Path) -> list[int]:
    """The steps that have a checkpoint, oldest first."""
    return [checkpoint_step(p) for p in list_checkpoints(directory)]


def set_aside(directory: Path, after: int, folder: str) -> list[Path]:
    """Move the checkpoints of steps after `after` into `directory/folder` (a rollback's abandoned
    attempt keeps them there, never loaded again); returns their new paths."""
    moved = []
    for p in list_checkpoints(directory):
        if checkpoint_step(p) > after:
            (directory / folder).mkdir(exist_ok=True)
            moved.append(p.rename(directory / folder / p.name))
    for step in weights_steps(directory):  # snapshots of the abandoned steps go with them
        if step > after:
            (directory / folder).mkdir(exist_ok=True)
            name = f"weights-{step:06d}.pt"
            moved.append((directory / name).rename(directory / folder / name))
    return moved


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
