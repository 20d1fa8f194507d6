"""prime-rl runs as verifiers' and prime-rl's own code writes them (tests/fixtures/prime_rl/README.md):
every trace of the trained batch is an episode with all its turns (message graph parents, loss mask,
log-probs), tool calls and failures; metrics.jsonl's numeric values are step metrics; the files'
counts and contents are compared with the store's; bad input names the file, line and field;
--follow imports a step once its metrics row is written."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from waiting import wait_until
from workbench.errors import DataError
from workbench.integrations import import_path

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "prime_rl" / "run"


@pytest.fixture
def store(tmp_path):
    from workbench.store import open_store

    with open_store(tmp_path / "store") as s:
        yield s


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def traces(step: int, kind: str = "train", subset: str = "effective") -> list[dict]:
    return [t for e in lines(RUN / "rollouts" / f"step_{step}" / kind / subset / "traces.jsonl") for t in e["traces"]]


def text(content) -> str:
    return content if isinstance(content, str) else ""


def expected_episode(t: dict) -> tuple:
    """A trace as (turns, calls) read straight from the file: (role, text, token_ids, mask, parent) per
    node and (turn, name, arguments, result, failed) per tool call."""
    nodes = t["nodes"]
    results = {n["message"]["tool_call_id"]: text(n["message"]["content"]) for n in nodes
               if n["message"]["role"] == "tool"}
    turns = tuple((n["message"]["role"], text(n["message"].get("content")), tuple(n["token_ids"]), tuple(n["mask"]),
                   n.get("parent")) for n in nodes)
    calls = tuple((i, c["name"], c["arguments"], results[c["id"]], results[c["id"]].startswith("error"))
                  for i, n in enumerate(nodes) for c in n["message"].get("tool_calls") or [])
    return turns, calls


def stored_episodes(store, rid: str, step: int) -> list[tuple]:
    turns = store.episode_turns(rid, step_min=step, step_max=step)
    calls = store.episode_tool_calls(rid, step_min=step, step_max=step)
    out = []
    for (pid, idx), part in turns.group_by(["prompt_id", "idx"]):
        part = part.sort("turn")
        got_turns = tuple((r["role"], r["text"], tuple(r["token_ids"]), tuple(r["loss_mask"]), r["parent_turn"])
                          for r in part.iter_rows(named=True))
        mine = calls.filter((calls["prompt_id"] == pid) & (calls["idx"] == idx)).sort("turn", "call")
        got_calls = tuple((r["turn"], r["name"], r["arguments"], r["result"], r["error"] is not None)
                          for r in mine.iter_rows(named=True))
        out.append((got_turns, got_calls))
    return out


def test_every_trace_turn_tool_call_and_metric_is_imported(store):
    rep = import_path(store, "prime-rl", RUN)
    rid = rep["run_id"]
    assert rep["steps_imported"] == 3 and rep["eval_steps_imported"] == 2
    total_turns = total_calls = total_errors = branched = 0
    for step in (0, 1, 2):
        want = traces(step)
        rolls = store.rollouts(rid, step_min=step, step_max=step, limit=1000)
        # the trained batch only: the errored episodes of the `all` cohort are not rollouts
        assert rolls.height == len(want) < len(traces(step, subset="all"))
        assert Counter(stored_episodes(store, rid, step)) == Counter(expected_episode(t) for t in want)
        for t in want:
            total_turns += len(t["nodes"])
            calls = [c for n in t["nodes"] for c in n["message"].get("tool_calls") or []]
            total_calls += len(calls)
            total_errors += sum(n["message"]["content"].startswith("error") for n in t["nodes"]
                                if n["message"]["role"] == "tool")
            branched += sum(n.get("parent") is not None and n["parent"] != i - 1 for i, n in enumerate(t["nodes"]))
        # rewards, reward terms, advantages, counts per rollout, against the file (multisets: idx is ours)
        want_rows = Counter((round(sum(r["score"] * r["weight"] for r in t["rewards"].values()), 4),
                             round(t["rewards"]["correct"]["score"], 4), len(t["nodes"]),
                             sum(len(n["message"].get("tool_calls") or []) for n in t["nodes"]),
                             sum(sum(n["mask"]) for n in t["nodes"]),
                             round(next(v for n in t["nodes"] for v in n.get("advantages") or []), 4))
                            for t in want)
        got_rows = Counter((round(r["reward"], 4), round(r["reward_terms"]["correct"], 4), r["turns"], r["tool_calls"],
                            r["length"], round(r["advantage"], 4)) for r in rolls.iter_rows(named=True))
        assert got_rows == want_rows
    assert (total_turns, total_calls) == (store.episode_turns(rid).height, store.episode_tool_calls(rid).height)
    assert total_errors > 0 and branched > 0  # the fixture has failed calls and branches, and they arrived
    assert store.episode_tool_calls(rid)["error"].drop_nulls().len() == total_errors


def test_logprobs_spread_on_sampled_tokens_and_prompt_turns(store):
    rid = import_path(store, "prime-rl", RUN)["run_id"]
    row = store.rollouts(rid, step_min=1, step_max=1, limit=1).row(0, named=True)
    ep = store.episode(rid, 1, 0, row["prompt_id"], row["idx"])
    t = next(t for t in traces(1) if expected_episode(t) == (
        tuple((x.role, x.text, tuple(x.token_ids), tuple(x.mask), p) for x, p in zip(ep.turns, ep.parents())),
        expected_episode(t)[1]))
    compact = [lp for n in t["nodes"] for lp in n["logprobs"]]
    spread = [lp for turn in ep.turns if turn.logprobs for lp, m in zip(turn.logprobs, turn.mask) if m]
    assert spread == pytest.approx(compact, abs=1e-6)
    assert ep.prompt_turns == next(i for i, n in enumerate(t["nodes"]) if n["sampled"])
    assert row["token_logprobs"] == pytest.approx(compact, abs=1e-6)


def test_metrics_rows_become_step_metrics(store):
    rid = import_path(store, "prime-rl", RUN)["run_id"]
    steps = {r["step"]: r["metrics"] for r in store.run_steps(rid).iter_rows(named=True)}
    for row in lines(RUN / "metrics.jsonl"):
        for key, value in row.items():
            if key in ("step", "time"):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                assert steps[row["step"]][key] == pytest.approx(value)
            else:
                assert key not in steps[row["step"]]  # nested values are lost (docs/import.md)


def test_evals_count_each_prompts_episodes(store):
    rid = import_path(store, "prime-rl", RUN)["run_id"]
    evals = store.evals(rid)
    for step in (0, 2):
        assert sorted(evals.filter(evals["step"] == step)["samples"].to_list()) == sorted(
            Counter(json.dumps(t["nodes"][1]["message"]["content"]) for t in traces(step, "eval")).values())


def test_import_again_adds_nothing(store):
    first = import_path(store, "prime-rl", RUN)
    again = import_path(store, "prime-rl", RUN)
    assert again["run_id"] == first["run_id"] and again["steps_imported"] == 0


def _copy(tmp_path: Path, steps: list[int]) -> Path:
    run = tmp_path / "run"
    for s in steps:
        shutil.copytree(RUN / "rollouts" / f"step_{s}", run / "rollouts" / f"step_{s}")
    rows = [r for r in (RUN / "metrics.jsonl").read_text().splitlines() if json.loads(r)["step"] in steps]
    (run / "metrics.jsonl").write_text("".join(r + "\n" for r in rows))
    return run


def test_truncated_and_foreign_files_name_the_line(store, tmp_path):
    run = _copy(tmp_path, [0])
    path = run / "rollouts" / "step_0" / "train" / "effective" / "traces.jsonl"
    body = path.read_text()
    path.write_text(body[: len(body) - 200])
    n = body[: len(body) - 200].count("\n") + 1
    with pytest.raises(DataError, match=rf"traces.jsonl:{n}: malformed JSON"):
        import_path(store, "prime-rl", run)
    path.write_text(json.dumps({"input": "What is 2+3?", "output": "5", "score": 1.0}) + "\n")
    with pytest.raises(DataError, match=r"traces.jsonl:1: 'traces': missing key"):
        import_path(store, "prime-rl", run)
    bad = lines(RUN / "rollouts" / "step_0" / "train" / "effective" / "traces.jsonl")[0]
    bad["traces"][0]["nodes"][2]["mask"] = bad["traces"][0]["nodes"][2]["mask"][:-1]
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"traces.jsonl:1: 'traces': traces\[0\].nodes\[2\].mask: \d+ flags for"):
        import_path(store, "prime-rl", run)
    assert store.list_runs().height == 0  # nothing half-written


def test_follow_imports_a_step_once_its_metrics_are_logged(tmp_path):
    from test_follow_replay import _steps

    run = _copy(tmp_path, [0])
    store_dir = tmp_path / "store"
    cmd = [sys.executable, "-m", "workbench.cli", "import", "prime-rl", str(run), "--store", str(store_dir),
           "--follow", "--poll-s", "0.2", "--idle-exit-s", "90"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def at(want: list[int]):
        def done() -> bool:
            assert proc.poll() is None, proc.communicate()
            return store_dir.exists() and _steps(store_dir) == want
        return done

    try:
        wait_until(at([0]), 120, "step 0 imported")
        shutil.copytree(RUN / "rollouts" / "step_1", run / "rollouts" / "step_1")  # traces, no metrics yet
        wait_until(lambda: _steps(store_dir) == [0] and proc.poll() is None, 10, "a read of the store")
        with open(run / "metrics.jsonl", "a") as f:
            f.writelines(r + "\n" for r in (RUN / "metrics.jsonl").read_text().splitlines()
                         if json.loads(r)["step"] == 1)
        wait_until(at([0, 1]), 120, "step 1 imported once its metrics are logged")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"{len(traces(1))} rollouts" in out
