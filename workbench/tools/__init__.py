"""Tools an episode may call: a registry, and a sandbox that runs each call in a limited subprocess;
a failure is a result, never a crash (docs/tools.md).

    from workbench.tools import Sandbox
    with Sandbox() as box:
        box.call("calculator", {"expression": "37*48"}).text   # "1776"

- `base`: `ToolResult`, `ToolLimits`, the registry (`register_tool`, `get_tool`), `ToolError`.
- `calculator`, `python_tool`: the built-in tools.
- `guard`: the walls put up around each call; `zygote`: the sandbox's process; `sandbox`: its client.
- `parsers`: finding a call in decoded text (`<calc>...</calc>`, `<tool_call>{...}</tool_call>`).
- `config`: the `[tools]` section (not yet mounted in the run config).
"""

from workbench.tools import calculator, python_tool  # noqa: F401 - registers the built-in tools
from workbench.tools.base import (ERROR_KINDS, TOOLS, Tool, ToolError, ToolFailure, ToolLimits, ToolResult,
                                  call_limits, get_tool, register_tool, tool_names)
from workbench.tools.sandbox import Sandbox, run_calls

__all__ = ["ERROR_KINDS", "TOOLS", "Sandbox", "Tool", "ToolError", "ToolFailure", "ToolLimits", "ToolResult",
           "call_limits", "get_tool", "register_tool", "run_calls", "tool_names"]
