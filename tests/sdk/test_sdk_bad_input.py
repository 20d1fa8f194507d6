"""Bad input to the SDK and a store that does not take commits: a warning recorded in the store (or, with
on_error="raise", a DataError naming the argument), never an exception into the trainer; the good rows
of the run are all stored. Real store, in-process."""

from __future__ import annotations

import fcntl
import os
import time

import numpy as np
import pytest

import workbench
from workbench.errors import DataError
from workbench.sdk import SdkWarning
from workbench.store import open_store
from workbench.store.connection import LOCK_FILE


def _log(run, step, n=4, **kw):
    args = {"prompts": [f"q{i % 2}" for i in range(n)], "responses": [f"a{step}-{i}" for i in range(n)],
            "rewards": [float(i % 2) for i in range(n)]}
    args.update(kw)
    return run.log_rollouts(step, **args)


def _stored(path, run_id):
    with open_store(path, read_only=True) as s:
        return s.rollouts(run_id, limit=1000), s.events(run_id), s.run_steps(run_id)


def test_bad_calls_warn_and_keep_the_rest(tmp_path):
    path = tmp_path / "store"
    run = workbench.init(store=path, name="bad", heartbeat_s=0)
    with pytest.warns(SdkWarning) as caught:
        assert _log(run, 0) == 4
        assert _log(run, 0, responses=["only one"]) == 0                    # lengths disagree: refused whole
        assert _log(run, 0, token_ids=[[1, 2]] * 4, token_entropy=[[0.1]] * 4) == 0  # per-token lengths disagree
        assert _log(run, 1, rewards=[1.0, float("nan"), 0.0, float("inf")]) == 2    # NaN / inf rows left out
        assert _log(run, 2, responses=[b"ok", b"\xff\xfe bad", "x\udcff", "fine"]) == 4  # not UTF-8
        assert _log(run, 1) == 0                                            # step goes backwards
        assert _log(run, "three") == 0                                      # not an integer step
        run.log_step(2, {"train/loss": 0.5})
    run.finish()
    messages = [str(w.message) for w in caught]
    for needle in ("responses: 1 values for 4 rollouts", "token_entropy[0]: 1 values but token_ids[0] has 2",
                   "2 NaN or infinite", "not valid UTF-8", "step 1 goes backwards", "step must be an integer"):
        assert any(needle in m for m in messages), (needle, messages)
    rollouts, events, steps = _stored(path, run.run_id)
    assert sorted(rollouts.group_by("step").len().rows()) == [(0, 4), (1, 2), (2, 4)]
    texts = rollouts.filter(rollouts["step"] == 2)["response"].to_list()
    assert "\ufffd" in texts[1] + texts[2] and "ok" in texts and "fine" in texts
    assert events.filter(events["kind"] == "sdk_bad_input").height == len(run.problems) == 6
    assert steps["step"].to_list() == [0, 1, 2]


def test_on_error_raise_names_the_argument(tmp_path):
    run = workbench.init(store=tmp_path / "store", name="strict", on_error="raise", heartbeat_s=0)
    with pytest.raises(DataError, match=r"rewards: 3 values for 4 rollouts"):
        _log(run, 0, rewards=[1.0, 0.0, 1.0])
    with pytest.raises(DataError, match=r"unknown argument\(s\) \['advantage'\]"):
        _log(run, 0, advantage=[0.0] * 4)
    _log(run, 3)
    with pytest.raises(DataError, match="step 2 goes backwards"):
        _log(run, 2)
    run.finish()


def test_init_refuses_bad_arguments(tmp_path):
    with pytest.raises(DataError, match="on_error"):
        workbench.init(store=tmp_path / "s", on_error="ignore")
    with pytest.raises(DataError, match="rank 2 is outside world_size 2"):
        workbench.init(store=tmp_path / "s", rank=2, world_size=2)
    with pytest.raises(DataError, match="correct_if"):
        workbench.init(store=tmp_path / "s", correct_if="reward=>1")


def test_a_locked_store_neither_blocks_nor_loses_steps(tmp_path):
    """Another process holds the store's write lock: logging goes on (the queue holds the steps); once the
    lock is released every step is committed."""
    path = tmp_path / "store"
    run = workbench.init(store=path, name="locked", heartbeat_s=0)
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        t = time.perf_counter()
        for step in range(20):
            _log(run, step, n=16)
        run.flush(timeout_s=0.5)  # cannot finish while the lock is held
        held_s = time.perf_counter() - t
        assert not run.flush(timeout_s=0.1)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert held_s < 10, f"logging blocked {held_s:.1f} s behind a locked store"
    run.finish()
    rollouts, _, steps = _stored(path, run.run_id)
    assert steps["step"].to_list() == list(range(20)) and rollouts.height == 20 * 16


def test_a_store_that_fails_every_commit_is_reported_not_raised(tmp_path):
    """The store goes away under the run (closed): finish gives up after its timeout and says which steps
    were not stored; nothing raises into the trainer."""
    run = workbench.init(store=tmp_path / "store", name="gone", heartbeat_s=0)
    _log(run, 0)
    assert run.flush(timeout_s=60)
    run.store.close()
    _log(run, 1)
    _log(run, 2)
    run.finish(timeout_s=1.0)
    assert any("not stored: [1]" in p or "not stored: [1, 2]" in p for p in run.problems), run.problems
    assert any("failed, kept and retried" in p for p in run.problems)


def test_restart_continues_the_run_without_duplicates(tmp_path):
    path = tmp_path / "store"
    first = workbench.init(store=path, name="again", heartbeat_s=0)
    for step in range(3):
        _log(first, step)
    first.finish()
    again = workbench.init(store=path, name="again", heartbeat_s=0)
    assert again.run_id == first.run_id and again.last_step == 2
    for step in range(1, 5):  # restarted from a checkpoint at step 1
        _log(again, step)
    again.finish()
    assert again.skipped_steps == {1, 2} and not again.problems
    rollouts, _, steps = _stored(path, first.run_id)
    assert steps["step"].to_list() == [0, 1, 2, 3, 4] and rollouts.height == 5 * 4
    fresh = workbench.init(store=path, name="again", resume=False, heartbeat_s=0)
    assert fresh.run_id != first.run_id and fresh.last_step is None
    fresh.finish()


def test_token_columns_match_what_was_logged(tmp_path):
    rng = np.random.default_rng(0)
    ent = [rng.random(n).astype(np.float32) for n in (3, 1, 5, 2)]
    run = workbench.init(store=tmp_path / "store", name="tokens", heartbeat_s=0)
    _log(run, 0, token_ids=[list(range(len(e))) for e in ent], token_entropy=ent,
         token_logprobs=[-e for e in ent], correct=[True, False, False, True], reward_terms={"len": [0.1, 0.2, 0.3, 0.4]})
    run.finish()
    rows = _stored(tmp_path / "store", run.run_id)[0].sort("response").to_dicts()
    for row, e in zip(rows, ent):
        assert row["length"] == len(e)
        assert row["entropy_mean"] == pytest.approx(float(e.astype(np.float64).mean()), rel=1e-6)
        assert row["entropy_max"] == float(e.max())
        assert row["logprob_sum"] == pytest.approx(-float(e.astype(np.float64).sum()), rel=1e-6)
    assert [r["correct"] for r in rows] == [True, False, False, True]  # the verdicts given, not the rule


def test_the_default_guards_watch_an_sdk_run(tmp_path):
    """Every group's rewards agree for 6 steps: the zero-signal guard (5-step window) raises an alert."""
    path = tmp_path / "store"
    run = workbench.init(store=path, name="flat", heartbeat_s=0)
    for step in range(6):
        _log(run, step, rewards=[1.0] * 4)
    run.finish()
    with open_store(path, read_only=True) as s:
        alerts = s.alerts(run.run_id)
    assert "zero_signal" in alerts["guard"].to_list(), alerts


def test_a_script_that_never_calls_finish_still_commits(tmp_path):
    import subprocess
    import sys

    code = ("import sys, workbench\n"
            "run = workbench.init(store=sys.argv[1], name='noend', heartbeat_s=0)\n"
            "run.log_step(0, {'train/loss': 1.0})\n"
            "for s in range(1, 4):\n"
            "    run.log_rollouts(s, ['p'], ['r'], [1.0])\n"
            "print(run.run_id)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.strip()
    with open_store(tmp_path / "store", read_only=True) as s:
        assert s.run(run_id)["status"] == "finished"
        assert s.run_steps(run_id)["step"].to_list() == [0, 1, 2, 3] and s.count_rollouts(run_id) == 3


def test_step_metrics_take_tensors_and_leave_out_text(tmp_path):
    import torch

    path = tmp_path / "store"
    run = workbench.init(store=path, name="metrics", heartbeat_s=0)
    with pytest.warns(SdkWarning, match=r"metric\(s\) \['note'\] are not numbers"):
        run.log_step(0, {"train/loss": torch.tensor(0.5), "train/grad_norm": np.float32(2.0), "note": "x",
                         "alloc/allocator": "mine"})
    run.finish()
    with open_store(path, read_only=True) as s:
        row = s.run_steps(run.run_id).to_dicts()[0]
    assert (row["loss"], row["grad_norm"], row["allocator"]) == (0.5, 2.0, "mine")
