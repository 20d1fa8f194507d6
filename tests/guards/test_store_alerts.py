"""The store's alerts and attempts: an alert with its rollouts, statuses, the rollout filter that opens
exactly them, an abandoned attempt that keeps every row while the live run reads as if rolled back,
and a schema-4 store migrated to hold alerts."""

from __future__ import annotations

import pytest

from workbench.errors import DataError, StoreError
from workbench.store import open_store, schema
from workbench.store.connection import Lake, local_location
from workbench.store.synthetic import Shape, SyntheticRun

SHAPE = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=12, prompt_pool=20, blocks=2)


@pytest.fixture
def run(tmp_path):
    """A store holding a 6-step synthetic run with two controls applied at steps 2 and 5."""
    st = open_store(tmp_path / "store")
    run_id = st.create_run("guarded", {}, seed=1)
    syn = SyntheticRun(run_id, SHAPE, seed=1)
    st.add_prompts(run_id, [dict(prompt_id=f"p{i:05d}", split="train", text=f"{i}+1=", answer=str(i + 1))
                            for i in range(3)])
    for step in range(1, 7):
        st.write_step(syn.step(step))
    for step in (2, 5):
        cid = st.add_control(run_id, "set_temperature", {"temperature": 1.0 + step})
        st.resolve_control(cid, "applied", step=step)
    st.add_event(run_id, "info", "checkpoint", "checkpoint at step 4", step=4)
    st.add_event(run_id, "warning", "x", "later", step=5)
    yield st, run_id
    st.close()


def _alert(step: int = 5, **kw):
    return dict(guard="degenerate_text", rule="share(repeat_frac >= 0.75) > 0.25", window_steps=1,
                action="alert", first_step=step, step=step, evidence={str(step): {"matched": 2}},
                message="m", **kw)


def test_alert_with_its_rollouts_and_statuses(run):
    st, run_id = run
    keys = st.rollouts(run_id, step_min=5, step_max=5, limit=3, columns=["step", "stage", "prompt_id", "idx"])
    aid = st.add_alert(run_id, _alert(), keys.to_dicts())
    row = st.alerts(run_id).to_dicts()[0]
    assert row["status"] == "open" and row["rollouts"] == 3 and row["steps_run_id"] == run_id
    # the rollout filter opens exactly the alert's rollouts
    got = st.rollouts(run_id, alert_id=aid, limit=50)
    assert got.select(keys.columns).to_dicts() == keys.to_dicts()
    assert st.count_rollouts(run_id, alert_id=aid) == 3
    st.set_alert_status(aid, "acknowledged")
    assert st.alerts(run_id, status="acknowledged").height == 1 and st.alerts(run_id, status="open").height == 0
    with pytest.raises(DataError, match="alert status 'gone'"):
        st.set_alert_status(aid, "gone")
    with pytest.raises(StoreError, match="unknown alert 'nope'"):
        st.set_alert_status("nope", "acted")


def test_archive_keeps_every_row_and_the_live_run_reads_as_rolled_back(run):
    st, run_id = run
    before = {t: st.sql(f"SELECT count(*) AS n FROM {t} WHERE run_id LIKE ?", [run_id + "%"])["n"][0]
              for t in ("steps", "rollouts", "allocations", "prompt_stats")}
    aid = st.add_alert(run_id, _alert(), st.rollouts(run_id, step_min=5, step_max=5, limit=2).to_dicts())
    attempt = st.archive_attempt(run_id, 4, "rolled back by a test")
    assert attempt == f"{run_id}.attempt1"
    assert st.run_steps(run_id)["step"].to_list() == [1, 2, 3, 4]
    assert st.run_steps(attempt)["step"].to_list() == [5, 6]
    for table, n in before.items():  # nothing lost: live + attempt = what was there
        live = st.sql(f"SELECT count(*) AS n FROM {table} WHERE run_id = ?", [run_id])["n"][0]
        old = st.sql(f"SELECT count(*) AS n FROM {table} WHERE run_id = ?", [attempt])["n"][0]
        assert live + old == n and old > 0
    # the control applied in the abandoned steps belongs to the attempt (a resume must not replay it)
    assert st.controls(run_id)["applied_step"].to_list() == [2]
    assert st.controls(attempt)["applied_step"].to_list() == [5]
    assert st.events(attempt)["step"].to_list() == [5]
    assert st.prompts(attempt).height == st.prompts(run_id).height > 0
    # the alert stays on the run; its evidence now lives in the attempt, and its link still opens it
    alert = st.alerts(run_id).to_dicts()[0]
    assert alert["steps_run_id"] == attempt
    assert st.count_rollouts(attempt, alert_id=aid) == 2
    # listing: the attempt is not a run of its own unless asked; the run knows its attempts
    assert attempt not in st.list_runs()["run_id"].to_list()
    assert attempt in st.list_runs(attempts=True)["run_id"].to_list()
    row = st.attempts(run_id).to_dicts()[0]
    assert (row["run_id"], row["first_step"], row["last_step"]) == (attempt, 5, 6)
    assert st.run(attempt)["status"] == "abandoned" and st.run(attempt)["parent_run_id"] == run_id
    # a resume's rollback afterwards deletes nothing of the attempt; a second rollback is attempt 2
    st.rollback_run(run_id, 3)
    assert st.run_steps(attempt).height == 2
    assert st.archive_attempt(run_id, 2, "again") == f"{run_id}.attempt2"
    assert st.run_steps(run_id)["step"].to_list() == [1, 2]
    assert st.run_steps(f"{run_id}.attempt2")["step"].to_list() == [3]


def test_resume_rollback_drops_open_alerts_past_the_checkpoint(run):
    st, run_id = run
    st.add_alert(run_id, _alert(step=3))
    seen = st.add_alert(run_id, _alert(step=6))
    st.add_alert(run_id, _alert(step=6))
    st.set_alert_status(seen, "acknowledged")
    st.rollback_run(run_id, 4)  # steps 5-6 are regenerated: their open alerts would come twice
    assert sorted(st.alerts(run_id)["step"].to_list()) == [3, 6]


def test_a_store_from_before_the_alerts_migrates_to_hold_them(tmp_path):
    path = tmp_path / "old"
    with open_store(path) as st:
        st.create_run("old", {}, seed=1)
    lake = Lake(local_location(path, create=False))
    try:
        before = next(v for v, (what, _) in schema.MIGRATIONS.items() if what.startswith("alerts"))
        def to_before(cur):  # the schema version whose migration creates the alerts tables
            cur.execute("DROP TABLE alerts")
            cur.execute("DROP TABLE alert_rollouts")
            cur.execute(f"UPDATE meta SET value = '{before}' WHERE key = 'schema_version'")
        lake.write(to_before, "make a store from before the alerts")
    finally:
        lake.close()
    with open_store(path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION > before
        run_id = st.list_runs()["run_id"][0]
        st.add_alert(run_id, _alert(), [dict(step=5, stage=0, prompt_id="p", idx=0)])
        assert st.alerts(run_id).height == 1
