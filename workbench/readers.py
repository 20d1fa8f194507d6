"""What readers of a store call on it, as `typing.Protocol`s that import nothing of the store: analysis and
the dashboard's pure modules type their `store` argument with these without depending on the store package
(`workbench.store.Store` satisfies them; the writers' protocols are in `workbench/store/protocols.py`).

- `RunReader`: a run's row, the runs, a run's steps, evaluations, events and controls.
- `RolloutReader`: the above and what analysis reads of a run: rollouts, allocations, per-prompt
  statistics and outcomes, prompt texts, read-only SQL over the store's tables.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import polars as pl


@runtime_checkable
class RunReader(Protocol):
    """Reads about runs: a run's row, the runs, and a run's steps, evaluations, events and controls."""

    def run(self, run_id: str) -> dict[str, Any]: ...

    def list_runs(self, *, attempts: bool = False) -> pl.DataFrame: ...

    def run_steps(self, run_ids: str | list[str], *, after: dict[str, int] | None = None) -> pl.DataFrame: ...

    def evals(self, run_id: str) -> pl.DataFrame: ...

    def events(self, run_id: str) -> pl.DataFrame: ...

    def controls(self, run_id: str) -> pl.DataFrame: ...


@runtime_checkable
class RolloutReader(RunReader, Protocol):
    """What analysis, notebooks and audits read: a run's rollouts, allocations, per-prompt statistics
    and outcomes, prompt texts, and read-only SQL over the store's tables."""

    def rollouts(self, run_id: str, *, limit: int = 50, offset: int = 0, columns: list[str] | None = None,
                 **filters: Any) -> pl.DataFrame: ...

    def count_rollouts(self, run_id: str, **filters: Any) -> int: ...

    def allocations(self, run_id: str, step: int | None = None, prompt_id: str | None = None) -> pl.DataFrame: ...

    def prompt_stats(self, run_id: str, step: int | None = None) -> pl.DataFrame: ...

    def prompt_outcomes(self, run_id: str, step_min: int, step_max: int, *, to_date: bool = True) -> pl.DataFrame: ...

    def prompt_texts(self, run_id: str) -> pl.DataFrame: ...

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> pl.DataFrame: ...
