"""Whole-run frames for the notebooks, read through the store's readers (no SQL here).

    from workbench.analysis.frames import pick_runs, run_rollouts
    runs = pick_runs(store, run_ids=[], latest=4)      # [] means the latest runs in the store
    frame = run_rollouts(store, run_id, columns=["step", "reward", "entropy_mean"])
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.errors import DataError
from workbench.readers import RolloutReader


def pick_runs(store: RolloutReader, run_ids: list[str] | str | None = None, latest: int = 4) -> pl.DataFrame:
    """The runs to analyse, one row each (run_id, name, status, allocator, label, steps, seed): the given
    ids in the given order, or the `latest` newest runs that logged at least one step. `label` is
    "<name> · <allocator> · <time-hex of the id>" for legends (unique per run)."""
    runs = store.list_runs()
    if runs.height == 0:
        raise DataError("the store holds no runs yet: start one with `workbench run`")
    if isinstance(run_ids, str):
        run_ids = [run_ids]
    if run_ids:
        unknown = [r for r in run_ids if r not in set(runs["run_id"].to_list())]
        if unknown:
            raise DataError(f"unknown run id(s) {unknown}; runs in the store: {runs['run_id'].head(10).to_list()}")
        order = {r: i for i, r in enumerate(run_ids)}
        runs = runs.filter(pl.col("run_id").is_in(list(run_ids))).sort(
            pl.col("run_id").replace_strict(order, return_dtype=pl.Int64))
    else:
        runs = runs.filter(pl.col("steps") > 0).head(latest)
        if runs.height == 0:
            raise DataError("no run in the store has logged a step yet")
    rows = []
    for row in runs.iter_rows(named=True):
        cfg = store.run(row["run_id"]).get("config") or {}
        alloc = (cfg.get("allocator") or {}).get("name") or row.get("source") or "?"  # imported: the engine
        rows.append({"run_id": row["run_id"], "name": row["name"], "status": row["status"], "allocator": alloc,
                     "steps": row["steps"], "seed": row["seed"],
                     "label": f"{row['name']} · {alloc} · {_short_id(row['run_id'])}"})
    return pl.DataFrame(rows)


def _short_id(run_id: str) -> str:
    """`<name>-<date>-<time>-<hex>` -> `<time>-<hex>`: what tells runs of one name apart."""
    parts = run_id.rsplit("-", 3)
    return f"{parts[2]}-{parts[3]}" if len(parts) == 4 else run_id


def run_rollouts(store: RolloutReader, run_id: str, columns: list[str] | None = None, **filters: Any) -> pl.DataFrame:
    """Every rollout of a run matching the filters (the `rollouts` reader's), all pages at once, in the
    stable order (step, stage, prompt_id, idx)."""
    n = store.count_rollouts(run_id, **filters)
    return store.rollouts(run_id, limit=max(n, 1), columns=columns, **filters)


def with_labels(frame: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """`frame` (with a run_id column) joined with the runs' label and allocator."""
    return frame.join(runs.select("run_id", "label", "allocator"), on="run_id", how="left")


def stack(store: RolloutReader, runs: pl.DataFrame, read: Any) -> pl.DataFrame:
    """`read(store, run_id)` for every run, stacked with run_id, label and allocator columns."""
    parts = []
    for run_id in runs["run_id"].to_list():
        part = read(store, run_id)
        if part.height:
            if "run_id" not in part.columns:
                part = part.with_columns(pl.lit(run_id).alias("run_id"))
            parts.append(part)
    if not parts:
        return pl.DataFrame()
    return with_labels(pl.concat(parts, how="diagonal_relaxed"), runs)
