"""The SDK across processes: two ranks logging one run read back exactly, and a trainer killed with
SIGKILL three times at random moments, then restarted, stores every step once and loses nothing
committed. Real subprocesses (tests/sdk/sdk_trainer.py), a real store."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sdk_trainer import PER_RANK, step_data
from waiting import wait_until
from workbench.sdk.rows import RANK_IDX_STRIDE
from workbench.errors import StoreError
from workbench.store import open_store
from workbench.store.export import REIMPORT_MAP

TRAINER = Path(__file__).with_name("sdk_trainer.py")


def _start(store: Path, run_id: str, steps: int, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    args = [sys.executable, str(TRAINER), str(store), run_id, str(steps)]
    for key, value in kw.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})})


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return out


def _rows(store_path: Path, run_id: str):
    with open_store(store_path, read_only=True) as store:
        return store.rollouts(run_id, limit=10**6), store.run_steps(run_id), store.run(run_id)


def _expected_row(step: int, rank: int, k: int) -> dict:
    d = step_data(step, rank)
    return {"response": d["responses"][k], "reward": d["rewards"][k], "token_ids": d["token_ids"][k],
            "token_entropy": d["token_entropy"][k], "token_logprobs": d["token_logprobs"][k],
            "advantage": d["advantages"][k], "format": d["reward_terms"]["format"][k]}


def check_rows_exact(frame, steps: range, ranks: range) -> None:
    """Every (step, rank) share is stored once, each row equal to what was logged (floats bit-exact in float32)."""
    assert frame.height == len(steps) * len(ranks) * PER_RANK
    by_response = {row["response"]: row for row in frame.iter_rows(named=True)}
    assert len(by_response) == frame.height  # no row twice
    for step in steps:
        for rank in ranks:
            for k in range(PER_RANK):
                want = _expected_row(step, rank, k)
                got = by_response[want["response"]]
                assert got["step"] == step and got["worker"] == f"rank-{rank}"
                assert rank * RANK_IDX_STRIDE <= got["idx"] < (rank + 1) * RANK_IDX_STRIDE
                assert got["reward"] == np.float32(want["reward"])
                assert got["token_ids"] == want["token_ids"]
                assert got["length"] == len(want["token_ids"])
                np.testing.assert_array_equal(np.asarray(got["token_entropy"], np.float32), want["token_entropy"])
                np.testing.assert_array_equal(np.asarray(got["token_logprobs"], np.float32), want["token_logprobs"])
                assert got["advantage"] == np.float32(want["advantage"])
                assert got["reward_terms"] == {"format": want["format"]}
                assert got["correct"] == (want["reward"] >= 0.5)


def test_two_ranks_round_trip(tmp_path):
    store, run_id, steps = tmp_path / "store", "dp-job-1", 4
    procs = [_start(store, run_id, steps, rank=r, world=2) for r in (1, 0)]  # rank 1 first: it waits for rank 0
    for proc in procs:
        _finish(proc)
    rollouts, step_rows, run = _rows(store, run_id)
    check_rows_exact(rollouts, range(steps), range(2))
    assert step_rows["step"].to_list() == list(range(steps))  # rank 0's rows only, each once
    assert step_rows["loss"].to_list() == pytest.approx([1.0 / (s + 1) for s in range(steps)])
    assert run["status"] == "finished" and run["source"] == "sdk"
    # an export of them, imported back with `workbench import jsonl`, gives the same rows
    out = store.parent / "sft"
    card = json.loads(_cli("export", run_id, str(out), "--store", str(store), "--json"))
    assert card["counts"]["rows"] == rollouts.height
    _cli("import", "jsonl", str(out / "data.jsonl"), "--map", REIMPORT_MAP, "--name", "back", "--store", str(store))
    with open_store(store, read_only=True) as s:
        back_id = s.runs_from("jsonl", "back")["run_id"][0]
        back = s.rollouts(back_id, limit=10**6)
    same = ["step", "prompt_id", "response", "reward", "correct", "advantage", "length", "token_ids", "token_logprobs"]
    assert back.select(same).sort("response").equals(rollouts.select(same).sort("response"))


def _committed(store: Path, run_id: str, *, before_first: bool = False) -> dict[int, int]:
    """step -> rollouts, read by another process; {} before the run exists when `before_first`."""
    try:
        with open_store(store, read_only=True) as s:
            steps = s.run_steps(run_id)["step"].to_list()
            counts = s.sql("SELECT step, count(*) AS n FROM rollouts WHERE run_id = ? GROUP BY step", [run_id])
    except StoreError:
        if before_first:
            return {}
        raise
    n = dict(zip(counts["step"].to_list(), counts["n"].to_list()))
    return {step: n.get(step, 0) for step in steps}


def test_sigkill_three_times_then_restart(tmp_path):
    store, run_id, steps, ckpt = tmp_path / "store", "killed-job", 80, tmp_path / "ckpt"
    rng = random.Random(os.getpid())
    seen: dict[int, int] = {}
    starts: list[str] = []
    for kill in range(3):
        proc = _start(store, run_id, steps, ckpt=ckpt, sleep=0.1)
        floor = max(seen, default=-1)
        wait_until(lambda: max(_committed(store, run_id, before_first=not seen) or {-1: 0}) >= floor + 2 or proc.poll() is not None,
                   240, f"the trainer to commit new steps before kill {kill + 1}", every=0.3)
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment: mid-step, mid-commit or between
        assert proc.poll() is None, "the trainer ended before its kill: give it more steps"
        proc.send_signal(signal.SIGKILL)
        starts.append(proc.communicate(timeout=60)[0].splitlines()[0])
        now = _committed(store, run_id)  # the store stays readable after the kill
        assert all(n == PER_RANK for n in now.values()), now  # whole steps only
        assert set(seen) <= set(now), "a committed step was lost"
        seen = now
    assert max(seen) < steps - 1, "the trainer finished before the last kill: give it more steps"
    # and once inside a commit: SIGKILL between the rows' INSERT and COMMIT of the third commit (faults.py)
    # (with the SDK's default commit window of 1 s: the commit killed holds several steps)
    proc = _start(store, run_id, steps, ckpt=ckpt, sleep=0.1, env={"WORKBENCH_FAULT": "commit:3"}, commit_window=1.0)
    starts.append(proc.communicate(timeout=300)[0].splitlines()[0])
    assert proc.returncode == -signal.SIGKILL
    now = _committed(store, run_id)
    assert all(n == PER_RANK for n in now.values()) and set(seen) <= set(now), now
    # and once right after a commit that no checkpoint covers (the kills above may all land where the
    # checkpoint caught up with the store): the restart after it has a committed step to skip, whatever the timing
    proc = _start(store, run_id, steps, ckpt=ckpt, sleep=0.0, die_after=1)
    starts.append(proc.communicate(timeout=300)[0].splitlines()[0])
    assert proc.returncode == -signal.SIGKILL
    starts.append(_finish(_start(store, run_id, steps, ckpt=ckpt, sleep=0.0)).splitlines()[0])
    # a restart began at its checkpoint, at or before the last committed step: those steps were skipped
    resumed = [re.match(r"rank 0 starts at step (\d+) \(store has (\w+)\)", line).groups() for line in starts]
    assert any(int(start) <= int(last) for start, last in resumed if last != "None"), starts
    assert int(resumed[-1][0]) <= int(resumed[-1][1]), starts  # the one after --die-after, always
    rollouts, step_rows, run = _rows(store, run_id)
    assert step_rows["step"].to_list() == list(range(steps))  # every step once
    check_rows_exact(rollouts, range(steps), range(1))
    assert run["status"] == "finished"
