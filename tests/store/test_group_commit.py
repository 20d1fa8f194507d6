"""Group commit in the engine's StepWriter: steps that arrive during a commit go together in the next
transaction, up to `commit_max_rows`; an idle writer commits at once; a held step is handed over after
`commit_interval_s`; flush re-raises a failed commit; readers see whole steps only."""

from __future__ import annotations

import os
import threading
import time

import pytest

from waiting import wait_until
from workbench.engine.steplog import StepWriter
from workbench.store.synthetic import SyntheticRun
from tests.store.conftest import SMALL, polled_counts


class SlowStore:
    """Wraps a Store: each write_steps call sleeps first (a busy catalog), and records its batch.
    With `gate`, the first commit also waits until the test sets it."""

    def __init__(self, store, delay_s: float = 0.0, fail_at: int | None = None,
                 gate: threading.Event | None = None) -> None:
        self.store, self.delay_s, self.fail_at, self.gate = store, delay_s, fail_at, gate
        self.started = threading.Event()
        self.batches: list[list[int]] = []

    def write_steps(self, records, **kw):
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(60)
        time.sleep(self.delay_s)  # a slow commit: the thing under test
        steps = [r.step for r in records]
        if self.fail_at is not None and self.fail_at in steps:
            raise RuntimeError(f"commit of step {self.fail_at} failed")
        self.store.write_steps(records, **kw)
        self.batches.append(steps)

    def write_step(self, record):
        self.write_steps([record])


def _write(writer: StepWriter, record) -> None:
    writer.write(record.step, record.metrics, record.rollouts, record.allocations, record.prompt_stats,
                 record.evals, record.prompts, record.events)


def test_steps_arriving_during_a_commit_go_together(store):
    run_id = store.create_run("gc", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    gate = threading.Event()
    slow = SlowStore(store, gate=gate)
    writer = StepWriter(slow, run_id, background=True, hold=False, commit_max_rows=10_000)
    try:
        _write(writer, syn.step(0))
        assert slow.started.wait(30)  # the idle writer took the first step at once
        for step in range(1, 6):
            _write(writer, syn.step(step))  # arrive while that commit runs
        gate.set()
        writer.flush()
    finally:
        gate.set()
        writer.close()
    assert slow.batches == [[0], [1, 2, 3, 4, 5]]  # the others went together
    assert store.run_steps(run_id)["step"].to_list() == list(range(6))
    assert len(writer.lags) == 6 and len(writer.commits) == len(slow.batches)


def test_groups_are_capped_at_commit_max_rows(store):
    run_id = store.create_run("cap", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)  # 16 rollouts per step
    gate = threading.Event()
    slow = SlowStore(store, gate=gate)
    writer = StepWriter(slow, run_id, background=True, hold=False, commit_max_rows=40)
    try:
        _write(writer, syn.step(0))
        assert slow.started.wait(30)
        for step in range(1, 6):  # 80 rollouts wait: not over 2 x 40, so no write blocks
            _write(writer, syn.step(step))
        gate.set()
        writer.flush()
    finally:
        gate.set()
        writer.close()
    assert slow.batches == [[0], [1, 2], [3, 4], [5]]  # 2 x 16 <= 40 < 3 x 16
    assert store.count_rollouts(run_id) == 6 * SMALL.rollouts_per_step


def test_the_writer_threads_cpu_is_counted_and_taken_per_step(store):
    run_id = store.create_run("cpu", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    writer = StepWriter(store, run_id, background=True, hold=False)
    try:
        assert writer.take_cpu_s() == 0.0  # nothing committed yet
        for step in range(3):
            _write(writer, syn.step(step))
        writer.flush()
        first = writer.take_cpu_s()
        assert first > 0  # the commits' work, on the writer's thread
        assert writer.take_cpu_s() == 0.0  # taken: the next step's share starts from here
    finally:
        writer.close()
    assert StepWriter(store, run_id).take_cpu_s() is None  # no background writer, nothing to count


def test_steps_within_the_commit_spacing_share_a_transaction(store):
    """commit_spacing_s: after a commit, steps arriving within the spacing wait for it to pass and go
    together; a flush does not wait for it."""
    run_id = store.create_run("spacing", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    slow = SlowStore(store)
    writer = StepWriter(slow, run_id, background=True, hold=False, commit_spacing_s=1.0)
    try:
        _write(writer, syn.step(0))  # the idle writer, no commit before: at once
        wait_until(lambda: len(slow.batches) == 1, 30, "the first commit", every=0.02)
        for step in (1, 2, 3):
            _write(writer, syn.step(step))  # within the spacing: wait, then one transaction
        wait_until(lambda: len(slow.batches) == 2, 30, "the spaced commit", every=0.02)
        assert slow.batches == [[0], [1, 2, 3]]
        assert writer.lags[1] >= 0.5  # step 1 came right after the first commit and waited out most of 1 s
    finally:
        writer.close()
    patient = StepWriter(slow, run_id, background=True, hold=False, commit_spacing_s=600.0)
    try:
        _write(patient, syn.step(4))
        wait_until(lambda: len(slow.batches) == 3, 30, "the first commit", every=0.02)
        _write(patient, syn.step(5))  # would wait 10 minutes for the spacing...
        t0 = time.monotonic()
        patient.flush()  # ...but a flush commits it now
        assert time.monotonic() - t0 < 120 and slow.batches[-1] == [5]
    finally:
        patient.close()


def test_held_step_is_committed_after_the_interval(store):
    run_id = store.create_run("hold", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    writer = StepWriter(store, run_id, background=True, commit_interval_s=0.3)
    try:
        _write(writer, syn.step(0))  # held: the loop does not release it
        wait_until(lambda: store.run_steps(run_id).height, 30, "the held step's commit", every=0.05)
        assert store.run_steps(run_id)["step"].to_list() == [0]
        assert writer.lags[0] >= 0.3
        _write(writer, syn.step(1))
        writer.release()
        writer.flush()
        assert store.run_steps(run_id)["step"].to_list() == [0, 1]
    finally:
        writer.close()


def test_a_step_with_evals_is_flushed_at_once(store):
    run_id = store.create_run("eval", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    writer = StepWriter(store, run_id, background=True, commit_interval_s=60)
    try:
        record = syn.step(0)
        record.evals = [{"prompt_id": "e1", "samples": 4, "correct": 2}]
        _write(writer, record)
        assert store.run_steps(run_id)["step"].to_list() == [0]  # visible when write returns
        assert store.evals(run_id)["correct"].to_list() == [2]
    finally:
        writer.close()


def test_flush_reraises_a_failed_commit_and_drops_the_waiting_steps(store):
    run_id = store.create_run("fail", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    gate = threading.Event()
    slow = SlowStore(store, fail_at=1, gate=gate)
    writer = StepWriter(slow, run_id, background=True, hold=False, commit_max_rows=32)
    _write(writer, syn.step(0))
    assert slow.started.wait(30)
    for step in range(1, 4):  # [1, 2] fails; [3] waits and is dropped
        _write(writer, syn.step(step))
    gate.set()
    with pytest.raises(RuntimeError, match="commit of step 1 failed"):
        writer.flush()
    writer.flush()  # raised once; nothing is left waiting
    writer.close()
    assert slow.batches == [[0]]
    assert store.run_steps(run_id)["step"].to_list() == [0]
    # a checkpoint taken before the failure covers only committed steps: roll back, regenerate
    store.rollback_run(run_id, 0)
    store.write_steps([syn.step(s) for s in (1, 2, 3)])
    assert store.run_steps(run_id)["step"].to_list() == [0, 1, 2, 3]


def test_readers_see_whole_steps_while_groups_commit(store):
    run_id = store.create_run("whole", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    records = [syn.step(s) for s in range(24)]
    writer = StepWriter(SlowStore(store, delay_s=0.05), run_id, background=True, hold=False,
                        commit_max_rows=64)
    with polled_counts(store, run_id) as seen:
        for record in records:
            _write(writer, record)
        writer.close()
    assert seen and all(n == s * SMALL.rollouts_per_step for n, s in seen)
    assert store.run_steps(run_id).height == 24


def test_synchronous_writer_commits_each_step(store):
    run_id = store.create_run("sync", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    writer = StepWriter(store, run_id, background=False)
    _write(writer, syn.step(0))
    assert store.run_steps(run_id)["step"].to_list() == [0]
    writer.close()


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread niceness is a Linux/POSIX call")
def test_writer_nice_lowers_only_the_writer_threads_priority(store):
    """`store.writer_nice`: the commit runs on a thread whose niceness is raised by that much; the
    thread that submits keeps its own."""
    run_id = store.create_run("gc-nice", {}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    seen: list[int] = []

    class Probe(SlowStore):
        def write_steps(self, records, **kw):
            seen.append(os.getpriority(os.PRIO_PROCESS, 0))  # 0: the calling thread on Linux
            super().write_steps(records, **kw)

    base = os.getpriority(os.PRIO_PROCESS, 0)
    writer = StepWriter(Probe(store), run_id, background=True, hold=False, nice=5)
    try:
        _write(writer, syn.step(0))
        writer.flush()
    finally:
        writer.close()
    assert seen == [min(19, base + 5)]
    assert os.getpriority(os.PRIO_PROCESS, 0) == base
    assert store.run_steps(run_id)["step"].to_list() == [0]


def test_writer_nice_is_checked(tmp_path):
    from workbench.config import RunConfig
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="store.writer_nice"):
        RunConfig.from_dict({"store": {"writer_nice": 25}})
