"""`workbench bench chaos`'s comparisons: everything a run stored against a reference run of the same
config and seed in one store, row by row with the store's own SQL (`compare_runs`), and what an
asynchronous run must keep through kills instead (`async_checks`). See `benchmarks.chaos`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# -- comparing two runs in one store ------------------------------------------------------------------

KEYS = {
    "steps": ["step"],
    "rollouts": ["step", "stage", "prompt_id", "idx"],
    "allocations": ["step", "stage", "prompt_id"],
    "prompt_stats": ["step", "prompt_id"],
    "evals": ["step", "prompt_id"],
}
"""Natural key of each step table (unique per run)."""

SKIP = {"run_id", "created_at", "time_generate_s", "time_verify_s", "time_train_s", "time_log_s",
        "step_time_s", "worker"}
"""Columns that legitimately differ between two runs (ids, wall-clock times, which worker)."""

_METRICS = ("map_from_entries(list_filter(map_entries(metrics), "
            "e -> NOT (e.key LIKE 'timing_s/%' OR e.key LIKE 'timing_cpu_s/%' OR e.key LIKE 'perf/%' "
            "OR e.key LIKE 'lane/%')))")
"""`steps.metrics` without its wall-clock and CPU-time entries (the per-worker lanes' times too)."""


def _columns(table: str) -> list[str]:
    from workbench.store.schema import TABLES

    return [c for c, _ in TABLES[table] if c not in SKIP]


def compare_table(store: Any, table: str, run: str, ref: str) -> dict[str, int]:
    """Rows of `run` vs `ref` in one table: only in the reference (lost), only in the run (extra),
    present in both but different, and keys the run holds more than once (duplicated)."""
    keys = KEYS[table]
    cols = [c for c in _columns(table) if c not in keys]
    select = ", ".join(keys + [(_METRICS + " AS metrics") if c == "metrics" else c for c in cols])
    on = " AND ".join(f"a.{k} = b.{k}" for k in keys)
    differ = " OR ".join(f"a.{c} IS DISTINCT FROM b.{c}" for c in cols) or "false"
    query = f"""
        WITH a AS (SELECT {select} FROM {table} WHERE run_id = $run),
             b AS (SELECT {select} FROM {table} WHERE run_id = $ref)
        SELECT count(*) FILTER (WHERE a.{keys[0]} IS NULL) AS lost,
               count(*) FILTER (WHERE b.{keys[0]} IS NULL) AS extra,
               count(*) FILTER (WHERE a.{keys[0]} IS NOT NULL AND b.{keys[0]} IS NOT NULL AND ({differ})) AS differ
        FROM a FULL JOIN b ON {on}"""
    row = store.sql(query, {"run": run, "ref": ref}).to_dicts()[0]
    dup = store.sql(f"SELECT list(DISTINCT step) AS steps FROM (SELECT step FROM {table} WHERE run_id = $run "
                    f"GROUP BY {', '.join(keys)} HAVING count(*) > 1)", {"run": run}).to_dicts()[0]["steps"]
    return {**{k: int(v) for k, v in row.items()}, "duplicated_steps": sorted(dup or [])}


def _lost_steps(store: Any, run: str, ref: str) -> list[int]:
    frame = store.sql("SELECT DISTINCT step FROM steps WHERE run_id = $ref AND step NOT IN "
                      "(SELECT step FROM steps WHERE run_id = $run) ORDER BY step", {"run": run, "ref": ref})
    return [int(s) for s in frame["step"].to_list()]


def _controls(store: Any, run_id: str) -> list[tuple[Any, ...]]:
    rows = store.controls(run_id).to_dicts()
    return [(r["command"], json.loads(r["args"]) if isinstance(r["args"], str) else r["args"], r["status"],
             r["applied_step"]) for r in rows]


def _weights_equal(store_dir: Path, run: str, ref: str) -> bool:
    import torch

    from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint

    paths = [latest_checkpoint(checkpoint_dir(store_dir, r)) for r in (run, ref)]
    if None in paths or paths[0].name != paths[1].name:
        return False
    a, b = (torch.load(p, map_location="cpu", weights_only=False) for p in paths)
    return a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k])
                                                          for k in a["model"])


def compare_runs(store_dir: Path, run: str, ref: str) -> dict[str, Any]:
    """Everything `run` stored against `ref` (see the module docstring); the bench's figures."""
    from workbench.store import open_store

    with open_store(store_dir, read_only=True) as st:
        tables = {t: compare_table(st, t, run, ref) for t in KEYS}
        lost = _lost_steps(st, run, ref)
        controls_equal = _controls(st, run) == _controls(st, ref)
        controls = _controls(st, run)
    duplicated = sorted({s for t in tables.values() for s in t["duplicated_steps"]})
    mismatched = {t: v["lost"] + v["extra"] + v["differ"] for t, v in tables.items()}
    weights = _weights_equal(store_dir, run, ref)
    return {
        "steps_lost": len(lost),
        "steps_duplicated": len(duplicated),
        "rows_mismatched": mismatched,
        "controls_equal": controls_equal,
        "controls": [f"{c[0]} {c[2]} at step {c[3]}" for c in controls],
        "weights_equal": weights,
        "final_equal": not lost and not duplicated and not any(mismatched.values()) and controls_equal and weights,
        "tables": tables,
    }


def async_checks(store_dir: Path, run: str, ref: str, eta: int) -> dict[str, Any]:
    """What an asynchronous run must keep through kills (see the module docstring)."""
    from workbench.store import open_store

    with open_store(store_dir, read_only=True) as st:
        lost = _lost_steps(st, run, ref)
        steps_dup = compare_table(st, "steps", run, ref)["duplicated_steps"]
        rows = st.sql("""
            WITH a AS (SELECT step, count(*) AS n FROM rollouts WHERE run_id = $run GROUP BY step),
                 b AS (SELECT step, count(*) AS n FROM rollouts WHERE run_id = $ref GROUP BY step)
            SELECT coalesce(sum(greatest(b.n - coalesce(a.n, 0), 0)), 0) AS lost,
                   coalesce(sum(greatest(coalesce(a.n, 0) - coalesce(b.n, 0), 0)), 0) AS extra
            FROM a FULL JOIN b ON a.step = b.step""", {"run": run, "ref": ref}).to_dicts()[0]
        twice = st.sql("SELECT count(*) AS n FROM (SELECT 1 FROM rollouts WHERE run_id = $run "
                       "GROUP BY step, stage, prompt_id, idx HAVING count(*) > 1)", {"run": run}).to_dicts()[0]["n"]
        bound = st.sql("SELECT max(staleness) AS stale FROM rollouts WHERE run_id = $run", {"run": run}).to_dicts()[0]
        stats = st.sql("SELECT count(*) AS n FROM allocations WHERE run_id = $run AND stats_version > step - 1",
                       {"run": run}).to_dicts()[0]["n"]
        controls_equal = _controls(st, run) == _controls(st, ref)
        status = st.run(run)["status"]
    stale = int(bound["stale"] or 0)
    return {
        "steps_lost": len(lost), "steps_duplicated": len(steps_dup),
        "rollouts_lost": int(rows["lost"]), "rollouts_extra": int(rows["extra"]), "rollouts_twice": int(twice),
        "staleness_max": stale, "allocations_on_newer_stats": int(stats), "controls_equal": controls_equal,
        "status": status,
        "ok": (not lost and not steps_dup and not rows["lost"] and not rows["extra"] and not twice
               and stale <= eta and not stats and controls_equal and status == "finished"),
    }
