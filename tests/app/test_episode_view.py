"""Episodes on the dashboard: the conversation builder (app/episode_view.py) on a hand-made episode, its
time lanes, and the Rollouts page (AppTest) on a store holding multi-turn rollouts: each episode drawn as a
conversation with its tool calls, errors and masked tokens, the tool filters counting what the store counts."""

from __future__ import annotations

import pytest

from app import episode_view
from workbench.episodes import Episode, ToolCall, Turn, episode_rows
from workbench.store import StepRecord, open_store

pytest.importorskip("streamlit")
from apptest import goto, open_app  # noqa: E402


def _episode(error: str | None = None, answer: str = "1776") -> Episode:
    return Episode([
        Turn("user", "37*48=", token_ids=[1, 2, 3, 4, 5, 6]),
        Turn("assistant", "<calc>37*48</calc>", token_ids=[7, 8, 9], entropy=[0.1, 0.9, 0.2],
             finish_reason="tool_call", started_s=0.0, seconds=0.02,
             tool_calls=[ToolCall("calculator", "37*48", "error: <b>boom</b>" if error else "1776", error=error,
                                  seconds=0.004)]),
        Turn("tool", "error: <b>boom</b>" if error else "1776", token_ids=[10, 11], started_s=0.03, seconds=0.005),
        Turn("assistant", answer, token_ids=[12], entropy=[0.3], finish_reason="stop", started_s=0.04, seconds=0.01),
    ])


def test_the_conversation_shows_every_turn_call_and_mask_escaped():
    out = episode_view.conversation_html(_episode(error="syntax"), None)
    for role in ("user", "assistant", "tool"):
        assert f">{role}<" in out
    assert "calculator" in out and "error: syntax" in out and "4.0 ms" in out
    assert "<b>boom</b>" not in out and "&lt;b&gt;boom&lt;/b&gt;" in out
    # no tokenizer: one piece per character where the lengths agree (the prompt's 6, struck: never trained
    # on), the whole text where they do not (the tool's result, struck; the assistant's, coloured)
    assert out.count('title="not trained on"') == 6 and out.count("line-through") == 7
    assert 'title="H=0.300"' in out and "H=0.900" not in out


def test_lanes_split_time_into_generate_tool_and_wait():
    segs = episode_view.lane_segments(_episode())
    assert [s[0] for s in segs] == ["generate", "wait", "tool", "wait", "generate"]
    assert segs[1][1] == pytest.approx(0.02) and segs[1][2] == pytest.approx(0.01)
    out = episode_view.lanes_html([("#0", _episode()), ("#1", _episode())])
    assert out.count('title="generate:') == 4 and out.count('title="tool:') == 2 and out.count('title="wait:') == 4
    assert "#0" in out and "#1" in out and "0 to 0.050 s" in out  # one scale: the longest episode's end
    assert 'title="tool: 0.005 s from 0.030 s"' in out


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("episodes") / "store"
    with open_store(path) as st:
        rid = st.create_run("tools", {"task": {"profile": "tools"}}, seed=0)
        eps = [(0, _episode(), 1.0), (1, _episode(error="syntax", answer="12"), 0.0), (2, _episode(), 1.0)]
        turns, calls, rows = [], [], []
        for idx, ep, reward in eps:
            t, c = episode_rows(ep, {"stage": 0, "prompt_id": "p0", "idx": idx})
            turns, calls = turns + t, calls + c
            rows.append({"stage": 0, "prompt_id": "p0", "idx": idx, "response": ep.turns[-1].text, "reward": reward,
                         "correct": reward > 0, "length": ep.model_tokens, "finish_reason": "stop", **ep.summary()})
        st.write_step(StepRecord(rid, 1, {"rollout/count": 3, "rollout/reward_mean": 2 / 3}, rows,
                                 prompts=[{"prompt_id": "p0", "split": "train", "text": "37*48=", "answer": "1776"}],
                                 turns=turns, tool_calls=calls))
    return path, rid


def test_the_rollouts_page_draws_episodes_and_filters_by_tool_errors(lake, monkeypatch):
    path, rid = lake
    at = goto(open_app(path, monkeypatch), "rollouts")
    at.selectbox(key="rollouts_run").set_value(rid).run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [e.label for e in at.expander]
    assert sum("as a conversation" in label for label in labels) == 3
    assert any("4 turns · 1 tool calls · 1 failed" in label for label in labels)
    body = "".join(h.proto.body for h in at.get("html"))
    assert "error: syntax" in body and "calculator" in body
    def matched() -> str:
        return next(t.value for t in at.text if "rollouts match" in t.value)

    assert matched().startswith("3 rollouts match")
    at.number_input(key="rollouts_errors_min").set_value(1).run()
    assert not at.exception and matched().startswith("1 rollouts match")
    assert sum("as a conversation" in e.label for e in at.expander) == 1
