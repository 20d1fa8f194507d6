"""A batch's round of calls (`run_round`): what each row reads next and whether its episode goes on,
with a model that answers, calls, emits broken calls, or never stops calling."""

from __future__ import annotations

import pytest

from workbench.tools import Sandbox, load_tools_config, run_round

CONFIG = load_tools_config({"max_calls": 3, "limits": {"wall_seconds": 5.0}})


@pytest.fixture(scope="module")
def box():
    with Sandbox(CONFIG.limits, parallel=CONFIG.parallel) as sandbox:
        yield sandbox


def test_one_round_of_a_mixed_batch(box):
    texts = ["The answer is 12.", "So <calc>37*48</calc>", "<calc>37*", "<calc>1/0</calc>", "<calc></calc>",
             "<calc>2**10**10</calc>", "<calc>7*6</calc>"]
    turns = run_round(box, texts, [0, 0, 1, 2, 0, 0, 3], CONFIG)
    assert [t.parsed.kind for t in turns] == ["none", "call", "unterminated", "call", "malformed", "call", "call"]
    assert turns[0].result is None and turns[0].more is False
    assert (turns[1].result.text, turns[1].more) == ("1776", True)
    assert [t.result.kind for t in turns[2:]] == ["unterminated", "tool_error", "malformed", "tool_error",
                                                  "too_many_calls"]
    assert [t.more for t in turns[2:]] == [True, True, True, True, False]


def test_a_model_that_never_stops_calling_is_stopped(box):
    """The same call every turn: after max_calls results the episode ends with too_many_calls."""
    made, kinds = 0, []
    for _ in range(10):
        (turn,) = run_round(box, ["again <calc>1+1</calc>"], [made], CONFIG)
        kinds.append(turn.result.kind)
        made += 1
        if not turn.more:
            break
    assert kinds == ["ok", "ok", "ok", "too_many_calls"]


def test_broken_calls_count_towards_the_cap(box):
    made, more, kinds = 0, True, []
    while more:
        (turn,) = run_round(box, ["<calc>37*"], [made], CONFIG)
        made, more = made + 1, turn.more
        kinds.append(turn.result.kind)
        assert made <= CONFIG.max_calls + 1
    assert kinds == ["unterminated"] * CONFIG.max_calls + ["too_many_calls"]


def test_hermes_calls_run_in_parallel(box):
    config = load_tools_config({"enabled": ["calculator", "python"], "syntax": "hermes"})
    texts = ['<tool_call>{"name": "python", "arguments": {"code": "sum(range(%d))"}}</tool_call>' % n
             for n in range(1, 9)]
    texts.append('<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>')
    turns = run_round(box, texts, [0] * len(texts), config)
    assert [t.result.text for t in turns[:8]] == [str(sum(range(n))) for n in range(1, 9)]
    assert (turns[8].result.kind, turns[8].more) == ("unknown_tool", True)


def test_a_call_that_is_not_utf8(box):
    """Text decoded with surrogateescape keeps undecodable bytes as lone surrogates: such a call is a
    non_utf8 result, and the episode goes on."""
    text = b"<calc>1+\xff</calc>".decode("utf-8", errors="surrogateescape")
    (turn,) = run_round(box, [text], [0], CONFIG)
    assert (turn.parsed.kind, turn.result.kind, turn.more) == ("call", "non_utf8", True)


def test_rows_and_counts_must_match(box):
    with pytest.raises(ValueError, match="2 texts but 1 call counts"):
        run_round(box, ["a", "b"], [0], CONFIG)
