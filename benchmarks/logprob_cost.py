"""What `logging.token_logprobs` costs (`workbench bench logprobs`): the tiny run with it on and off,
alternated so that drifting machine load hits both sides alike, each run in a fresh store.

Per side: the median step time (`timing_s/step`, and the generate / train / log phases; the first 2
steps of each run left out) and the rollouts table's Parquet bytes per rollout in the store; then the
rows of one run written to one Parquet file (zstd, Parquet 2) with and without the two columns, which
isolates their bytes from the store's file layout.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

PHASES = ("step", "generate", "train", "log")
WARMUP_STEPS = 2
COLUMNS = ["token_logprobs", "token_trainer_logprobs"]


def _one_run(on: bool, steps: int, models: Path) -> tuple[list[dict[str, Any]], int, int, Any]:
    """(step metrics, rollouts table bytes, rollouts, the run's rollouts when `on`) of one tiny run."""
    from workbench.engine import run
    from benchmarks.tiny import tiny_run
    from workbench.store import open_store

    root = Path(tempfile.mkdtemp(prefix="workbench-logprobs-"))
    try:
        (root / "models").symlink_to(models)
        cfg = tiny_run({"name": f"logprobs-{'on' if on else 'off'}", "steps": steps, "eval.every": 0,
                        "eval.at_start": False, "checkpoint.every": 0, "logging.token_logprobs": on})
        marks: list[dict[str, Any]] = []
        rid = run(cfg, store=str(root), on_step=lambda s, m: marks.append(m) if s else None)
        size = sum(f.stat().st_size for f in (root / "data" / "main" / "rollouts").glob("*.parquet"))
        with open_store(root) as st:
            n = st.count_rollouts(rid)
            rows = st.rollouts(rid, limit=n) if on else None
        return marks[WARMUP_STEPS:], size, n, rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _file_bytes(rows: Any) -> dict[str, float]:
    """Bytes per rollout of `rows` in one zstd Parquet file, with and without the two columns."""
    import pyarrow.parquet as pq

    table = rows.to_arrow()
    tmp = Path(tempfile.mkdtemp(prefix="workbench-logprobs-"))
    try:
        sizes = {}
        for name, t in (("with", table), ("without", table.drop(COLUMNS))):
            pq.write_table(t, tmp / f"{name}.parquet", compression="zstd", data_page_version="2.0")
            sizes[name] = (tmp / f"{name}.parquet").stat().st_size / table.num_rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rollouts": table.num_rows, "bytes_per_rollout_with": sizes["with"],
            "bytes_per_rollout_without": sizes["without"], "ratio": sizes["with"] / sizes["without"],
            "trainer_rows_filled": table.num_rows - table.column(COLUMNS[1]).null_count,
            "mean_length": float(rows["length"].mean())}


def bench_token_logprobs(*, steps: int = 16, rounds: int = 6) -> dict[str, Any]:
    """The figures of `workbench bench logprobs` (see the module docstring)."""
    from benchmarks.tiny import small_organism_models

    models = small_organism_models()
    sides: dict[bool, dict[str, list]] = {on: {"marks": [], "bytes": [], "rollouts": []} for on in (True, False)}
    rows = None
    for k in range(rounds):
        for on in (True, False) if k % 2 == 0 else (False, True):
            marks, size, n, got = _one_run(on, steps, models)
            sides[on]["marks"] += marks
            sides[on]["bytes"].append(size)
            sides[on]["rollouts"].append(n)
            rows = got if got is not None and rows is None else rows
    out: dict[str, Any] = {}
    for on, d in sides.items():
        out["on" if on else "off"] = {
            **{f"median_{p}_s": statistics.median(m.get(f"timing_s/{p}", 0.0) for m in d["marks"]) for p in PHASES},
            "steps_timed": len(d["marks"]), "bytes_per_rollout": sum(d["bytes"]) / max(sum(d["rollouts"]), 1)}
    out["step_time_ratio_on_vs_off"] = out["on"]["median_step_s"] / out["off"]["median_step_s"]
    out["store_bytes_ratio_on_vs_off"] = out["on"]["bytes_per_rollout"] / out["off"]["bytes_per_rollout"]
    out["one_file"] = _file_bytes(rows)
    out["detail"] = {"steps_per_run": steps, "rounds": rounds, "warmup_steps_left_out": WARMUP_STEPS}
    return out
