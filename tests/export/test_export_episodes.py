"""Episodes through the SDK and out of `workbench export`: `log_rollouts(..., episodes=[...])` stores the
turns and tool calls (read back exactly), the SFT set gives them as chat messages in OpenAI's tool-call
form, and the tool filters (--tool-calls-min/max, --tool-errors-min/max, --tool-error KIND) select by
them; the command in a subprocess writes what the library does. Real store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import workbench
from workbench.episodes import Episode, ToolCall, Turn
from workbench.errors import DataError
from workbench.export import export_run
from workbench.store import open_store


def _episode(answer: str, error: str | None = None, calls: int = 1) -> Episode:
    """A user question, an assistant turn with `calls` calculator calls, one tool turn per call, a final answer."""
    made = [ToolCall("calculator", f"{k}+1", "boom" if error else str(k + 1), error=error, seconds=0.01)
            for k in range(calls)]
    turns = [Turn("user", "What is 37*48?", token_ids=[1, 2]),
             Turn("assistant", "<calc>", token_ids=[3, 4], entropy=[0.5, 0.25], logprobs=[-0.5, -1.0],
                  tool_calls=made, finish_reason="tool_call")]
    turns += [Turn("tool", c.result, token_ids=[5]) for c in made]
    turns.append(Turn("assistant", answer, token_ids=[6], entropy=[0.125], logprobs=[-0.25], finish_reason="stop"))
    return Episode(turns)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    path = tmp_path_factory.mktemp("episodes") / "store"
    run = workbench.init(store=path, name="eps", heartbeat_s=0, guards=False, commit_window_s=0)
    episodes = [_episode("1776"), _episode("17", error="timeout"), _episode("1776", calls=2), None]
    run.log_rollouts(0, prompts=["What is 37*48?"] * 4, responses=["1776", "17", "1776", "plain"],
                     rewards=[1.0, 0.0, 1.0, 0.0], episodes=episodes)
    run.finish()
    assert run.problems == []
    store = open_store(path, read_only=True)
    yield path, store, run.run_id, episodes
    store.close()


def test_episodes_logged_through_the_sdk_read_back_exactly(logged):
    _, store, run_id, episodes = logged
    rows = store.rollouts(run_id, limit=10).sort("idx")
    assert rows["turns"].to_list() == [4, 4, 5, None]
    assert rows["tool_calls"].to_list() == [1, 1, 2, None] and rows["tool_errors"].to_list() == [0, 1, 0, None]
    for i, ep in enumerate(episodes[:3]):
        back = store.episode(run_id, 0, 0, rows["prompt_id"][i], rows["idx"][i])
        assert [(t.role, t.text, t.token_ids, t.entropy, t.logprobs) for t in back.turns] == \
               [(t.role, t.text, t.token_ids, t.entropy, t.logprobs) for t in ep.turns]
        assert [(c.name, c.arguments, c.result, c.error) for c in back.tool_calls] == \
               [(c.name, c.arguments, c.result, c.error) for c in ep.tool_calls]


def test_a_bad_episode_refuses_the_call_naming_the_row(tmp_path):
    run = workbench.init(store=tmp_path / "store", name="bad", heartbeat_s=0, guards=False, on_error="raise")
    with pytest.raises(DataError, match=r"episodes\[1\]: episode turn 0.role = 'robot'"):
        run.log_rollouts(0, prompts=["q", "q"], responses=["a", "b"], rewards=[1.0, 0.0],
                         episodes=[None, Episode([Turn("robot", "hi")])])
    with pytest.raises(DataError, match=r"episodes\[0\]: expected a workbench.episodes.Episode"):
        run.log_rollouts(0, prompts=["q"], responses=["a"], rewards=[1.0], episodes=[{"turns": []}])
    run.finish()


def test_sft_messages_carry_tool_calls_in_openai_form(logged, tmp_path):
    _, store, run_id, _ = logged
    card = export_run(store, run_id, tmp_path / "sft", fmt="both")
    assert card["episodes"] is True and card["counts"]["rows"] == 4
    rows = {r["idx"]: r for r in map(json.loads, (tmp_path / "sft" / "data.jsonl").read_text().splitlines())}
    two = rows[2]["messages"]
    assert [m["role"] for m in two] == ["user", "assistant", "tool", "tool", "assistant"]
    assert two[1]["tool_calls"] == [
        {"id": "call_1_0", "type": "function", "function": {"name": "calculator", "arguments": "0+1"}},
        {"id": "call_1_1", "type": "function", "function": {"name": "calculator", "arguments": "1+1"}}]
    assert [(m["tool_call_id"], m["content"]) for m in two[2:4]] == [("call_1_0", "1"), ("call_1_1", "2")]
    assert two[4] == {"role": "assistant", "content": "1776", "tool_calls": None, "tool_call_id": None}
    assert rows[3]["messages"] == [  # the one-turn rollout, in the same message type
        {"role": "user", "content": "What is 37*48?", "tool_calls": None, "tool_call_id": None},
        {"role": "assistant", "content": "plain", "tool_calls": None, "tool_call_id": None}]
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "sft" / "data.parquet")
    assert sorted(table.to_pylist(), key=lambda r: r["idx"]) == [rows[i] for i in sorted(rows)]


@pytest.mark.parametrize("args,kept", [
    ({"tool_error": "timeout"}, [1]), ({"tool_error": "syntax"}, []),
    ({"filters": {"tool_errors_min": 1}}, [1]), ({"filters": {"tool_errors_max": 0}}, [0, 2]),
    ({"filters": {"tool_calls_min": 2}}, [2]), ({"filters": {"tool_calls_max": 1}}, [0, 1]),
])
def test_tool_filters_select_by_the_episodes_calls(logged, tmp_path, args, kept):
    _, store, run_id, _ = logged
    export_run(store, run_id, tmp_path / "out", **args)
    rows = [json.loads(line) for line in (tmp_path / "out" / "data.jsonl").read_text().splitlines()]
    assert sorted(r["idx"] for r in rows) == kept


def test_the_command_writes_what_the_library_does(logged, tmp_path):
    path, store, run_id, _ = logged
    export_run(store, run_id, tmp_path / "lib", tool_error="timeout")
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "export", run_id, str(tmp_path / "cli"),
                           "--tool-error", "timeout", "--store", str(path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cli" / "data.jsonl").read_bytes() == (tmp_path / "lib" / "data.jsonl").read_bytes()
    bad = subprocess.run([sys.executable, "-m", "workbench.cli", "export", run_id, str(tmp_path / "bad"),
                          "--tool-error", "oops", "--store", str(path)], capture_output=True, text=True)
    assert bad.returncode == 1 and "--tool-error 'oops': must be one of" in bad.stderr


def test_rejection_carries_the_episodes_and_pairs_stay_one_turn(logged, tmp_path):
    _, store, run_id, _ = logged
    export_run(store, run_id, tmp_path / "rej", kind="rejection", k=2)
    rows = [json.loads(line) for line in (tmp_path / "rej" / "data.jsonl").read_text().splitlines()]
    assert sorted(r["idx"] for r in rows) == [0, 2]  # reward 1; "1776" both, by different tool calls: kept apart
    assert all(r["messages"][2]["role"] == "tool" and r["messages"][2]["tool_call_id"] == "call_1_0" for r in rows)
    export_run(store, run_id, tmp_path / "pairs", kind="pairs", k=2)
    pairs = [json.loads(line) for line in (tmp_path / "pairs" / "data.jsonl").read_text().splitlines()]
    assert len(pairs) == 2 and all(p["chosen"] == [{"role": "assistant", "content": "1776"}] for p in pairs)
