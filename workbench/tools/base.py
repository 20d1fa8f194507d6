"""What a tool call gives back, the limits it runs under, and the registry of tools.

A tool is a plain function of its JSON arguments that returns text; it runs in the sandbox's child
process (`workbench.tools.sandbox`), never in the caller's. Adding one takes a few lines:

    from workbench.tools import ToolError, register_tool

    @register_tool("reverse", description="The text reversed.", parameters={"text": "the text"})
    def reverse(arguments: dict) -> str:
        if not isinstance(arguments.get("text"), str):
            raise ToolError("reverse: 'text' must be a string")
        return arguments["text"][::-1]

and it runs under the same limits as the built-in ones. A tool's module must be importable by name
(the sandbox's process imports it before any call: `Tool.module`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from workbench.checks import check_float, check_int
from workbench.episodes import TOOL_ERRORS
from workbench.errors import ConfigError
from workbench.registry import Registry

ERROR_KINDS = TOOL_ERRORS
"""Every way a call can fail (declared once, with the episode format: `workbench.episodes.TOOL_ERRORS`);
each becomes a `ToolResult` with `error=True` and this `kind`."""


class ToolError(Exception):
    """Raised by a tool for a failure the model should read (a bad argument, a number too large):
    its message is the result's text, with kind "tool_error"."""


class ToolFailure(BaseException):
    """Raised by a tool to end its call as a failure of a given kind (one of ERROR_KINDS) with the
    given text (the python tool reports a program's exception this way, with what it printed first).
    A BaseException, so that a program's `except Exception` does not swallow it."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind
        self.text = text


@dataclass(frozen=True)
class ToolResult:
    """What one call gave back: the text the model sees and the store records."""

    text: str
    """The tool's output (or the error's message), at most `ToolLimits.max_result_chars` characters."""
    error: bool = False
    """True when the call failed; `kind` says how."""
    kind: str = "ok"
    """"ok", or one of `ERROR_KINDS`."""
    seconds: float = 0.0
    """Wall-clock seconds the call took in the sandbox (0 for a call refused before it ran)."""
    truncated: bool = False
    """True when the text was cut to `max_result_chars`."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def failure(cls, kind: str, text: str, *, seconds: float = 0.0, max_chars: int | None = None) -> "ToolResult":
        """An error result of `kind` (one of ERROR_KINDS) with `text` cut to `max_chars`."""
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown tool error kind {kind!r}; valid kinds: {', '.join(ERROR_KINDS)}")
        text, cut = truncate(text, max_chars)
        return cls(text=text, error=True, kind=kind, seconds=seconds, truncated=cut)


def truncate(text: str, max_chars: int | None) -> tuple[str, bool]:
    """`text` cut to `max_chars` characters (None: not cut), and whether it was cut."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    return text[:max_chars], True


@dataclass(frozen=True)
class ToolLimits:
    """The limits every call runs under (a `[tools.limits]` table when mounted in a run config)."""

    cpu_seconds: int = 2
    """CPU seconds a call may use (RLIMIT_CPU, whole seconds: 1-600); past it the call is killed."""
    memory_mb: int = 256
    """Memory a call may allocate beyond its process's baseline, in MiB (RLIMIT_AS: 16-65536)."""
    wall_seconds: float = 5.0
    """Wall-clock seconds before the call is killed (0.01-3600), sleeping or not."""
    max_result_chars: int = 2000
    """Characters of a result the model sees (1-1000000); longer output is cut and marked truncated."""

    def __post_init__(self) -> None:
        check_int("tools.limits", "cpu_seconds", self.cpu_seconds, 1, 600)
        check_int("tools.limits", "memory_mb", self.memory_mb, 16, 65536)
        check_float("tools.limits", "wall_seconds", self.wall_seconds, 0.01, 3600)
        check_int("tools.limits", "max_result_chars", self.max_result_chars, 1, 1_000_000)

    @property
    def max_output_chars(self) -> int:
        """Output a call may produce before it is stopped as "output" (16x what the model sees, at
        least 64 KiB): enough to cut cleanly, too little to fill memory."""
        return max(16 * self.max_result_chars, 65536)


@dataclass(frozen=True)
class Tool:
    """A registered tool: its function and what a prompt may say about it."""

    name: str
    fn: Callable[[dict[str, Any]], Any]
    description: str = ""
    parameters: dict[str, str] = field(default_factory=dict)
    """Argument name -> what it is (for a system prompt listing the tools)."""
    main_argument: str | None = None
    """The argument that a bare-text call fills (`<calc>37*48</calc>` fills the calculator's
    `expression`); None when the tool takes only JSON arguments."""
    pure: bool = False
    """True when a call cannot change what a later call sees (the calculator: no names, attributes or
    imports). Such a tool's calls are served by warm worker processes that each serve many calls
    (docs/tools.md); any other tool gets a fresh child per call."""

    @property
    def module(self) -> str:
        """The module that defines the tool (the sandbox's process imports it)."""
        return self.fn.__module__


_CURRENT: list[ToolLimits] = [ToolLimits()]


def call_limits() -> ToolLimits:
    """The limits of the call now running (inside the sandbox's child; the defaults elsewhere)."""
    return _CURRENT[0]


def set_call_limits(limits: ToolLimits) -> None:
    """Set what `call_limits` returns (the sandbox's child does, before the tool runs)."""
    _CURRENT[0] = limits


TOOLS: Registry[Tool] = Registry("tool", error=ConfigError)


def register_tool(name: str, *, description: str = "", parameters: dict[str, str] | None = None,
                  main_argument: str | None = None, pure: bool = False
                  ) -> Callable[[Callable[[dict[str, Any]], Any]], Callable[[dict[str, Any]], Any]]:
    """Decorator registering a function `fn(arguments: dict) -> str` as the tool `name` (a second
    registration of a name raises ValueError). The function is returned unchanged. `pure`: see
    `Tool.pure` (leave it False unless no call can leave anything behind for the next)."""

    def add(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        TOOLS.add(name, Tool(name, fn, description, dict(parameters or {}), main_argument, pure))
        return fn

    return add


def get_tool(name: str) -> Tool:
    """The tool registered as `name`; an unknown name raises ConfigError listing the valid ones."""
    return TOOLS.get(name)


def tool_names() -> list[str]:
    """Every registered tool's name, sorted."""
    return TOOLS.names()


def tool_specs(names: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """The tools `names` as a chat template's `tools=` list expects them (OpenAI / Hermes function
    schemas: name, description, string parameters, all required), for a system prompt."""
    specs = []
    for name in names:
        tool = get_tool(name)
        properties = {arg: {"type": "string", "description": text} for arg, text in tool.parameters.items()}
        specs.append({"type": "function", "function": {
            "name": tool.name, "description": tool.description,
            "parameters": {"type": "object", "properties": properties, "required": list(tool.parameters)}}})
    return specs
