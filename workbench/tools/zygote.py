"""The sandbox's process: it imports the tools and the safe modules once, leaves the network (a new
network namespace, where the kernel allows), then forks one child per call. The child puts up its
walls (`guard.enter`), runs the tool and writes its result to a pipe; the zygote enforces the
wall-clock limit, caps what it reads, reaps the child and answers. A fork of this small process takes
about a millisecond, so a call costs a few, and every call starts clean: no state, no CPU time used,
no memory held over from the one before. A pure tool's calls (the calculator's) go instead to warm
workers (`workers.py`): forked the same way, walls up once, many calls each.

Between calls the zygote may keep children forked and waiting (`spares`, 0 by default): a call is
handed to one that is ready, so its latency holds no fork; a replacement is forked once the zygote is
idle. (On a busy machine that measured slower, not faster: docs/tools.md.)

Protocol (one JSON object a line): started as `python -c "<ENTRY>" SPEC` (SPEC: {"modules", "path",
"parallel", "spares", "warm"}), it answers {"ready", "network_isolated", "root", "tools"}; then each
request {"id", "tool", "arguments", "limits"} gets {"id", "result"} (a `ToolResult` as a dict) when
its call ends. End of input ends the zygote (its running children are killed).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import select
import selectors
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from workbench.tools import guard
from workbench.tools.base import (ERROR_KINDS, TOOLS, Tool, ToolError, ToolFailure, ToolLimits, ToolResult,
                                  set_call_limits, truncate)
from workbench.tools.workers import Worker, fork_with_pipes, fork_worker, hand_over

ENTRY = "from workbench.tools.zygote import main; main()"


@dataclass
class Running:
    """One call whose child is running."""

    id: Any
    pid: int
    fd: int
    limits: ToolLimits
    started: float
    data: bytearray = field(default_factory=bytearray)
    worker: Worker | None = None
    """The warm worker serving it (None: a child of its own)."""


def result_of(value: Any, limits: ToolLimits) -> ToolResult:
    """The result for a tool's return value: text cut to the limit, or a non_text / non_utf8 error."""
    if not isinstance(value, str):
        return ToolResult.failure("non_text", f"the tool returned {type(value).__name__}, not text",
                                  max_chars=limits.max_result_chars)
    text, cut = truncate(value, limits.max_result_chars)  # only what the model will see is checked
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ToolResult.failure("non_utf8", f"the tool's text is not valid UTF-8 ({exc.reason} at {exc.start})",
                                  max_chars=limits.max_result_chars)
    return ToolResult(text=text, truncated=cut)


def call_tool(name: str, arguments: Any, limits: ToolLimits) -> ToolResult:
    """Run the tool `name` here (inside the child, behind its walls); every failure is a result."""
    fail = lambda kind, text: ToolResult.failure(kind, text, max_chars=limits.max_result_chars)  # noqa: E731
    if name not in TOOLS:  # registered in the caller after this process started
        return fail("unknown_tool", f"unknown tool {name!r} in the sandbox; tools: {', '.join(TOOLS.names())}")
    try:
        return result_of(TOOLS.get(name).fn(arguments), limits)
    except ToolFailure as exc:
        return fail(exc.kind if exc.kind in ERROR_KINDS else "raised", str(exc.text))
    except ToolError as exc:
        return fail("tool_error", str(exc))
    except SyntaxError as exc:
        return fail("syntax", f"SyntaxError: {exc.msg} (line {exc.lineno}, column {exc.offset})")
    except MemoryError:
        return fail("memory", f"MemoryError: the call needed more than {limits.memory_mb} MiB")
    except guard.Refused as exc:
        return fail("refused", str(exc))
    except BaseException as exc:  # noqa: BLE001 - the tool's own failure is a result
        return fail("raised", f"{type(exc).__name__}: {exc}")


@dataclass
class Spare:
    """A forked child waiting for its call on `request_fd` (the zygote writes the request, then closes
    it); it answers on `result_fd`."""

    pid: int
    request_fd: int
    result_fd: int


def _child(request_fd: int, write_fd: int) -> None:
    """In the forked child: wait for the request, walls up, run, write the result, exit (never
    returns). End of input without a request (the zygote ended) exits quietly."""
    code = 0
    try:
        low, high = sorted((request_fd, write_fd))  # close the rest: other calls' pipes, the zygote's own
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        chunks = []
        while chunk := os.read(request_fd, 1 << 16):
            chunks.append(chunk)
        os.close(request_fd)
        if not chunks:
            os._exit(0)
        req = json.loads(b"".join(chunks))
        limits = ToolLimits(**req["limits"])
        guard.enter(limits.cpu_seconds, limits.memory_mb)
        set_call_limits(limits)
        result = call_tool(req["tool"], req["arguments"], limits)
        payload = json.dumps(result.to_dict()).encode("ascii") + b"\n"
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001 - no result written: the zygote reports "crashed"
        code = 3
    os._exit(code)


def _fork() -> Spare:
    """A new child waiting for its call (OSError when no process or pipe can be had)."""
    return Spare(*fork_with_pipes(_child))


def _start(req: dict[str, Any], sel: selectors.BaseSelector, spares: deque[Spare], workers: list[Worker],
           max_workers: int) -> Running | None:
    """Hand `req` to a warm worker (a pure tool), else to a spare child or a new one; the call, running."""
    try:
        limits = ToolLimits(**req["limits"])
    except Exception as exc:  # noqa: BLE001 - a bad request is answered, never fatal
        _reply(req.get("id"), ToolResult.failure("malformed", f"bad limits: {exc}"))
        return None
    started = time.monotonic()
    if req.get("tool") in TOOLS and TOOLS.get(req["tool"]).pure:
        call = _start_on_worker(req, limits, started, sel, workers, max_workers)
        if call is not None:
            return call
    try:
        child = spares.popleft() if spares else _fork()
    except OSError as exc:  # out of processes or memory: this call fails, the zygote serves on
        _reply(req.get("id"), ToolResult.failure("crashed", f"no process for the call: {exc}"))
        return None
    try:
        view = memoryview(json.dumps(req).encode("ascii"))
        while view:
            view = view[os.write(child.request_fd, view):]
    except OSError:
        pass  # the child died waiting: it is reaped below and the call reported "crashed"
    os.close(child.request_fd)
    os.set_blocking(child.result_fd, False)
    call = Running(req.get("id"), child.pid, child.result_fd, limits, started)
    sel.register(child.result_fd, selectors.EVENT_READ, call)
    return call


def _start_on_worker(req: dict[str, Any], limits: ToolLimits, started: float, sel: selectors.BaseSelector,
                     workers: list[Worker], max_workers: int) -> Running | None:
    """Hand `req` to a waiting worker with the same limits (a new one if none waits and fewer than
    `max_workers` exist, retiring a waiting one with other limits to make room); None: no worker can
    take it (the caller forks a child instead)."""
    worker = next((w for w in workers if w.call is None and w.limits == limits), None)
    if worker is None:
        idle = [w for w in workers if w.call is None]
        if len(workers) >= max_workers:
            if not idle:
                return None
            _retire(idle[0], sel, workers)
        try:
            worker = fork_worker(limits, call_tool)
        except OSError:
            return None
        os.set_blocking(worker.result_fd, False)
        sel.register(worker.result_fd, selectors.EVENT_READ, worker)
        workers.append(worker)
    if not hand_over(worker, req):
        _retire(worker, sel, workers)
        return None
    worker.call = Running(req.get("id"), worker.pid, worker.result_fd, limits, started, worker=worker)
    return worker.call


def _retire(worker: Worker, sel: selectors.BaseSelector, workers: list[Worker]) -> None:
    """End a worker: its pipes closed, its process killed and reaped, out of `workers`."""
    sel.unregister(worker.result_fd)
    os.close(worker.result_fd)
    os.close(worker.request_fd)
    _kill(worker.pid)
    os.waitpid(worker.pid, 0)
    workers.remove(worker)


def _reap(call: Running, *, kill: bool) -> tuple[int, float]:
    """Wait for the child (killing it first when `kill`, or when it lingers 0.2 s after closing its
    pipe); its wait status and CPU seconds."""
    if kill:
        _kill(call.pid)
    deadline = time.monotonic() + 0.2
    while True:
        pid, status, usage = os.wait4(call.pid, 0 if kill else os.WNOHANG)
        if pid:
            return status, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            kill = True
            _kill(call.pid)
        else:
            time.sleep(0.001)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _finish(call: Running, sel: selectors.BaseSelector, workers: list[Worker], kind: str | None = None) -> None:
    """Answer `call`: with its child's result, or with the failure `kind` (timeout, output), or with
    what its exit status says (cpu, crashed). A worker that answered waits for its next call (unless it
    retires); one that failed is ended like a child."""
    worker = call.worker
    result, retire = _parse_result(call.data) if kind is None else (None, False)
    limits = call.limits
    if result is not None:  # answer first, then reap: the caller does not wait for the child's exit
        _reply(call.id, _final(result, time.monotonic() - call.started, limits))
        if worker is None:
            sel.unregister(call.fd)
            os.close(call.fd)
            _reap(call, kill=True)
        elif retire:
            _retire(worker, sel, workers)
        else:
            worker.call = None
        return
    sel.unregister(call.fd)
    os.close(call.fd)
    if worker is not None:
        os.close(worker.request_fd)
        workers.remove(worker)
    status, cpu = _reap(call, kill=kind is not None)
    seconds = time.monotonic() - call.started
    if kind == "timeout":
        result = ToolResult.failure("timeout", f"the call ran past its wall-clock limit ({limits.wall_seconds} s)")
    elif kind == "output":
        result = ToolResult.failure("output", f"the call wrote more than {limits.max_output_chars} characters")
    elif result is None and os.WIFSIGNALED(status) and (os.WTERMSIG(status) == signal.SIGXCPU
                                                        or cpu >= limits.cpu_seconds - 0.05):
        result = ToolResult.failure("cpu", f"the call ran past its CPU-time limit ({limits.cpu_seconds} s)")
    elif result is None:
        how = f"signal {_signal_name(os.WTERMSIG(status))}" if os.WIFSIGNALED(status) else \
            f"exit code {os.WEXITSTATUS(status)}"
        result = ToolResult.failure("crashed", f"the call's process ended without a result ({how})")
    _reply(call.id, _final(result, seconds, limits))


def _parse_result(data: bytes) -> tuple[ToolResult | None, bool]:
    """The result a child wrote (None when it wrote none, or something that is not one), and whether
    it is a worker retiring after it."""
    if not data.endswith(b"\n"):
        return None, False
    try:
        fields = json.loads(data)
        retire = fields.pop("retire", False) is True
        result = ToolResult(**fields)
    except (ValueError, TypeError, AttributeError):
        return None, False
    ok = (isinstance(result.text, str) and isinstance(result.error, bool) and isinstance(result.truncated, bool)
          and result.kind in ("ok", *ERROR_KINDS) and result.error == (result.kind != "ok"))
    return (result, retire) if ok else (None, False)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _final(result: ToolResult, seconds: float, limits: ToolLimits) -> ToolResult:
    """`result` with the call's seconds, its text cut to the limit."""
    text, cut = truncate(result.text, limits.max_result_chars)
    return ToolResult(text=text, error=result.error, kind=result.kind, seconds=round(seconds, 6),
                      truncated=result.truncated or cut)


def _reply(call_id: Any, result: ToolResult) -> None:
    line = json.dumps({"id": call_id, "result": result.to_dict()}).encode("ascii") + b"\n"
    view = memoryview(line)
    while view:
        view = view[os.write(1, view):]


def serve(parallel: int, n_spares: int, warm: bool = True) -> None:
    """The zygote's loop (module docstring): requests from stdin, at most `parallel` calls at once,
    answers on stdout. A pure tool's call goes to a warm worker (at most `parallel` of them; none
    unless `warm`), any other call to a child of its own. When idle it keeps `n_spares` children
    forked and waiting, so that such a call's latency holds no fork."""
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, None)
    buffer, queue, running, spares, workers = b"", deque(), {}, deque(), []
    while True:
        soonest = min((c.started + c.limits.wall_seconds for c in running.values()), default=None)
        timeout = None if soonest is None else max(0.0, soonest - time.monotonic())
        for key, _ in sel.select(timeout):
            call = key.data
            if call is None:  # a request (or the end of input)
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    for pid in [c.pid for c in running.values()] + [w.pid for w in [*spares, *workers]]:
                        _kill(pid)
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                queue.extend(json.loads(line) for line in lines if line.strip())
                continue
            if isinstance(call, Worker):
                if call.call is None:  # a waiting worker's pipe: it ended, or wrote out of turn
                    _retire(call, sel, workers)
                    continue
                call = call.call
            chunk = os.read(call.fd, 1 << 16)
            call.data += chunk
            too_much = len(call.data) > 12 * call.limits.max_result_chars + 4096
            if not chunk or too_much or call.data.endswith(b"\n"):  # ended, flooding, or a whole result
                del running[call.fd]
                _finish(call, sel, workers, "output" if too_much else None)
        now = time.monotonic()
        for c in [c for c in running.values() if now >= c.started + c.limits.wall_seconds]:
            del running[c.fd]
            _finish(c, sel, workers, "timeout")
        while queue and len(running) < parallel:
            call = _start(queue.popleft(), sel, spares, workers, parallel if warm else 0)
            if call is not None:
                running[call.fd] = call
        while not queue and len(spares) < n_spares and not _readable(0):
            try:
                spares.append(_fork())
            except OSError:
                break


def _readable(fd: int) -> bool:
    """Whether `fd` has input waiting (a request arrived while spares were being forked)."""
    return bool(select.select([fd], [], [], 0)[0])


def main() -> None:
    """The zygote process (module docstring)."""
    spec = json.loads(sys.argv[1])
    sys.path[:0] = [p for p in spec["path"] if p not in sys.path]
    for name in guard.SAFE_MODULES:
        importlib.import_module(name)
    import workbench.tools  # noqa: F401 - the built-in tools

    for name in spec["modules"]:
        importlib.import_module(name)
    _register_late(spec.get("tools", []))
    isolated = guard.unshare_network()
    guard.watch_from(os.getpid())  # every call's child dies with this process
    gc.collect()
    gc.freeze()  # the children's collector leaves the zygote's objects (and their pages) alone
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a dead child's pipe raises BrokenPipeError, never kills
    ready = {"ready": True, "network_isolated": isolated, "root": os.getuid() == 0, "tools": TOOLS.names()}
    _reply_line(ready)
    serve(int(spec["parallel"]), int(spec.get("spares", 0)), bool(spec.get("warm", True)))


def _register_late(tools: list[dict[str, Any]]) -> None:
    """Register the caller's tools that importing their modules did not register (a module-level
    function registered by a call, not a decorator); one that cannot be found by its module and
    qualified name (a lambda, a nested function) stays unknown here."""
    for spec in tools:
        if spec["name"] in TOOLS or "<" in spec["qualname"]:
            continue
        fn: Any = sys.modules.get(spec["module"])
        for part in spec["qualname"].split("."):
            fn = getattr(fn, part, None)
        if callable(fn):
            TOOLS.add(spec["name"], Tool(spec["name"], fn, spec["description"], spec["parameters"],
                                         spec["main_argument"], spec["pure"]))


def _reply_line(obj: dict[str, Any]) -> None:
    os.write(1, json.dumps(obj).encode("ascii") + b"\n")
