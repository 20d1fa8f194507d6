"""docs/examples/sdk_torch_loop.py runs as a script and its run reads back like any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workbench.store import open_store

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "sdk_torch_loop.py"


def test_the_pytorch_loop_example_logs_a_run(tmp_path):
    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--store", str(store), "--steps", "6", "--prompts", "4"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.strip().splitlines()[-1]
    with open_store(store, read_only=True) as s:
        steps = s.run_steps(run_id)
        rollouts = s.rollouts(run_id, limit=1000)
        assert s.run(run_id)["status"] == "finished"
    assert steps["step"].to_list() == list(range(6)) and steps["loss"].null_count() == 0
    assert rollouts.height == 6 * 4 * 8
    assert (rollouts["length"] == 1).all() and rollouts["token_entropy"].list.len().eq(1).all()
    assert set(rollouts["verdict"].unique()) <= {"correct", "wrong"}
    # run again: the run continues, nothing is written twice
    again = subprocess.run([sys.executable, str(EXAMPLE), "--store", str(store), "--steps", "8", "--prompts", "4"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-1] == run_id, again.stderr
    with open_store(store, read_only=True) as s:
        assert s.run_steps(run_id)["step"].to_list() == list(range(8))
