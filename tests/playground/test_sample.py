"""Sampling a run's checkpoints (workbench/playground/sample.py) and `workbench sample`, on one tiny run
of the small organism trained for these tests (4 steps, a full checkpoint every 2, a weights-only
snapshot every step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.errors import ConfigError, DataError
from workbench.playground.sample import Limits, SampleRequest, available_steps, sample, sample_run
from workbench.store import open_store

ROOT = Path(__file__).resolve().parents[2]


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKBENCH_STORE": str(root)}
    return subprocess.run([sys.executable, "-m", "workbench.cli", "sample", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


def test_checkpoints_and_snapshots_are_listed_and_snapshots_hold_the_checkpoints_weights(trained):
    root, rid = trained
    assert available_steps(root, rid) == [0, 1, 2, 3, 4]
    folder = root / "runs" / rid / "checkpoints"
    full = torch.load(folder / "step-000002.pt", map_location="cpu", weights_only=False)
    light = torch.load(folder / "weights-000002.pt", map_location="cpu", weights_only=True)
    assert set(light) == {"step", "model"}  # no optimiser state
    assert light["model"].keys() == full["model"].keys()
    assert all(torch.equal(light["model"][k], full["model"][k]) for k in full["model"])
    assert (folder / "weights-000002.pt").stat().st_size < (folder / "step-000002.pt").stat().st_size / 2


def test_the_command_line_and_the_library_draw_the_same_tokens(trained, policy_at):
    root, rid = trained
    policy = policy_at(2)
    pid = policy.task.train_prompts()[0].id
    lib = sample(policy, SampleRequest(rid, 2, prompt_id=pid, n=8, seed=5))
    done = _cli(root, rid, "--checkpoint", "2", "--prompt-id", pid, "-n", "8", "--seed", "5", "--json")
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)
    assert [s["tokens"] for s in cli["samples"]] == [s["tokens"] for s in lib["samples"]]
    assert cli["checkpoint"] == 2 and cli["source"] == "step-000002.pt"
    # every verdict is the task's verifier's, every reward the run's terms summed
    prompt = next(p for p in policy.task.train_prompts() if p.id == pid)
    for s in lib["samples"]:
        assert s["verdict"] == policy.task.verify(s["text"], prompt).verdict
        assert s["reward"] == pytest.approx(sum(s["terms"].values()))
        assert len(s["entropy"]) == len(s["tokens"]) == s["length"]
    assert lib["correct"] == sum(s["correct"] for s in lib["samples"])
    k1 = lib["pass_at_k"]["1"]
    assert k1["value"] == pytest.approx(lib["correct"] / 8) and k1["low"] <= k1["value"] <= k1["high"]
    assert set(lib["pass_at_k"]) == {"1", "2", "4", "8"}


def test_a_step_with_only_a_snapshot_is_sampled_from_it(trained, policy_at):
    root, rid = trained
    folder = root / "runs" / rid / "checkpoints"
    assert not (folder / "step-000001.pt").exists()
    policy = policy_at(1)
    out = sample(policy, SampleRequest(rid, 1, prompt_id=policy.task.train_prompts()[1].id, n=4, seed=1))
    assert out["source"] == "weights-000001.pt" and len(out["samples"]) == 4
    light = torch.load(folder / "weights-000001.pt", map_location="cpu", weights_only=True)["model"]
    assert all(torch.equal(v, light[k]) for k, v in policy.model.state_dict().items())


def _rates(frame, prompts):
    return {p: frame.filter(frame["prompt_id"] == p)["reward"].to_numpy() for p in prompts}


def _stratified_p(a: dict, b: dict, rounds: int = 2000) -> float:
    """Permutation p-value of the difference in mean reward between two samples, labels shuffled
    within each prompt (a prompt's difficulty is not a difference between the samples)."""
    rng = np.random.default_rng(0)
    pooled = {p: np.concatenate([a[p], b[p]]) for p in a}

    def stat(split):
        da = np.concatenate([x[: len(a[p])] for p, x in split.items()])
        db = np.concatenate([x[len(a[p]):] for p, x in split.items()])
        return abs(da.mean() - db.mean())

    seen = stat(pooled)
    more = sum(stat({p: rng.permutation(x) for p, x in pooled.items()}) >= seen - 1e-12 for _ in range(rounds))
    return (more + 1) / (rounds + 1)


def test_a_checkpoints_samples_are_distributed_as_the_runs_rollouts_from_its_weights(trained, policy_at):
    """Checkpoint 2 holds the weights that sampled step 3's rollouts: 64 samples per prompt of step 3
    against the run's own 4 per prompt, mean reward compared within prompts (a two-sample permutation
    test, false alarm 1 in 1,000). The same test tells samples at another temperature apart."""
    root, rid = trained
    with open_store(str(root), read_only=True) as st:
        logged = st.rollouts(rid, limit=1000, step_min=3, step_max=3, columns=["prompt_id", "reward"])
    assert logged.height == 32  # the synchronous loop: step 3 sampled from the weights step 2 left
    prompts = sorted(set(logged["prompt_id"].to_list()))
    policy = policy_at(2)

    def draw(temperature=None):
        import polars as pl

        rows = []
        for i, p in enumerate(prompts):
            got = sample(policy, SampleRequest(rid, 2, prompt_id=p, n=64, seed=100 + i, temperature=temperature))
            rows += [(p, s["reward"]) for s in got["samples"]]
        return pl.DataFrame(rows, schema=["prompt_id", "reward"], orient="row")

    ours, run_rows = _rates(draw(), prompts), _rates(logged, prompts)
    assert _stratified_p(ours, run_rows) > 1e-3
    hot = _rates(draw(temperature=8.0), prompts)  # the test can fail: a flatter distribution is told apart
    assert _stratified_p(hot, run_rows) <= 1e-3


def test_an_absent_checkpoint_is_one_line_naming_the_steps_there_are(trained, policy_at):
    root, rid = trained
    with pytest.raises(DataError, match=r"checkpoint: run .* has no checkpoint of step 99 \(it has: 0 .*1, 2, 3, 4\)"):
        policy_at(99)
    done = _cli(root, rid, "--checkpoint", "99", "--prompt", "1+1=")
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0
    assert "no checkpoint of step 99" in done.stderr


def test_a_corrupt_checkpoint_is_one_line_and_the_runs_files_are_untouched(trained, policy_at):
    root, rid = trained
    folder = root / "runs" / rid / "checkpoints"
    bad, empty = folder / "weights-000077.pt", folder / "weights-000078.pt"
    bad.write_bytes((folder / "weights-000001.pt").read_bytes()[:300])  # a truncated file
    torch.save({"step": 78, "notes": "no weights"}, empty)
    before = sorted(p.name for p in folder.iterdir())
    try:
        with pytest.raises(DataError, match="checkpoint: weights-000077.pt is corrupt or not a checkpoint"):
            policy_at(77)
        with pytest.raises(DataError, match="checkpoint: weights-000078.pt holds no model weights"):
            policy_at(78)
        done = _cli(root, rid, "--checkpoint", "77", "--prompt", "1+1=")
        assert done.returncode == 1 and "corrupt" in done.stderr and done.stderr.strip().count("\n") == 0
        assert sorted(p.name for p in folder.iterdir()) == before
    finally:
        bad.unlink()
        empty.unlink()


@pytest.mark.parametrize("args, field", [
    (["-n", "10000", "--prompt", "1+1="], "n: 10000 samples"),
    (["--max-new-tokens", "100000", "--prompt", "1+1="], "max_new_tokens"),
    (["--prompt", "1+1=", "--prompt-id", "x"], "prompt: give exactly one"),
    (["--temperature", "0", "--prompt", "1+1="], "temperature"),
])
def test_requests_past_the_limits_are_refused_before_anything_loads(tmp_path, args, field):
    done = _cli(tmp_path / "nowhere", "some-run", *args)
    assert done.returncode == 1 and field in done.stderr and done.stderr.strip().count("\n") == 0


def test_a_one_megabyte_prompt_is_refused(tmp_path):
    big = tmp_path / "prompt.txt"
    big.write_text("1+" * 500_000 + "1=")
    done = _cli(tmp_path / "nowhere", "some-run", "--prompt-file", str(big))
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0
    assert "prompt: 1,000,002 characters, over the limit of 8,000" in done.stderr
    with pytest.raises(ConfigError, match="prompt: 1,000,002 characters"):
        SampleRequest("r", prompt=big.read_text()).check(Limits())


def test_the_seconds_limit_stops_the_decoding(trained, policy_at):
    root, rid = trained
    policy = policy_at(0)
    with pytest.raises(Exception, match="sampling stopped: over the limit of 0 s per request"):
        sample(policy, SampleRequest(rid, 0, prompt="1+1=", n=4), Limits(max_seconds=0.0))
    with pytest.raises(Exception, match="sampling stopped: cancelled"):
        sample(policy, SampleRequest(rid, 0, prompt="1+1=", n=4), cancelled=lambda: True)


def test_sample_run_reads_the_run_from_the_store(trained):
    root, rid = trained
    with open_store(str(root), read_only=True) as st:
        out = sample_run(st, SampleRequest(rid, 4, prompt="1+1=", answer="2", n=2, max_new_tokens=3))
    assert out["checkpoint"] == 4 and out["answer"] == "2" and all(s["length"] <= 3 for s in out["samples"])


def test_a_rollback_sets_aside_the_abandoned_steps_snapshots_with_their_checkpoints(tmp_path):
    from workbench.engine.checkpoint import checkpoint_steps, save_checkpoint, save_weights, set_aside, weights_steps

    for step in (1, 2, 3, 4):
        save_weights(tmp_path, step, {"w": torch.zeros(1)})
    save_checkpoint(tmp_path, 2, {"model": {}}, keep=5)
    save_checkpoint(tmp_path, 4, {"model": {}}, keep=5)
    moved = set_aside(tmp_path, 2, "attempt-1")
    assert weights_steps(tmp_path) == [1, 2] and checkpoint_steps(tmp_path) == [2]
    assert sorted(p.name for p in moved) == ["step-000004.pt", "weights-000003.pt", "weights-000004.pt"]
    assert weights_steps(tmp_path / "attempt-1") == [3, 4]


def test_weights_every_is_checked_by_name(tiny_config):
    with pytest.raises(ConfigError, match="checkpoint.weights_every"):
        tiny_config(checkpoint__weights_every=-1)
