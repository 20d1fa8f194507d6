"""Finding a tool call in decoded text: pure functions, one per syntax, and the stop strings that end
decoding right after a call.

Three syntaxes:

- `calc`, the model organism's: `<calc>37*48</calc>`; the body is the calculator's expression.
- `hermes`, SmolLM2's tools prompt and the Hermes / Qwen templates': `<tool_call>{"name": "calculator",
  "arguments": {"expression": "37*48"}}</tool_call>`. SmolLM2's own code wraps the call in a list
  (`[{...}]`): a list of one call is read the same; a list of several is malformed (one call at a
  time). `arguments` may also be a JSON string holding the table (OpenAI's form), or absent ({}).
- `qwen`: hermes calls, the result on its own line (`<tool_response>\n1776\n</tool_response>`) as Qwen
  2.5's chat template (and TRL's tool loop, which renders results through it) writes a tool turn; the
  calls the template writes (`<tool_call>\n{...}\n</tool_call>`) parse as hermes ones (JSON allows the
  newlines).

`parse(text, syntax, tools)` looks at the first opening tag in `text` and tells apart:

| kind | when | what the model sees |
| --- | --- | --- |
| none | no opening tag: the episode's answer | nothing: the episode ends |
| call | a complete, well-formed call of a tool in `tools` | the tool's result |
| malformed | a complete call whose body is not one (empty, bad JSON, no name, arguments not a table) | an error |
| unterminated | the text ends inside a call (no closing tag) | an error result |
| unknown_tool | a well-formed call of a tool not in `tools` | an error result |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

from workbench.errors import ConfigError
from workbench.registry import Registry
from workbench.tools.base import ToolResult

OUTCOMES = ("none", "call", "malformed", "unterminated", "unknown_tool")


@dataclass(frozen=True)
class ParsedCall:
    """What the text holds (module docstring's table)."""

    kind: str
    """One of OUTCOMES."""
    name: str | None = None
    """The tool called (for call and unknown_tool)."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Its arguments (for call)."""
    start: int = -1
    """Where the call's opening tag starts in the text (-1: no call)."""
    end: int = -1
    """Just past its closing tag (the text's length when unterminated; -1: no call)."""
    message: str = ""
    """Why it is not a call (malformed, unterminated, unknown_tool)."""

    def failure(self, max_chars: int | None = None) -> ToolResult | None:
        """The error result the model sees for a call that cannot run; None for none and call."""
        if self.kind in ("none", "call"):
            return None
        return ToolResult.failure(self.kind, self.message, max_chars=max_chars)


@dataclass(frozen=True)
class Syntax:
    """One way of writing a call: its tags and how its body becomes (tool, arguments)."""

    name: str
    open: str
    close: str
    body: Callable[[str, Collection[str]], ParsedCall]
    """(body text, tools allowed) -> a ParsedCall of kind call, malformed or unknown_tool."""
    result_open: str
    result_close: str
    show_errors: bool = True
    """Whether the model reads an error's kind and message; False: an empty result (the organism's
    calc syntax: its alphabet holds digits and operators only). The store records the error either way."""

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end decoding: the closing tag (the call is complete; run it)."""
        return (self.close,)

    def format_result(self, result: ToolResult) -> str:
        """The text appended after a call for the model to read (an error says its kind)."""
        text = result.text if not result.error else f"error ({result.kind}): {result.text}" if self.show_errors else ""
        return f"{self.result_open}{text}{self.result_close}"


SYNTAXES: Registry[Syntax] = Registry("tool-call syntax", error=ConfigError)


def _calc_body(body: str, tools: Collection[str]) -> ParsedCall:
    if not body.strip():
        return ParsedCall("malformed", message="empty <calc></calc>: write an expression between the tags")
    if "<calc>" in body:
        return ParsedCall("malformed", message="a <calc> inside a <calc>: one expression per call")
    if "calculator" not in tools:
        return ParsedCall("unknown_tool", name="calculator", message=_unknown("calculator", tools))
    return ParsedCall("call", name="calculator", arguments={"expression": body.strip()})


def _unknown(name: Any, tools: Collection[str]) -> str:
    return f"unknown tool {name!r}; tools: {', '.join(sorted(tools)) or 'none'}"


def _hermes_body(body: str, tools: Collection[str]) -> ParsedCall:
    try:
        call = json.loads(body)
    except ValueError as exc:
        return ParsedCall("malformed", message=f"the call is not JSON: {exc}")
    if isinstance(call, list):
        if len(call) != 1:
            return ParsedCall("malformed", message=f"a list of {len(call)} calls: one call per <tool_call>")
        call = call[0]
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ParsedCall("malformed", message='the call must be {"name": "...", "arguments": {...}}')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ParsedCall("malformed", message="the call's arguments are a string that is not JSON")
    if not isinstance(arguments, dict):
        return ParsedCall("malformed", message="the call's arguments must be a JSON object")
    if call["name"] not in tools:
        return ParsedCall("unknown_tool", name=call["name"], message=_unknown(call["name"], tools))
    return ParsedCall("call", name=call["name"], arguments=arguments)


SYNTAXES.add("calc", Syntax("calc", "<calc>", "</calc>", _calc_body, "<result>", "</result>", show_errors=False))
SYNTAXES.add("hermes", Syntax("hermes", "<tool_call>", "</tool_call>", _hermes_body,
                              "<tool_response>", "</tool_response>"))
SYNTAXES.add("qwen", Syntax("qwen", "<tool_call>", "</tool_call>", _hermes_body,
                            "<tool_response>\n", "\n</tool_response>"))


def parse(text: str, syntax: str | Syntax, tools: Collection[str]) -> ParsedCall:
    """The first call in `text` written in `syntax` (a name in SYNTAXES), with `tools` the names it may
    call (module docstring)."""
    s = SYNTAXES.get(syntax) if isinstance(syntax, str) else syntax
    start = text.find(s.open)
    if start < 0:
        return ParsedCall("none")
    inner = start + len(s.open)
    close = text.find(s.close, inner)
    if close < 0:
        return ParsedCall("unterminated", start=start, end=len(text),
                          message=f"the text ends inside {s.open}: close the call with {s.close}")
    found = s.body(text[inner:close], tools)
    return ParsedCall(found.kind, found.name, found.arguments, start, close + len(s.close), found.message)


def stop_strings(syntax: str) -> tuple[str, ...]:
    """The strings that end decoding for `syntax` (its closing tag)."""
    return SYNTAXES.get(syntax).stop_strings
