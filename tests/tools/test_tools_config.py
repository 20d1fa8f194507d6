"""The `[tools]` section and the registry: bad values refused at load naming the field; a user's tool
registered in a few lines runs under the same limits."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
import sample_tools  # noqa: F401 - registers the tests' tools (sleep, ...)

from workbench.errors import ConfigError
from workbench.tools import (Sandbox, ToolLimits, ToolsConfig, get_tool, load_tools_config, register_tool, tool_names,
                             tool_specs)

TOML = """
[tools]
enabled = ["calculator", "python"]
syntax = "hermes"
max_calls = 6

[tools.limits]
cpu_seconds = 3
memory_mb = 512
wall_seconds = 2.5
max_result_chars = 300
"""


def test_a_full_section_loads():
    config = load_tools_config(tomllib.loads(TOML)["tools"])
    assert config == ToolsConfig(enabled=("calculator", "python"), syntax="hermes", max_calls=6,
                                 limits=ToolLimits(cpu_seconds=3, memory_mb=512, wall_seconds=2.5,
                                                   max_result_chars=300))
    assert load_tools_config(None) == ToolsConfig()


@pytest.mark.parametrize("data,message", [
    ({"enabled": ["calculator", "nosuch"]}, "tools.enabled[1]: unknown tool 'nosuch'; registered tools:"),
    ({"enabled": []}, "tools.enabled: a non-empty list"),
    ({"enabled": "calculator"}, "tools.enabled: a non-empty list"),
    ({"enabled": ["calculator", "calculator"]}, "tools.enabled[1]: 'calculator' is listed twice"),
    ({"enabled": ["python"]}, "tools.syntax: 'calc' calls the calculator"),
    ({"syntax": "xml"}, "tools.syntax must be one of calc, hermes"),
    ({"max_calls": 65}, "tools.max_calls must be an integer in [0, 64]"),
    ({"parallel": 0}, "tools.parallel must be an integer in [1, 256]"),
    ({"limits": {"cpu_seconds": 0}}, "tools.limits.cpu_seconds must be an integer in [1, 600]"),
    ({"limits": {"cpu_seconds": 1.5}}, "tools.limits.cpu_seconds: 1.5 is not allowed (must be an integer)"),
    ({"limits": {"memory_mb": 8}}, "tools.limits.memory_mb must be an integer in [16, 65536]"),
    ({"limits": {"wall_seconds": 0}}, "tools.limits.wall_seconds must be in [0.01, 3600]"),
    ({"limits": {"wall_seconds": float("inf")}}, "tools.limits.wall_seconds must be a finite number"),
    ({"limits": {"max_result_chars": 0}}, "tools.limits.max_result_chars must be an integer in [1, 1000000]"),
    ({"limits": {"disk_mb": 1}}, "tools.limits.disk_mb: unknown field"),
    ({"tool": ["calculator"]}, "tools.tool: unknown field"),
    ({"result_template": "<|im_start|>user\n<|im_end|>"}, "tools.result_template: text holding {result} exactly once"),
    ({"result_template": "{result}{result}"}, "tools.result_template: text holding {result} exactly once"),
    ({"result_template": 3}, "tools.result_template"),
])
def test_bad_sections_are_refused_naming_the_field(data, message):
    with pytest.raises(ConfigError) as info:
        load_tools_config(data)
    assert str(info.value).startswith(message), str(info.value)


def test_registry():
    assert {"calculator", "python", "sleep"} <= set(tool_names())
    assert get_tool("calculator").main_argument == "expression"
    assert get_tool("sleep").module == "sample_tools"
    with pytest.raises(ConfigError, match="unknown tool 'nosuch'; valid names: allocate, big_text, calculator"):
        get_tool("nosuch")
    with pytest.raises(ValueError, match="tool 'calculator' is already registered"):
        register_tool("calculator")(lambda arguments: "")


def test_tool_specs_for_a_chat_template():
    (calc,) = tool_specs(["calculator"])
    assert calc["type"] == "function" and calc["function"]["name"] == "calculator"
    assert calc["function"]["parameters"]["required"] == ["expression"]
    assert calc["function"]["parameters"]["properties"]["expression"]["type"] == "string"
    with pytest.raises(ConfigError, match="unknown tool 'nosuch'"):
        tool_specs(["nosuch"])


def test_a_user_tool_runs_under_the_same_limits():
    """`sample_tools.sleep` is four lines; the limits that stop the built-in tools stop it."""
    config = load_tools_config({"enabled": ["calculator", "sleep"], "limits": {"wall_seconds": 0.5}})
    with Sandbox(config.limits, parallel=config.parallel) as box:
        assert box.call("sleep", {"seconds": 0}).text == "slept"
        stopped = box.call("sleep", {})
        assert (stopped.kind, stopped.error) == ("timeout", True)
        assert box.call("python", {"code": "import time"}).kind == "refused"  # the built-in tool's own rule


def test_a_tool_module_the_sandbox_cannot_import_stops_the_start(tmp_path):
    """In its own process (the registry is global): a tool whose module is gone from the path."""
    (tmp_path / "gone_tool.py").write_text(
        "from workbench.tools import register_tool\n@register_tool('gone')\ndef gone(arguments):\n    return 'x'\n")
    script = ("import sys\nsys.path.insert(0, sys.argv[1])\nimport gone_tool\nsys.path.remove(sys.argv[1])\n"
              "from workbench.tools import Sandbox\nSandbox().start()\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 1
    assert "WorkbenchError: the tool sandbox did not start" in out.stderr
    assert "No module named 'gone_tool'" in out.stderr


def test_a_result_template_wraps_the_syntax_result():
    """A chat model's tool turn: the template's text either side of the syntax's result, the rest as is
    (braces other than {result} are not a format field)."""
    turn = "<|im_end|>\n<|im_start|>user\n{result}<|im_end|>\n<|im_start|>assistant\n"
    config = load_tools_config({"syntax": "hermes", "result_template": turn})
    assert config.result_text("<tool_response>1776</tool_response>") == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>1776</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert load_tools_config({"result_template": "{x} {result} }"}).result_text("7") == "{x} 7 }"
    assert ToolsConfig().result_text("<result>7</result>") == "<result>7</result>"
