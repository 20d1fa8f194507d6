"""The `[tools]` section: which tools an episode may call, how it writes calls, how many it may make,
and the limits every call runs under: the run config's `[tools]`
(read when `rollout.shape = "episodes"`), or loaded on its own with `load_tools_config`:

    [tools]
    enabled = ["calculator", "python"]
    syntax = "hermes"
    max_calls = 4

    [tools.limits]
    cpu_seconds = 2
    wall_seconds = 5.0
    max_result_chars = 2000

A tool that is not registered, a syntax that does not exist, or a limit out of range is refused when
the config loads, naming the field (`tools.enabled[1]`, `tools.limits.memory_mb`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.checks import build_config, check_choice, check_int, require
from workbench.tools.base import TOOLS, ToolLimits
from workbench.tools.parsers import SYNTAXES


@dataclass(frozen=True)
class ToolsConfig:
    """Tools in episodes (docs/tools.md)."""

    enabled: tuple[str, ...] = ("calculator",)
    """Names of the tools an episode may call (registered tools: `workbench.tools.tool_names()`)."""
    syntax: str = "calc"
    """How calls are written: calc (`<calc>37*48</calc>`, the calculator only), hermes
    (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`) or qwen (hermes calls, the result on its
    own line inside `<tool_response>`, as Qwen 2.5's chat template and TRL's tool loop write it)."""
    max_calls: int = 4
    """Tool calls an episode may make (0-64); a call past it gets a too_many_calls result and ends the
    episode."""
    parallel: int = 8
    """Calls run at once (1-256): a batch's calls share this many sandboxed child processes."""
    result_template: str = "{result}"
    """The text the model reads after a call, around the syntax's result (`{result}`, exactly once:
    `<tool_response>1776</tool_response>`): the chat template's tool turn for a chat model, e.g.
    SmolLM2's `<|im_end|>\n<|im_start|>user\n{result}<|im_end|>\n<|im_start|>assistant\n`. Every
    token of it is fed, never trained on."""
    limits: ToolLimits = field(default_factory=ToolLimits)
    """The limits of every call (`[tools.limits]`)."""
    DOC_TABLES: ClassVar = [("### `[tools.limits]`", ToolLimits)]

    def __post_init__(self) -> None:
        require(isinstance(self.enabled, tuple) and len(self.enabled) > 0, "tools.enabled",
                f"a non-empty list of tool names (registered: {', '.join(TOOLS.names())}), got {self.enabled!r}")
        for i, name in enumerate(self.enabled):
            require(isinstance(name, str) and name in TOOLS, f"tools.enabled[{i}]",
                    f"unknown tool {name!r}; registered tools: {', '.join(TOOLS.names())}")
            require(name not in self.enabled[:i], f"tools.enabled[{i}]", f"{name!r} is listed twice")
        check_choice("tools", "syntax", self.syntax, tuple(SYNTAXES.names()))
        require(self.syntax != "calc" or "calculator" in self.enabled, "tools.syntax",
                "'calc' calls the calculator, which tools.enabled does not list")
        check_int("tools", "max_calls", self.max_calls, 0, 64)
        check_int("tools", "parallel", self.parallel, 1, 256)
        require(isinstance(self.result_template, str) and self.result_template.count(RESULT_SLOT) == 1,
                "tools.result_template", f"text holding {RESULT_SLOT} exactly once, got {self.result_template!r}")
        require(isinstance(self.limits, ToolLimits), "tools.limits", "a table of limits")

    def result_text(self, result: str) -> str:
        """`result` (the syntax's result text) inside `result_template`: what the model reads."""
        return self.result_template.replace(RESULT_SLOT, result)


RESULT_SLOT = "{result}"
"""Where the syntax's result goes in `ToolsConfig.result_template`."""


def load_tools_config(data: dict[str, Any] | None) -> ToolsConfig:
    """A ToolsConfig from a `[tools]` table (None or {}: the defaults); ConfigError names the field."""
    return build_config(ToolsConfig, data or {}, where="tools")
