"""`workbench bench episode-decision-bytes`: what allocation inside episodes (issue #41) costs the store, per
episode: short runs of the organism's tool task (`configs/organism-tools.toml`, a budget of 1,024 model
tokens a step, 32 prompts a step) uniform, with GRPO-RoC (x2), with ARPO branching, with AEPO branching, and
with RoC beside each of the two.

    workbench bench episode-decision-bytes --json
    workbench bench episode-decision-bytes --steps 10 --seed 1 --json

Each arm runs in a store of its own, so every data file of its `rollouts`, `turns`, `tool_calls` and
`allocations` tables is that run's: a file per table per commit (group commit may take a few steps in one).
Per arm: episodes stored, the store's bytes per episode (those files' sizes on disk), and what the decisions
add, per episode and in percent: each rollouts file written again by DuckDB (the writer DuckLake uses, with
the file's own codec) with and without the decision columns, `filter_kept` and the `decision` map (schema
16; before it, nine columns of their own), and each allocations file with and without RoC's words appended
to the reason (`decision_pct`); `with_tree_pct` counts ARPO's tree columns `parent_idx` and `branch_at` too
(the rollout shapes' columns, there before issue #41). Both as committed (most of it is each column's
footer in every file: ~100 bytes, filled or not) and after `compact` (what the writer's upkeep does every 100
steps of a run: the steps' files merged). The issue's bound, 5%, is judged on the larger of the two
(`within_bound`). `workbench bench episode-allocation` reports a figure over 40-step runs written as one
Parquet file each (as after compaction: `decision_bytes_pct`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from benchmarks.episode_allocation import DECISION_COLUMNS
from benchmarks.episodes_learning import CONFIG

ARMS = {"uniform": {}, "roc": {"rollout.episodes.roc_oversample": 2},
        "arpo": {"rollout.episodes.arpo_branch": True},
        "aepo": {"rollout.episodes.aepo_branch": True},
        "both": {"rollout.episodes.roc_oversample": 2, "rollout.episodes.arpo_branch": True},
        "roc_aepo": {"rollout.episodes.roc_oversample": 2, "rollout.episodes.aepo_branch": True}}
TREE_COLUMNS = ("parent_idx", "branch_at")
TABLES = ("rollouts", "turns", "tool_calls", "allocations")
"""The tables that hold an episode's record."""
BOUND_PCT = 5.0
"""The issue's bound on what the decision rows add to an episode's bytes."""


def _rewritten(con: Any, path: Path, select: str, codec: str) -> int:
    """Bytes of the Parquet file `path` written again by DuckDB as `select` over it, with `codec`."""
    out = path.with_suffix(".rewrite.parquet")
    con.execute(f"COPY ({select.format(src=f'read_parquet({str(path)!r})')}) TO {str(out)!r} "
                f"(FORMAT parquet, COMPRESSION {codec})")
    size = out.stat().st_size
    out.unlink()
    return size


def store_decision_bytes(store_dir: str, columns: tuple[str, ...]) -> tuple[int, int]:
    """(bytes `columns` and RoC's reason words add to the store's files, bytes of the episodes' files: rollouts,
    turns, tool calls, allocations), over every data file of the store (module docstring)."""
    import duckdb
    import pyarrow.parquet as pq

    data = Path(store_dir) / "data" / "main"
    whole = sum(f.stat().st_size for t in TABLES for f in (data / t).glob("*.parquet"))
    added = 0
    con = duckdb.connect()
    for f in sorted((data / "rollouts").glob("*.parquet")) + sorted((data / "allocations").glob("*.parquet")):
        meta = pq.ParquetFile(f).metadata
        codec = meta.row_group(0).column(0).compression if meta.num_row_groups else "ZSTD"
        names = set(pq.ParquetFile(f).schema_arrow.names)  # top-level columns (a map is two leaves)
        if f.parent.name == "rollouts":
            drop = [c for c in columns if c in names]
            without = f"SELECT * EXCLUDE ({', '.join(drop)}) FROM {{src}}" if drop else "SELECT * FROM {src}"
        else:
            without = "SELECT * REPLACE (regexp_replace(reason, '; roc: .*$', '') AS reason) FROM {src}"
        added += _rewritten(con, f, "SELECT * FROM {src}", codec) - _rewritten(con, f, without, codec)
    con.close()
    return added, whole - added


def _arm(arm: str, store_dir: str, steps: int, seed: int, budget: int, extra: dict[str, Any]) -> dict[str, Any]:
    from workbench.control.launch import resolve_config
    from workbench.engine import run
    from workbench.store import open_store

    over = {"steps": steps, "allocator.budget_kind": "tokens", "allocator.budget": budget,
            "allocator.prompts_per_step": 32, "eval.every": 0, "eval.at_start": False, "checkpoint.every": 0,
            "seed": seed, "model.threads": 1, **extra, **ARMS[arm]}
    rid = run(resolve_config(str(CONFIG), over, name=f"decision-bytes-{arm}-s{seed}"), store=store_dir)
    with open_store(store_dir) as st:
        n = max(st.count_rollouts(rid), 1)
    out: dict[str, Any] = {"run_id": rid, "episodes": n, "as_committed": _figures(store_dir, n)}
    from workbench.store.maintenance import compact

    with open_store(store_dir) as st:  # what upkeep does every 100 steps of a run: merge the steps' files
        compact(st, older_than_s=0)
    out["compacted"] = _figures(store_dir, n)
    return out


def _figures(store_dir: str, n: int) -> dict[str, Any]:
    added, whole = store_decision_bytes(store_dir, DECISION_COLUMNS)
    tree_added, tree_whole = store_decision_bytes(store_dir, DECISION_COLUMNS + TREE_COLUMNS)
    return {"files": sum(1 for t in TABLES for _ in (Path(store_dir) / "data" / "main" / t).glob("*.parquet")),
            "store_bytes_per_episode_without": round(whole / n, 1),
            "decision_bytes_per_episode": round(added / n, 2), "decision_pct": round(100.0 * added / max(whole, 1), 3),
            "with_tree_bytes_per_episode": round(tree_added / n, 2),
            "with_tree_pct": round(100.0 * tree_added / max(tree_whole, 1), 3)}


def bench_episode_decision_bytes(store_dir: str, *, steps: int = 4, seed: int = 0, budget: int = 1024,
                                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every arm once (module docstring); one JSON-able dict. `extra`: config overrides for every arm (the
    tests' small organism)."""
    models = (Path(store_dir) / "models").resolve()  # built once, shared by the arms' stores
    models.mkdir(parents=True, exist_ok=True)
    arms = {}
    for arm in ARMS:  # a store of its own per arm (its data files are that run's), under --store
        path = Path(store_dir) / "episode-decision-bytes" / f"{arm}-s{seed}-{steps}"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        (path / "models").symlink_to(models)
        arms[arm] = _arm(arm, str(path), steps, seed, budget, extra or {})
    worst = {k: max(a[k]["decision_pct"] for a in arms.values()) for k in ("as_committed", "compacted")}
    return {"config": "configs/organism-tools.toml", "steps": steps, "seed": seed,
            "budget_model_tokens_per_step": budget, "load": list(os.getloadavg()), "arms": arms,
            "decision_pct_max": worst, "bound_pct": BOUND_PCT, "within_bound": max(worst.values()) <= BOUND_PCT}
