"""The `workbench bench` commands: one module per part measured, each with `register(bench)` adding its
commands to the group (`benchmarks/cli.py`). Thin, as the library's commands are: they parse, call one
harness and print; heavy imports happen inside the commands so that `workbench --help` stays fast."""

MODULES = ["store", "engine", "allocators", "control", "app", "integrations", "badinput", "reliability", "guards",
           "shapes", "model", "tools", "episodes", "tool_use", "sdk", "inflight", "playground"]
"""In the order `workbench bench --help` lists their commands."""
