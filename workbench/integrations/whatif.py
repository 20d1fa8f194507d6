"""What-if on any run, imported or ours: replay its logged outcomes under our allocators
(`workbench.analysis.replay`) beside what the run itself did.

    from workbench.integrations.whatif import whatif
    table = whatif(store, run_id, {"uniform": {}, "selective": {}, "dynamic_sampling": {"n": 8}})

Formats without token counts (verl, TRL) log no `length`: the replay then counts rollouts, and the
`tokens` column is null.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.errors import DataError
from workbench.readers import RolloutReader


def whatif_rows(store: RolloutReader, run_id: str, allocators: dict[str, dict[str, Any] | None] | None = None,
                seed: int | None = None) -> dict[str, Any]:
    """{"logged": totals of the run itself, "replays": [totals per allocator], "note": ...}. `allocators`
    maps allocator name -> parameters (None: its defaults); default: the run's own allocator."""
    from workbench.analysis.replay import load_run, logged_result, replay_run, summarize_steps

    frames = load_run(store, run_id)
    if frames.rollouts.height == 0:
        raise DataError(f"replay: run {run_id!r} has no rollouts")
    no_lengths = frames.rollouts["length"].null_count() == frames.rollouts.height
    frames.rollouts = frames.rollouts.with_columns(frames.rollouts["length"].fill_null(0))
    logged = {"label": "logged", "allocator": frames.allocator,
              **summarize_steps(logged_result(frames.allocations, frames.rollouts))}
    rows = []
    for name, params in (allocators or {frames.allocator: None}).items():
        r = replay_run(store, run_id, name, params, seed=seed, frames=frames)
        rows.append({"label": name, **r.summary(), "params": r.params})
    if no_lengths:
        for row in [logged, *rows]:
            row["tokens"] = None
    return {"run_id": run_id, "logged": logged, "replays": rows,
            "note": "the run logged no token lengths: tokens are unknown" if no_lengths else None}


def whatif(store: RolloutReader, run_id: str, allocators: dict[str, dict[str, Any] | None] | None = None,
           seed: int | None = None) -> pl.DataFrame:
    """One row per allocator (the run as logged first): rollouts, tokens, groups, informative groups,
    informative per 1,000 rollouts, zero-signal fraction, and the saving against the logged run."""
    out = whatif_rows(store, run_id, allocators, seed)
    rows = [out["logged"], *out["replays"]]
    cols = ["label", "rollouts", "tokens", "groups", "informative_groups", "informative_per_1k", "zero_signal_frac"]
    frame = pl.DataFrame([{c: r.get(c) for c in cols} for r in rows], infer_schema_length=None)
    base = out["logged"]["rollouts"] or 1
    return frame.with_columns(rollouts_saved_frac=1.0 - pl.col("rollouts") / base)
