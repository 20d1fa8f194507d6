"""`Store.changes_since`: which tables the commits after a snapshot changed, and how (only new rows,
or rows deleted / rewritten), from DuckLake's record of each commit; None where it cannot be told."""

from __future__ import annotations

import synth
from workbench.store import open_store
from workbench.store.maintenance import compact
from workbench.store.records import StepRecord


def test_a_first_look_says_nothing_and_then_each_commit_names_its_tables(tmp_path):
    path = tmp_path / "store"
    run_id = synth.fill(path, runs=("uniform",), steps=3)[0]
    with open_store(path) as store:
        latest, changes = store.changes_since(None)
        assert changes is None and latest == store.snapshot_id()
        assert store.changes_since(latest) == (latest, {})

        store.add_event(run_id, "info", "note", "a note")
        after_event, changes = store.changes_since(latest)
        assert after_event == latest + 1 and changes == {"events": "insert"}

        store.write_step(StepRecord(run_id, 3, {"rollout/count": 0}, [], [], [], []))
        now, changes = store.changes_since(after_event)
        assert changes["steps"] == "insert" and "events" not in changes and "runs" not in changes
        assert store.changes_since(latest)[1]["events"] == "insert"  # the two commits together

        store.rollback_run(run_id, 1)  # deletes the steps past 1: a rewrite, not new rows
        _, changes = store.changes_since(now)
        assert changes["steps"] == "change"


def test_expired_snapshots_or_a_store_behind_the_id_given_say_none(tmp_path):
    path = tmp_path / "store"
    run_id = synth.fill(path, runs=("uniform",), steps=2)[0]
    with open_store(path) as store:
        first = store.snapshot_id()
        for i in range(3):
            store.add_event(run_id, "info", "note", f"note {i}")
        compact(store, older_than_s=0)  # expires every snapshot but the latest
        latest, changes = store.changes_since(first)
        assert changes is None and latest == store.snapshot_id()
        assert store.changes_since(latest + 10) == (latest, None)  # a store that went back
