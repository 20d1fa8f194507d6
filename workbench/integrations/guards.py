"""The guards of runs imported from other engines (verl, TRL, NeMo-RL, generic files), including one being
followed with `workbench import --follow`: the same rules over the imported steps and rollouts, alert
only (we cannot act on another engine's run). "Your verl run's entropy is collapsing" appears while that
run trains elsewhere."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from workbench.guards.config import guard_set
from workbench.guards.watch import Watch, alert_row, metrics_map, rollout_rows

if TYPE_CHECKING:
    from workbench.store.protocols import RunStore

OUTCOME = "alert only: the run is imported from another engine, which we cannot steer"


class ImportWatch:
    """The guards of one imported run (the default set, every action turned into an alert)."""

    def __init__(self, store: RunStore, run_id: str, *, new_run: bool = False) -> None:
        self.store, self.run_id = store, run_id
        guards = {n: dataclasses.replace(g, action="alert", settings={}) for n, g in guard_set(()).items()}
        self.watch = Watch(guards)
        self.loaded = new_run
        """True once the steps recorded before this watch began are read (none for a run it saw created)."""

    def observe(self, step: int, metrics: dict[str, Any], rollouts: Any) -> list[str]:
        """Evaluate the guards on one imported step; returns the ids of the alerts raised."""
        if not self.loaded:
            self.loaded = True
            steps = self.store.run_steps(self.run_id)
            earlier = steps.filter(steps["step"] < step) if len(steps) else steps
            self.watch.load_history([(r["step"], metrics_map(r["metrics"])) for r in earlier.to_dicts()])
        rows = rollout_rows(rollouts, step)
        ids = []
        for f in self.watch.step(step, metrics, rows):
            ids.append(self.store.add_alert(self.run_id, alert_row(f, outcome=OUTCOME), f.rollouts))
        return ids

    def observe_records(self, records: list[Any]) -> list[str]:
        """After an importer committed `records` (StepRecords of this run): evaluate the guards on each
        step in order; returns the ids of the alerts raised."""
        return [a for r in sorted(records, key=lambda r: r.step) for a in self.observe(r.step, r.metrics, r.rollouts)]
