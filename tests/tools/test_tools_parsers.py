"""Finding a call in decoded text: every outcome in both syntaxes, and what the model reads for each."""

from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.tools import ToolResult, parse, stop_strings
from workbench.tools.parsers import SYNTAXES

TOOLS = ("calculator", "python")


def test_calc_outcomes():
    assert parse("The answer is 1776.", "calc", TOOLS).kind == "none"
    call = parse("So <calc>37*48</calc> is", "calc", TOOLS)
    assert (call.kind, call.name, call.arguments, call.start, call.end) == (
        "call", "calculator", {"expression": "37*48"}, 3, 21)
    assert parse("<calc> 37 * 48 </calc>", "calc", TOOLS).arguments == {"expression": "37 * 48"}
    first = parse("<calc>1+1</calc> then <calc>2+2</calc>", "calc", TOOLS)
    assert first.arguments == {"expression": "1+1"} and first.end == len("<calc>1+1</calc>")


@pytest.mark.parametrize("text,kind", [
    ("<calc>37*", "unterminated"), ("x <calc>", "unterminated"), ("<calc></calc>", "malformed"),
    ("<calc>  </calc>", "malformed"), ("<calc>1+<calc>2</calc>", "malformed"), ("</calc> 4", "none"),
    ("<cal>37</cal>", "none"),
])
def test_calc_failures(text, kind):
    parsed = parse(text, "calc", TOOLS)
    assert parsed.kind == kind
    if kind != "none":
        result = parsed.failure(max_chars=30)
        assert (result.error, result.kind) == (True, kind) and 0 < len(result.text) <= 30
    else:
        assert parsed.failure() is None


def test_calc_without_the_calculator_is_an_unknown_tool():
    parsed = parse("<calc>1+1</calc>", "calc", ("python",))
    assert (parsed.kind, parsed.name) == ("unknown_tool", "calculator")


def test_hermes_outcomes():
    text = 'I will compute. <tool_call>{"name": "calculator", "arguments": {"expression": "37*48"}}</tool_call>'
    call = parse(text, "hermes", TOOLS)
    assert (call.kind, call.name, call.arguments, call.end) == ("call", "calculator", {"expression": "37*48"},
                                                                len(text))
    smol = parse('<tool_call>[{"name": "python", "arguments": {"code": "1+1"}}]</tool_call>', "hermes", TOOLS)
    assert (smol.kind, smol.name, smol.arguments) == ("call", "python", {"code": "1+1"})
    openai = parse('<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"2\\"}"}</tool_call>', "hermes", TOOLS)
    assert openai.arguments == {"code": "2"}
    bare = parse('<tool_call>{"name": "python"}</tool_call>', "hermes", TOOLS)
    assert (bare.kind, bare.arguments) == ("call", {})


@pytest.mark.parametrize("body,kind", [
    ('{"name": "calculator", "arguments": {"expression": "1"}', "unterminated"),
    ("{not json}</tool_call>", "malformed"),
    ('{"arguments": {}}</tool_call>', "malformed"),
    ('{"name": 3}</tool_call>', "malformed"),
    ('{"name": "python", "arguments": [1]}</tool_call>', "malformed"),
    ('{"name": "python", "arguments": "not json"}</tool_call>', "malformed"),
    ('[{"name": "python"}, {"name": "python"}]</tool_call>', "malformed"),
    ("[]</tool_call>", "malformed"),
    ('"calculator"</tool_call>', "malformed"),
    ('{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown_tool"),
])
def test_hermes_failures(body, kind):
    parsed = parse("<tool_call>" + body, "hermes", TOOLS)
    assert parsed.kind == kind
    assert parsed.failure().kind == kind
    if kind == "unknown_tool":
        assert "rm_rf" in parsed.message and "calculator, python" in parsed.message


def test_stop_strings_and_results():
    assert stop_strings("calc") == ("</calc>",)
    assert stop_strings("hermes") == ("</tool_call>",)
    with pytest.raises(ConfigError, match="calc, hermes"):
        stop_strings("xml")
    calc = SYNTAXES.get("calc")
    assert calc.format_result(ToolResult("1776")) == "<result>1776</result>"
    bad = ToolResult.failure("timeout", "too slow")
    assert SYNTAXES.get("hermes").format_result(bad) == "<tool_response>error (timeout): too slow</tool_response>"


def test_text_cut_at_a_stop_string_parses_as_a_call():
    """Decoding stops at the stop string, which the text keeps: the call is then complete."""
    for syntax, text in (("calc", "Let me see <calc>2*3"), ("hermes", '<tool_call>{"name": "python"}')):
        assert parse(text, syntax, TOOLS).kind == "unterminated"
        assert parse(text + stop_strings(syntax)[0], syntax, TOOLS).kind == "call"


def test_qwen_reads_the_templates_call_and_puts_the_result_on_its_own_line():
    """Qwen 2.5's template writes a call with newlines inside the tags and a result on its own line
    (the format the tool-calling SmolLM2 and TRL's tool loop share: docs/episodes-smollm2.md)."""
    text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "37*48"}}\n</tool_call>'
    call = parse(text, "qwen", ["calculator"])
    assert (call.kind, call.name, call.arguments, call.end) == ("call", "calculator", {"expression": "37*48"}, len(text))
    assert SYNTAXES.get("qwen").format_result(ToolResult("1776")) == "<tool_response>\n1776\n</tool_response>"
    assert stop_strings("qwen") == ("</tool_call>",)
    assert parse('<tool_call>\n{"name": "calc"}\n</tool_call>', "qwen", ["calculator"]).kind == "unknown_tool"


def test_chat_tools_needs_the_chat_template():
    from workbench.config import RunConfig

    with pytest.raises(ConfigError, match="model.chat_tools"):
        RunConfig.from_dict({"model": {"chat_tools": True}})
