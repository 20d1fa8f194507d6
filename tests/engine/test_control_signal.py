"""The engine queries `controls` only when the store's control signal changed (a query per boundary
cost ~90 ms of a ~1.2 s step), and still never misses a command."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbench.allocators import make_allocator
from workbench.engine.control import LiveSettings
from workbench.engine.context import RunContext, RunState, apply_controls
from workbench.store import open_store


class Counting:
    """The real store, counting `pending_controls` queries."""

    def __init__(self, store):
        self.store, self.queries = store, 0

    def pending_controls(self, run_id):
        self.queries += 1
        return self.store.pending_controls(run_id)

    def __getattr__(self, name):
        return getattr(self.store, name)


@pytest.fixture
def engine(tmp_path):
    with open_store(str(tmp_path / "store")) as store:
        run_id = store.create_run("signal", {}, seed=0, status="running")
        live = LiveSettings(budget_kind="rollouts", budget=32, allocator=make_allocator("uniform", {"n": 4}),
                            temperature=1.0, eval_every=2, seed=0)
        counting = Counting(store)  # the loop's parts are not needed here: no writer to flush
        yield counting, run_id, RunContext(parts=SimpleNamespace(writer=None), state=RunState(live=live),
                                           store=counting, run_id=run_id)


def test_signal_changes_with_each_queued_command(tmp_path):
    with open_store(str(tmp_path / "store")) as store:
        run_id = store.create_run("r", {}, seed=0)
        assert store.control_signal(run_id) == ""
        store.add_control(run_id, "set_eval_interval", {"every": 3})
        first = store.control_signal(run_id)
        store.add_control(run_id, "set_eval_interval", {"every": 4})
        assert first and store.control_signal(run_id) not in ("", first)


def test_unchanged_signal_skips_the_query_and_no_command_is_missed(engine):
    store, run_id, s = engine
    apply_controls(s, step=1, boundary="step")
    assert store.queries == 1  # the first boundary always looks
    for step in range(2, 6):
        apply_controls(s, step=step, boundary="step")
        apply_controls(s, step=step, boundary="stage")
    assert store.queries == 1, "polled although nothing was queued"

    store.add_control(run_id, "set_budget", {"kind": "rollouts", "amount": 48})
    store.add_control(run_id, "set_temperature", {"temperature": 0.5})
    # a stage boundary applies the temperature and leaves the budget (a step-boundary command) pending
    apply_controls(s, step=6, boundary="stage")
    assert s.state.live.temperature == 0.5 and s.state.live.budget == 32
    apply_controls(s, step=7, boundary="step")
    assert s.state.live.budget == 48, "the stage boundary must not mark the budget command as seen"
    queries = store.queries
    apply_controls(s, step=8, boundary="step")
    assert store.queries == queries
    assert store.pending_controls(run_id) == []


def test_store_without_a_local_directory_polls_every_boundary(engine):
    store, run_id, s = engine
    store.control_signal = lambda _run_id: None  # a PostgreSQL catalog with remote data: no signal file
    for step in range(1, 4):
        apply_controls(s, step=step, boundary="step")
    assert store.queries == 3


def test_a_paused_run_has_committed_its_last_step(store_dir, tiny_config):
    """Background commits hold a step until the next update; a pause must not hold it back."""
    import threading

    from waiting import wait_until
    from workbench import control
    from workbench.engine import run

    cfg = tiny_config(steps=4, eval__every=0, eval__at_start=False, logging__background_writes=True)
    with open_store(str(store_dir)) as st:
        rid = st.create_run("pause", cfg.to_dict(), cfg.seed, status="created")
    seen: dict[str, int] = {}

    def on_step(step, _metrics):
        if step == 2:
            with open_store(str(store_dir)) as st:
                st.add_control(rid, "pause", {}, who="test")

    def watcher():
        with open_store(str(store_dir)) as st:
            try:
                wait_until(lambda: st.run(rid)["status"] == "paused", 120, "the run to pause")
                # the step before the pause reaches the store while the run stays paused
                wait_until(lambda: (st.run_steps(rid)["step"].max() or 0) >= 2, 60, "step 2 committed while paused")
                seen["status"] = st.run(rid)["status"]
                seen["last"] = int(st.run_steps(rid)["step"].max())
            finally:
                control.resume(st, rid, who="test")

    t = threading.Thread(target=watcher)
    t.start()
    run(cfg, store=str(store_dir), run_id=rid, on_step=on_step)
    t.join(timeout=60)
    assert seen == {"status": "paused", "last": 2}
    with open_store(str(store_dir)) as st:
        assert st.run(rid)["status"] == "finished"
        assert st.run_steps(rid)["step"].to_list() == [1, 2, 3, 4]
