"""Episodes in the store: turns and tool calls read back exactly as written, single-turn rollouts read as
two-turn episodes, the format's bad input named, rollback and migration from a schema-10 store, and the
documented one-statement question "which tool errors preceded wrong answers"."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.episodes import Episode, ToolCall, Turn, episode_rows
from workbench.errors import DataError, StoreError
from workbench.store import StepRecord, open_store, schema

F32 = np.float32


def _episode(seed: int, *, error: str | None = None, answer: str = "1776") -> Episode:
    rng = np.random.default_rng(seed)
    ent = lambda n: [float(F32(x)) for x in rng.random(n)]  # noqa: E731 (float32 values round-trip exactly)
    return Episode([
        Turn("system", "You may call <calc>expr</calc>.", token_ids=[1, 2, 3]),
        Turn("user", "What is 37*48?", token_ids=[4, 5, 6, 7]),
        Turn("assistant", "<calc>37*48</calc>", token_ids=[8, 9, 10], entropy=ent(3), logprobs=ent(3),
             finish_reason="tool_call", started_s=0.0, seconds=0.012, waited_s=0.001,
             tool_calls=[ToolCall("calculator", "37*48", "error: boom" if error else "1776", error=error,
                                  seconds=0.004, truncated=False)]),
        Turn("tool", "error: boom" if error else "1776", token_ids=[11, 12], started_s=0.013, seconds=0.004),
        Turn("assistant", answer, token_ids=[13, 14], entropy=ent(2), logprobs=ent(2), finish_reason="stop",
             started_s=0.02, seconds=0.01),
    ], prompt_turns=2)


def _rollout(prompt_id: str, idx: int, ep: Episode, reward: float) -> dict:
    return {"stage": 0, "prompt_id": prompt_id, "idx": idx, "response": ep.turns[-1].text, "reward": reward,
            "correct": reward > 0, "length": ep.model_tokens, **ep.summary()}


def _write(st, rid: str, step: int, episodes: list[tuple[str, int, Episode, float]]) -> None:
    turns, calls = [], []
    for pid, idx, ep, _ in episodes:
        t, c = episode_rows(ep, {"stage": 0, "prompt_id": pid, "idx": idx})
        turns += t
        calls += c
    st.write_step(StepRecord(rid, step, {"rollout/count": len(episodes)},
                             [_rollout(pid, idx, ep, r) for pid, idx, ep, r in episodes],
                             turns=turns, tool_calls=calls))


def test_an_episode_reads_back_exactly_as_written(tmp_path):
    eps = [("p1", 0, _episode(0), 1.0), ("p1", 1, _episode(1, error="syntax", answer="12"), 0.0)]
    with open_store(tmp_path) as st:
        rid = st.create_run("episodes", {}, seed=0)
        _write(st, rid, 1, eps)
        for pid, idx, ep, _ in eps:
            back = st.episode(rid, 1, 0, pid, idx)
            assert back == ep
            assert back.loss_mask() == ep.loss_mask() == [True] * 3 + [False] * 2 + [True] * 2
        row = st.rollouts(rid).sort("idx").row(1, named=True)
        assert (row["turns"], row["tool_calls"], row["tool_errors"], row["tool_tokens"]) == (5, 1, 1, 2)
        assert st.episode_turns(rid, step_min=1, step_max=1).height == 10
        assert st.episode_tool_calls(rid)["error"].to_list() == [None, "syntax"]


def test_a_single_turn_rollout_reads_as_a_two_turn_episode(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("plain", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "token_ids": [5, 6],
             "token_entropy": [0.5, 0.25], "reward": 1.0, "length": 2, "finish_reason": "stop"}],
            prompts=[{"prompt_id": "p", "split": "train", "text": "3*4=", "answer": "12"}]))
        ep = st.episode(rid, 1, 0, "p", 0)
        assert [t.role for t in ep.turns] == ["user", "assistant"]
        assert ep.turns[0].text == "3*4=" and ep.turns[1].token_ids == [5, 6]
        assert ep.turns[1].entropy == [0.5, 0.25] and ep.loss_mask() == [True, True]
        with pytest.raises(StoreError, match="no rollout at step 1, stage 0, prompt 'p', idx 7"):
            st.episode(rid, 1, 0, "p", 7)


@pytest.mark.parametrize("change, message", [
    (lambda e: setattr(e.turns[3], "mask", [True, True]), r"turn 3.mask: a tool turn is never trained on"),
    (lambda e: setattr(e.turns[2], "entropy", [0.1]), r"turn 2.entropy: 1 values for 3 token_ids"),
    (lambda e: setattr(e.turns[1], "role", "robot"), r"turn 1.role = 'robot'"),
    (lambda e: setattr(e.turns[4], "parent", 9), r"turn 4.parent = 9"),
    (lambda e: setattr(e.turns[3], "entropy", [0.1, 0.2]), r"turn 3.entropy: only assistant turns"),
    (lambda e: setattr(e.turns[2].tool_calls[0], "error", "oops"), r"tool_calls\[0\].error = 'oops'"),
    (lambda e: setattr(e.turns[2].tool_calls[0], "seconds", float("nan")), r"tool_calls\[0\].seconds"),
    (lambda e: setattr(e.turns[3], "tool_calls", [ToolCall("calculator", "1")]), r"turn 3.tool_calls: only assistant"),
])
def test_bad_episodes_are_refused_naming_the_turn_and_field(change, message):
    ep = _episode(0)
    change(ep)
    with pytest.raises(DataError, match=message):
        episode_rows(ep)


def test_an_assistant_turn_in_the_prompt_is_not_trained_on():
    ep = _episode(0)
    ep.turns[1] = Turn("assistant", "few-shot", token_ids=[1, 2])
    assert episode_rows(ep)[0][1]["loss_mask"] is None
    assert ep.loss_mask()[:3] == [True, True, True]  # the prompt's turns are outside the mask
    ep.turns[1].mask = [True, False]
    with pytest.raises(DataError, match="turn 1.mask: a assistant turn of the prompt"):
        ep.validate()


def test_branches_point_into_the_turns_they_share():
    ep = _episode(0)
    ep.turns.append(Turn("assistant", "1777", token_ids=[15], entropy=[0.3], parent=3))
    turns, _ = episode_rows(ep)
    assert [t["parent_turn"] for t in turns] == [None, 0, 1, 2, 3, 3]


def test_rollback_and_earlier_attempts_take_the_episode_rows(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("r", {}, seed=0)
        for step in (1, 2, 3, 4):
            _write(st, rid, step, [("p", 0, _episode(step), 1.0)])
        attempt = st.archive_attempt(rid, 2, "a guard rolled the run back")
        assert st.episode_turns(attempt)["step"].unique().sort().to_list() == [3, 4]
        assert st.episode(attempt, 4, 0, "p", 0) == _episode(4)
        st.rollback_run(rid, 1)
        assert st.episode_turns(rid)["step"].unique().to_list() == [1]
        assert st.episode_tool_calls(rid)["step"].unique().to_list() == [1]


def test_a_schema_11_store_gains_the_episode_tables(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("old", {}, seed=0)
        st.write_step(StepRecord(rid, 1, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2}]))

        def as_schema_11(cur):
            cur.execute("DROP TABLE turns")
            cur.execute("DROP TABLE tool_calls")
            for name in ("turns", "tool_calls", "tool_errors", "tool_tokens"):
                cur.execute(f"ALTER TABLE rollouts DROP COLUMN {name}")
            cur.execute("UPDATE meta SET value = '11' WHERE key = 'schema_version'")

        st._lake.write(as_schema_11, "a store as schema 11 left it")
    with open_store(tmp_path) as st:
        assert st.schema_version == schema.SCHEMA_VERSION >= 12
        _write(st, rid, 2, [("p", 0, _episode(2), 1.0)])
        assert st.episode(rid, 2, 0, "p", 0) == _episode(2)
        assert st.rollouts(rid).sort("step")["turns"].to_list() == [None, 5]


def test_which_tool_errors_preceded_wrong_answers_in_one_statement(tmp_path):
    """The query docs/store.md gives for it, run as written there."""
    from pathlib import Path
    doc = (Path(__file__).parents[2] / "docs" / "store.md").read_text()
    query = doc.split("<!-- tool-errors-query -->")[1].split("```sql")[1].split("```")[0]
    with open_store(tmp_path) as st:
        rid = st.create_run("q", {}, seed=0)
        _write(st, rid, 1, [("p", 0, _episode(0), 1.0), ("p", 1, _episode(1, error="syntax", answer="7"), 0.0),
                            ("q", 0, _episode(2, error="timeout", answer="1776"), 1.0)])
        frame = st.sql(query)
    assert frame["error"].to_list() == ["syntax"] and frame["episodes"].to_list() == [1]


def test_a_page_of_episodes_reads_in_two_queries_and_filters_by_tool_calls(tmp_path):
    with open_store(tmp_path) as st:
        rid = st.create_run("page", {}, seed=0)
        assert not st.has_episodes(rid)
        _write(st, rid, 1, [("p", 0, _episode(0), 1.0), ("p", 1, _episode(1, error="syntax", answer="7"), 0.0)])
        st.write_step(StepRecord(rid, 2, {"rollout/count": 1}, [
            {"stage": 0, "prompt_id": "p", "idx": 0, "response": "12", "reward": 1.0, "length": 2}]))
        assert st.has_episodes(rid)
        found = st.episodes(rid, [(1, 0, "p", 0), (1, 0, "p", 1), (2, 0, "p", 0), (1, 0, "p", 9)])
        assert set(found) == {(1, 0, "p", 0), (1, 0, "p", 1)} and found[(1, 0, "p", 1)] == _episode(1, error="syntax", answer="7")
        assert st.count_rollouts(rid, tool_errors_min=1) == 1
        assert st.count_rollouts(rid, tool_calls_min=0) == 2  # the single-turn row has no count
