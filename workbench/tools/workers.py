"""Warm workers for pure tools (`Tool.pure`, the calculator): processes forked from the sandbox's
process that put up their walls once and then serve many calls each, one at a time. A call handed to
a waiting worker costs no fork, no exit and no start-up penalty from the scheduler (a new process
waits its turn behind the running ones; a sleeping one that wakes does not).

1. A worker serves calls with the limits it was made with; a call with other limits gets its own
   worker (or a fresh child, when the worker cap is reached: see zygote.py).
2. The CPU limit is the process's: a worker retires (says so in its answer, then exits) once it has
   used `RETIRE_CPU_S` of CPU or served `RETIRE_CALLS` calls, so every call it serves has at least
   `cpu_seconds - RETIRE_CPU_S` of CPU before SIGXCPU.
3. A call that times out, floods its output or crashes ends its worker (killed and reaped); the next
   call gets a new one. Memory freed after a call is the worker's again; a MemoryError is a result.
4. Only a pure tool may run here: nothing a call does can be seen by the next one. Every other tool
   gets a fresh child per call.
"""

from __future__ import annotations

import json
import os
import resource
from dataclasses import dataclass
from typing import Any

from workbench.tools import guard
from workbench.tools.base import ToolLimits, set_call_limits

RETIRE_CPU_S = 0.1
"""CPU seconds after which a worker exits (its calls keep at least cpu_seconds - this)."""
RETIRE_CALLS = 2000
"""Calls after which a worker exits (bounds what heap fragmentation can accumulate)."""


@dataclass
class Worker:
    """A warm worker, as the sandbox's process sees it."""

    pid: int
    request_fd: int
    result_fd: int
    limits: ToolLimits
    call: Any = None
    """The call it is serving (a zygote.Running), or None while it waits."""


def fork_with_pipes(child) -> tuple[int, int, int]:  # noqa: ANN001 - child(request_r, result_w), never returns
    """Fork a child that runs `child(request_r, result_w)` (it must end with `os._exit`); in the parent, the
    child's pid, the request pipe's write end and the result pipe's read end. OSError, with every descriptor
    closed, when no process or pipe can be had."""
    request_r, request_w = os.pipe()
    try:
        result_r, result_w = os.pipe()
    except OSError:
        os.close(request_r)
        os.close(request_w)
        raise
    try:
        pid = os.fork()
    except OSError:
        for fd in (request_r, request_w, result_r, result_w):
            os.close(fd)
        raise
    if pid == 0:
        child(request_r, result_w)
    os.close(request_r)
    os.close(result_w)
    return pid, request_w, result_r


def fork_worker(limits: ToolLimits, serve_one) -> Worker:  # noqa: ANN001 - zygote.call_tool, passed in
    """A new worker with `limits`, serving requests with `serve_one(name, arguments, limits)`
    (OSError when no process or pipe can be had)."""
    pid, request_w, result_r = fork_with_pipes(lambda r, w: _serve(r, w, limits, serve_one))
    return Worker(pid, request_w, result_r, limits)


def _serve(request_fd: int, result_fd: int, limits: ToolLimits, serve_one) -> None:  # noqa: ANN001
    """In the worker: walls up once, then one request line in, one result line out, until its input
    ends or it retires (never returns)."""
    code = 0
    try:
        low, high = sorted((request_fd, result_fd))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        guard.enter(limits.cpu_seconds, limits.memory_mb)
        set_call_limits(limits)
        buffer, served = b"", 0
        while True:
            while b"\n" not in buffer:
                chunk = os.read(request_fd, 1 << 16)
                if not chunk:
                    os._exit(0)
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            req = json.loads(line)
            result = serve_one(req["tool"], req["arguments"], limits)
            served += 1
            usage = resource.getrusage(resource.RUSAGE_SELF)
            retire = served >= RETIRE_CALLS or usage.ru_utime + usage.ru_stime >= RETIRE_CPU_S
            line = json.dumps({**result.to_dict(), "retire": retire}).encode("ascii") + b"\n"
            view = memoryview(line)
            while view:
                view = view[os.write(result_fd, view):]
            if retire:  # said so in its answer: the sandbox hands it nothing more
                break
    except BaseException:  # noqa: BLE001 - no result written: the sandbox reports "crashed"
        code = 3
    os._exit(code)


def hand_over(worker: Worker, req: dict[str, Any]) -> bool:
    """Write `req` to the worker; False when its pipe is gone (it died waiting)."""
    try:
        view = memoryview(json.dumps(req).encode("ascii") + b"\n")
        while view:
            view = view[os.write(worker.request_fd, view):]
        return True
    except OSError:
        return False
