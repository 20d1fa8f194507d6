"""What the parts around the store may call on it, as small `typing.Protocol`s: a function typed against
one says which calls it makes (and a test double, where a test needs one, names what it stands in for).
`Store` (`workbench/store/store.py`) satisfies all of them; `tests/store/test_protocols.py` checks it.

- `RunReader`, `RolloutReader` (`workbench/readers.py`, below the store so that pure modules can name
  them): a run's row, steps, evaluations, events and controls; rollouts, allocations, per-prompt
  statistics and outcomes, prompt texts, read-only SQL.
- `RunWriter`: what a run's own process writes (its status, heartbeat, steps, evaluations, events).
- `ControlStore`: control commands and their outcomes (`workbench.control`, the engine's boundaries),
  with the reads that check a command against its run.
- `RunStore`: everything the engine calls on the store while it runs a run (the three above, rollback,
  alerts and attempts, and the store's handle: the run's local folder).
- `ImportStore`: a `RunStore` that importers of other engines' runs use (finding an earlier import's run,
  its prompts, registering prompts).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import polars as pl

from workbench.errors import StoreError
from workbench.readers import RolloutReader, RunReader
from workbench.store.handle import StoreHandle
from workbench.store.records import StepRecord

__all__ = ["ControlStore", "ImportStore", "RolloutReader", "RunReader", "RunStore", "RunWriter"]


@runtime_checkable
class RunWriter(Protocol):
    """A run's own writes: its row, status and heartbeat, its steps, evaluations and events."""

    def create_run(self, name: str, config: dict[str, Any], seed: int, *, parent_run_id: str | None = None,
                   pid: int | None = None, host: str | None = None, code_version: str | None = None,
                   log_path: str | None = None, status: str = "created", source: str | None = None,
                   run_id: str | None = None) -> str: ...

    def set_run_status(self, run_id: str, status: str, *, error: str | None = None,
                       pid: int | None = None) -> None: ...

    def heartbeat(self, run_id: str) -> None: ...

    def write_step(self, record: StepRecord) -> None: ...

    def write_steps(self, records: list[StepRecord], *, timeout_s: float = 120.0,
                    on_retry: Callable[[StoreError], None] | None = None) -> None: ...

    def write_evals(self, run_id: str, step: int, rows: list[dict[str, Any]]) -> None: ...

    def add_event(self, run_id: str, level: str, kind: str, message: str, *, step: int | None = None,
                  data: Any = None) -> str: ...


@runtime_checkable
class ControlStore(RunReader, Protocol):
    """Control commands: queued by people and guards (checked against their run), applied (or refused)
    by the engine."""

    def add_control(self, run_id: str, command: str, args: dict[str, Any] | None = None, *,
                    who: str = "cli") -> int: ...

    def control_signal(self, run_id: str) -> str | None: ...

    def pending_controls(self, run_id: str) -> list[dict[str, Any]]: ...

    def resolve_control(self, control_id: int, status: str, *, step: int | None = None,
                        reason: str | None = None) -> None: ...


@runtime_checkable
class RunStore(RunWriter, ControlStore, Protocol):
    """What the engine calls on the store while it runs a run: its writes and controls, the reads of a
    resume and of the guards, rollback, alerts and earlier attempts; its handle (the run's local folder)."""

    handle: StoreHandle

    def rollback_run(self, run_id: str, step: int) -> None: ...

    def add_alert(self, run_id: str, alert: dict[str, Any], rollouts: list[dict[str, Any]] | None = None) -> str: ...

    def set_alert_status(self, alert_id: str, status: str, *, outcome: str | None = None) -> None: ...

    def attempts(self, run_id: str) -> pl.DataFrame: ...

    def archive_attempt(self, run_id: str, step: int, reason: str) -> str: ...


@runtime_checkable
class ImportStore(RunStore, Protocol):
    """What the importers (`workbench.integrations`) call: a run's calls, and finding the run an earlier
    import of the same source made, its prompts, and registering prompts."""

    def runs_from(self, source: str, name: str) -> pl.DataFrame: ...

    def prompts(self, run_id: str) -> pl.DataFrame: ...

    def add_prompts(self, run_id: str, rows: list[dict[str, Any]]) -> None: ...
