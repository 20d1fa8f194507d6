"""--follow in a real subprocess; replay of an imported run; imported runs refuse control commands;
the step metrics against a plain loop; the import bench on a small dump."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from waiting import wait_until
from workbench.cli import app
from workbench.errors import ControlError
from workbench.integrations import import_path

VERL = Path(__file__).resolve().parents[1] / "fixtures" / "verl"
runner = CliRunner()


def _steps(store_dir: Path) -> list[int] | None:
    """The imported run's steps, or None while the store cannot be read yet (being created)."""
    from workbench.errors import StoreError
    from workbench.store import open_store

    try:
        with open_store(store_dir, read_only=True) as s:
            runs = s.list_runs()
            return [] if runs.height == 0 else sorted(s.run_steps(runs["run_id"][0])["step"].to_list())
    except StoreError:
        return None


def _wait_for(store_dir: Path, proc: subprocess.Popen, want: list[int], timeout_s: float = 120) -> None:
    def imported() -> bool:
        assert proc.poll() is None, proc.communicate()
        return store_dir.exists() and _steps(store_dir) == want

    wait_until(imported, timeout_s, f"the follower to import steps {want}", every=0.3)


def test_follow_imports_a_step_file_written_after_start(tmp_path):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    shutil.copy(VERL / "rollouts" / "1.jsonl", dump / "1.jsonl")
    store_dir = tmp_path / "store"
    cmd = [sys.executable, "-m", "workbench.cli", "import", "verl", str(dump), "--store", str(store_dir),
           "--follow", "--poll-s", "0.2", "--idle-exit-s", "90"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(store_dir, proc, [1])
        # a step file written in two parts: the first part (no final newline) must not be imported
        text = (VERL / "rollouts" / "2.jsonl").read_text()
        with open(dump / "2.jsonl", "w") as f:
            f.write(text[: len(text) // 2])
            f.flush()
            time.sleep(1.0)  # a window of several polls that see a stable unfinished file (the thing under test)
            assert wait_until(lambda: _steps(store_dir), 10, "a read of the store") == [1]
            f.write(text[len(text) // 2:])
        _wait_for(store_dir, proc, [1, 2])
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "imported 1 step(s) (steps 2..2), 16 rollouts" in out


def test_replay_cli_on_imported_run(tmp_path):
    store_dir = tmp_path / "store"
    res = runner.invoke(app, ["import", "verl", str(VERL / "rollouts"), "--store", str(store_dir), "--json"])
    assert res.exit_code == 0, res.output
    rid = json.loads(res.output)["run_id"]
    res = runner.invoke(app, ["replay", rid, "--allocator", "uniform", "-p", "n=4", "--store", str(store_dir),
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    logged, uniform = out["logged"], out["replays"][0]
    # uniform with the logged group size over the logged budget reproduces the run's spend and signal
    assert (uniform["rollouts"], uniform["groups"], uniform["informative_groups"]) == (
        logged["rollouts"], logged["groups"], logged["informative_groups"]) == (48, 12, logged["informative_groups"])
    assert out["note"] and logged["tokens"] is None
    res = runner.invoke(app, ["replay", rid, "--allocator", "selective", "--store", str(store_dir), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["replays"][0]["allocator"] == "selective"


def test_imported_run_refuses_control(store):
    from workbench import control

    rid = import_path(store, "verl", VERL / "rollouts")["run_id"]
    with pytest.raises(ControlError, match="imported from verl's files and is read-only"):
        control.pause(store, rid)
    with pytest.raises(ControlError, match="read-only"):
        control.set_budget(store, rid, 64)
    assert store.controls(rid).height == 0


def test_step_metrics_match_a_plain_loop():
    from workbench.correctness import is_correct, with_correct
    from workbench.integrations.records import group_table, step_metrics, with_groups

    frame = pl.DataFrame({"step": [1] * 10, "prompt": list("aaaabbbccd"), "response": ["x"] * 10,
                          "reward": [1.0, 0, 1, 1, 0, 0, 0, 1, 1, 0.5], "length": [3, 4, 5, 6, 7, 8, 9, 1, 2, 3]})
    g = with_correct(with_groups(frame))
    m = step_metrics(g, group_table(g), "verl")
    groups: dict[str, list[float]] = {}
    for p, r in zip(frame["prompt"], frame["reward"]):
        groups.setdefault(p, []).append(r)
    rewards = frame["reward"].to_list()
    mean = sum(rewards) / len(rewards)
    assert m["rollout/reward_mean"] == pytest.approx(mean)
    assert m["rollout/reward_std"] == pytest.approx((sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5)
    assert m["rollout/zero_signal_frac"] == pytest.approx(
        sum(len(set(v)) == 1 for v in groups.values()) / len(groups))
    assert m["rollout/frac_all_wrong"] == pytest.approx(
        sum(not any(is_correct(r) for r in v) for v in groups.values()) / len(groups))
    assert m["rollout/frac_all_correct"] == pytest.approx(
        sum(all(is_correct(r) for r in v) for v in groups.values()) / len(groups))
    assert m["rollout/tokens_generated"] == 48 and m["rollout/prompts"] == 4
    assert g["idx"].to_list() == [0, 1, 2, 3, 0, 1, 2, 0, 1, 0]


def test_whatif_table_on_imported_nemo_run(store):
    from workbench.integrations.whatif import whatif

    nemo = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_rl"
    rid = import_path(store, "nemo-rl", nemo)["run_id"]
    table = whatif(store, rid, {"uniform": None, "selective": None})
    assert table["label"].to_list() == ["logged", "uniform", "selective"]
    logged, uniform = table.row(0, named=True), table.row(1, named=True)
    assert uniform["rollouts"] == logged["rollouts"] == 24 and uniform["rollouts_saved_frac"] == 0.0
    assert logged["tokens"] == store.run_steps(rid)["tokens_generated"].sum()  # NeMo-RL logs token counts
