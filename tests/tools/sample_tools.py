"""Tools that misbehave, registered for the sandbox tests (each a few lines, as a user adds one). The
sandbox's process imports this module by name, as it does any tool's module."""

from __future__ import annotations

import os
import resource
import socket
import time

from workbench.tools import ToolError, ToolFailure, register_tool


@register_tool("sleep", description="Sleeps `seconds` (forever when absent), then says so.")
def sleep(arguments: dict) -> str:
    time.sleep(float(arguments.get("seconds", 10**6)))
    return "slept"


@register_tool("allocate", description="Allocates `gb` GiB.")
def allocate(arguments: dict) -> str:
    block = bytearray(int(arguments["gb"] * 2**30))
    return str(len(block))


@register_tool("spin", description="Burns CPU without end.")
def spin(arguments: dict) -> str:
    n = 0
    while True:
        n += 1


@register_tool("big_text", description="Returns `mb` MiB of text.")
def big_text(arguments: dict) -> str:
    return "y" * int(arguments["mb"] * 2**20)


@register_tool("raises", description="Raises.")
def raises(arguments: dict) -> str:
    raise KeyError("no such thing")


@register_tool("says_no", description="Refuses its argument.")
def says_no(arguments: dict) -> str:
    raise ToolError(f"says_no: {arguments.get('x')!r} is not allowed")


@register_tool("returns", description="Returns `what`: an int, bytes, None, or a string with a lone surrogate.")
def returns(arguments: dict):  # noqa: ANN201 - returning non-text is the point
    return {"int": 42, "bytes": b"\xff\xfe", "none": None, "surrogate": "ok \udcff"}[arguments["what"]]


@register_tool("writes", description="Tries to write a file at `path`.")
def writes(arguments: dict) -> str:
    with open(arguments["path"], "w") as f:
        f.write("written")
    return "wrote"


@register_tool("connects", description="Tries to open a TCP connection.")
def connects(arguments: dict) -> str:
    socket.create_connection(("127.0.0.1", int(arguments.get("port", 80))), timeout=1)
    return "connected"


@register_tool("whoami", description="The child's uid, limits and network interfaces (read, nothing audited).")
def whoami(arguments: dict) -> str:
    limits = {name: resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[0] for name in ("CPU", "FSIZE", "NPROC")}
    interfaces = ",".join(name for _, name in socket.if_nameindex())
    return f"uid={os.getuid()} cpu={limits['CPU']} fsize={limits['FSIZE']} nproc={limits['NPROC']} net={interfaces}"


@register_tool("forks", description="Tries to start a process with os.fork.")
def forks(arguments: dict) -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return "forked"


@register_tool("forges", description="Writes a forged result line to its own result pipe, then exits.")
def forges(arguments: dict) -> str:
    for fd in range(3, 64):
        try:
            os.write(fd, arguments["line"].encode() + b"\n")
        except OSError:
            continue
    os._exit(0)


CALLS_SEEN = [0]


@register_tool("probe", description="Says it is pure to be served by warm workers, but counts the calls its "
               "process served (to see the workers from outside), and can sleep, burn CPU, spin or allocate.",
               pure=True)
def probe(arguments: dict) -> str:
    CALLS_SEEN[0] += 1
    op = arguments.get("op", "count")
    if op == "sleep":
        time.sleep(10**6)
    elif op == "burn":  # past the workers' retirement CPU, well within the call's limit
        end = time.process_time() + 0.15
        while time.process_time() < end:
            pass
    elif op == "spin":
        while True:
            pass
    elif op == "alloc":
        bytearray(10 * 2**30)
    return str(CALLS_SEEN[0])


@register_tool("odd_failure", description="Ends its call with a failure kind that does not exist.")
def odd_failure(arguments: dict) -> str:
    raise ToolFailure("weird", "a kind of its own")


def late(arguments: dict) -> str:
    """Registered by a test after a sandbox started (tests/tools/test_tools_sandbox.py)."""
    return "late"
