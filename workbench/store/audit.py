"""Read-only figures the harnesses check a store with (the soak bench, the bad-input corpus): whole
steps against torn ones, row counts, the lake's last snapshot. The SQL lives here, with the store's."""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.readers import RolloutReader

COUNTED = ("runs", "steps", "rollouts", "allocations", "prompt_stats", "evals", "events", "controls", "prompts")
"""The tables a fingerprint counts (heartbeats excluded: they change)."""

WHOLE_STEPS = """
WITH s AS (SELECT run_id, step, rollouts FROM steps WHERE list_contains($runs, run_id)),
     r AS (SELECT run_id, step, count(*) FILTER (WHERE NOT off_policy) AS n FROM rollouts
           WHERE list_contains($runs, run_id) GROUP BY ALL),
     a AS (SELECT run_id, step, count(*) AS n FROM allocations WHERE list_contains($runs, run_id) GROUP BY ALL),
     p AS (SELECT run_id, step, count(*) AS n FROM prompt_stats WHERE list_contains($runs, run_id) GROUP BY ALL),
     k AS (SELECT run_id, step FROM s UNION SELECT run_id, step FROM r UNION SELECT run_id, step FROM a
           UNION SELECT run_id, step FROM p)
SELECT count(*) AS steps,
       count(*) FILTER (WHERE s.rollouts IS NULL OR coalesce(r.n, 0) <> s.rollouts OR a.n IS NULL
                        OR p.n IS NULL) AS torn
FROM k LEFT JOIN s USING (run_id, step) LEFT JOIN r USING (run_id, step)
       LEFT JOIN a USING (run_id, step) LEFT JOIN p USING (run_id, step)
"""
"""One statement, so one snapshot: how many steps are visible and how many are visible only in part."""


def whole_steps(store: RolloutReader, runs: list[str]) -> dict[str, int]:
    """{"steps": visible steps of `runs`, "torn": those visible only in part} (one snapshot)."""
    row = store.sql(WHOLE_STEPS, {"runs": runs}).to_dicts()[0]
    return {"steps": int(row["steps"]), "torn": int(row["torn"] or 0)}


def rollout_scan(store: RolloutReader, run_id: str) -> pl.DataFrame:
    """A notebook's scan of one run's rollouts: keys, reward, length and the token entropies, in order."""
    return store.sql("SELECT run_id, step, stage, prompt_id, idx, reward, length, entropy_mean, token_entropy "
                     "FROM rollouts WHERE run_id = ? ORDER BY step, stage, prompt_id, idx", [run_id])


def last_snapshot(store: RolloutReader) -> int:
    """The lake's latest snapshot id (commits made = its growth)."""
    return int(store.sql("SELECT max(snapshot_id) AS s FROM lake.snapshots()")["s"][0])


def steps_per_run(store: RolloutReader, runs: list[str]) -> dict[str, int]:
    """Committed steps of each of `runs` that has any."""
    frame = store.sql("SELECT run_id, count(*) AS n FROM steps WHERE list_contains(?, run_id) GROUP BY ALL", [runs])
    return dict(zip(frame["run_id"].to_list(), frame["n"].to_list()))


def row_count(store: RolloutReader, table: str, runs: list[str] | None = None) -> int:
    """Rows of `table` (one of `COUNTED`), of `runs` only when given."""
    if table not in COUNTED:
        raise ValueError(f"row_count: unknown table {table!r}")
    if runs is None:
        return int(store.sql(f"SELECT count(*) AS n FROM {table}")["n"][0])
    return int(store.sql(f"SELECT count(*) AS n FROM {table} WHERE list_contains(?, run_id)", [runs])["n"][0])


def control_counts(store: RolloutReader, runs: list[str]) -> list[dict[str, Any]]:
    """Controls of `runs` counted by (status, who)."""
    return store.sql("SELECT status, who, count(*) AS n FROM controls WHERE list_contains(?, run_id) GROUP BY ALL",
                     [runs]).to_dicts()


def run_statuses(store: RolloutReader) -> list[tuple[str, str]]:
    """(run_id, status) of every run, sorted."""
    return sorted(store.sql("SELECT run_id, status FROM runs").rows())
