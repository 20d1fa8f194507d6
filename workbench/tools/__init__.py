"""Tools an episode may call: a registry, and a sandbox that runs each call in a limited subprocess;
a failure is a result, never a crash (docs/tools.md).

    from workbench.tools import Sandbox
    with Sandbox() as box:
        box.call("calculator", {"expression": "37*48"}).text   # "1776"

- `base`: `ToolResult`, `ToolLimits`, the registry (`register_tool`, `get_tool`), `ToolError`.
- `calculator`, `python_tool`: the built-in tools.
- `guard`: the walls put up around each call; `zygote`: the sandbox's process; `sandbox`: its client.
- `parsers`: finding a call in decoded text (`<calc>...</calc>`, `<tool_call>{...}</tool_call>`).
- `config`: the run config's `[tools]` section; `turns`: one round of calls
  for a batch of episodes (parse, run at once, what each row reads next).
"""

from workbench.tools import calculator, python_tool  # noqa: F401 - registers the built-in tools
from workbench.tools.base import (ERROR_KINDS, TOOLS, Tool, ToolError, ToolFailure, ToolLimits, ToolResult,
                                  call_limits, get_tool, register_tool, tool_names, tool_specs)
from workbench.tools.config import ToolsConfig, load_tools_config
from workbench.tools.parsers import SYNTAXES, ParsedCall, Syntax, parse, stop_strings
from workbench.tools.sandbox import Sandbox, run_calls
from workbench.tools.turns import CallOutcome, run_round

__all__ = ["ERROR_KINDS", "SYNTAXES", "TOOLS", "ParsedCall", "Sandbox", "Syntax", "Tool", "ToolError", "ToolFailure",
           "ToolLimits", "ToolResult", "ToolsConfig", "CallOutcome", "call_limits", "get_tool", "load_tools_config", "parse",
           "register_tool", "run_calls", "run_round", "stop_strings", "tool_names", "tool_specs"]
