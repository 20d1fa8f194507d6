"""Run tool calls in limited processes, several at once; every failure comes back as a result.

    from workbench.tools import Sandbox, ToolLimits

    with Sandbox(ToolLimits(wall_seconds=2.0)) as box:
        box.call("calculator", {"expression": "37*48"})        # ToolResult(text="1776", ...)
        box.call_many([("calculator", {"expression": "1/0"}),  # runs both at once
                       ("python", {"code": "print(2**100)"})])

The sandbox starts one process (`zygote.py`: the tools and the safe modules imported, the network
left) and that process forks a fresh child per call, with the limits of `guard.py`, or hands a pure
tool's call (the calculator's) to a warm worker behind the same walls (`workers.py`). A call that
hangs, allocates without end, floods its output or crashes costs only its own process; the sandbox
process answers for it and serves the next. If the sandbox process itself dies, the calls in flight come back
as "crashed" and the next call starts a new one.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Iterable, Sequence

from workbench.errors import WorkbenchError
from workbench.tools.base import TOOLS, ToolLimits, ToolResult
from workbench.tools.zygote import ENTRY

START_TIMEOUT_S = 60.0
"""How long the sandbox process may take to import and report ready."""

MAX_ARGUMENT_BYTES = 1 << 20
"""The largest call the sandbox takes (its arguments as UTF-8 JSON); a larger one is malformed."""

GRACE_S = 10.0
"""Beyond a call's wall-clock limit, how long the caller waits for the sandbox process to answer
before it gives the call up as "timeout" and replaces the process."""


class Sandbox:
    """Tool calls in limited child processes (module docstring). `parallel` children run at once;
    more calls wait their turn in the sandbox process. A pure tool's calls (the calculator) go to warm
    workers that serve many calls each (`warm=False`: a fresh child per call for every tool). `spares`
    children are kept forked and waiting for the other tools' calls (0, the default: each call forks
    its own when it arrives; spares measured slower on a busy machine, docs/tools.md)."""

    def __init__(self, limits: ToolLimits | None = None, *, parallel: int = 8, spares: int = 0,
                 warm: bool = True) -> None:
        if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= 256:
            raise WorkbenchError(f"tools.parallel must be an integer in [1, 256], got {parallel!r}")
        if isinstance(spares, bool) or not isinstance(spares, int) or not 0 <= spares <= 256:
            raise WorkbenchError(f"tools.spares must be an integer in [0, 256], got {spares!r}")
        self.limits = limits or ToolLimits()
        self.parallel = parallel
        self.spares = spares
        self.warm = warm
        self.network_isolated = False
        """Whether the sandbox process left the network namespace (False: the audit hook alone)."""
        self.root = False
        """Whether the children run as root before dropping to `nobody`."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending: dict[int, tuple[Future[ToolResult], ToolLimits]] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one request line at a time, whichever thread submits
        self._ids = itertools.count()

    # -- the sandbox process ------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The sandbox process's id (None before it starts)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> "Sandbox":
        """Start the sandbox process (calls start it when needed); returns self."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._spawn()
        return self

    def _spawn(self) -> None:
        tools = [TOOLS.get(n) for n in TOOLS.names()]
        modules = sorted({t.module for t in tools} - {"__main__"})
        late = [{"name": t.name, "module": t.module, "qualname": t.fn.__qualname__, "description": t.description,
                 "parameters": t.parameters, "main_argument": t.main_argument, "pure": t.pure}
                for t in tools if t.module != "__main__"]
        spec = {"modules": modules, "tools": late, "path": [p for p in sys.path if p], "parallel": self.parallel,
                "spares": self.spares, "warm": self.warm}
        errors = tempfile.TemporaryFile()  # read only when it fails to start; a file never blocks it
        proc = subprocess.Popen([sys.executable, "-c", ENTRY, json.dumps(spec)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, start_new_session=True)
        ready: dict[str, Any] = {}
        timer = threading.Timer(START_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            ready = json.loads(line) if line else {}
        except ValueError:
            ready = {}
        finally:
            timer.cancel()
        if not ready.get("ready"):
            _kill_group(proc)
            proc.wait()
            errors.seek(0)
            err = errors.read().decode(errors="replace")[-2000:]
            errors.close()
            raise WorkbenchError(f"the tool sandbox did not start: {err.strip() or 'no output'}")
        errors.close()
        self.network_isolated = bool(ready["network_isolated"])
        self.root = bool(ready["root"])
        self._proc = proc
        threading.Thread(target=self._read, args=(proc,), name="tool-sandbox-reader", daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand each answer to its call; when the process ends, fail the calls still in flight."""
        for line in proc.stdout:  # type: ignore[union-attr]
            try:
                reply = json.loads(line)
                result = ToolResult(**reply["result"])
            except (ValueError, TypeError, KeyError):
                continue
            with self._lock:
                entry = self._pending.pop(reply.get("id"), None)
            if entry is not None:
                entry[0].set_result(result)
        proc.wait()
        with self._lock:
            lost = [e for e in self._pending.values()]
            self._pending.clear()
            if self._proc is proc:
                self._proc = None
        for future, limits in lost:
            if not future.done():
                future.set_result(ToolResult.failure("crashed", "the tool sandbox's process ended during the call",
                                                     max_chars=limits.max_result_chars))

    def close(self) -> None:
        """Stop the sandbox process (its running children are killed)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                _kill_group(proc)
                proc.wait()

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls --------------------------------------------------------------------------------------

    def submit(self, name: str, arguments: Any, limits: ToolLimits | None = None) -> Future[ToolResult]:
        """Start one call; its future's result is a ToolResult (never an exception)."""
        limits = limits or self.limits
        future: Future[ToolResult] = Future()
        refusal = _refuse(name, arguments, limits)
        if refusal is not None:
            future.set_result(refusal)
            return future
        request = {"tool": name, "arguments": arguments, "limits": _plain(limits)}
        for attempt in range(2):  # a sandbox process that died since the last call is replaced once
            self.start()
            with self._lock:
                proc = self._proc
                call_id = next(self._ids)
                self._pending[call_id] = (future, limits)
            try:
                with self._write_lock:
                    proc.stdin.write(json.dumps({**request, "id": call_id}).encode("ascii") + b"\n")  # type: ignore
                    proc.stdin.flush()  # type: ignore[union-attr]
                return future
            except (OSError, AttributeError, ValueError):
                with self._lock:
                    self._pending.pop(call_id, None)
        future.set_result(ToolResult.failure("crashed", "the tool sandbox could not be reached",
                                             max_chars=limits.max_result_chars))
        return future

    def wait(self, future: Future[ToolResult], limits: ToolLimits | None = None) -> ToolResult:
        """The result of a submitted call; a sandbox process that does not answer within the call's
        wall-clock limit plus GRACE_S is replaced and the call comes back as "timeout"."""
        limits = limits or self.limits
        try:
            return future.result(timeout=limits.wall_seconds + GRACE_S)
        except FutureTimeout:
            with self._lock:
                proc = self._proc
            if proc is not None:
                _kill_group(proc)
            return ToolResult.failure("timeout", "the tool sandbox did not answer in time",
                                      max_chars=limits.max_result_chars)

    def call(self, name: str, arguments: Any, limits: ToolLimits | None = None) -> ToolResult:
        """Run one call and return its result."""
        return self.wait(self.submit(name, arguments, limits), limits)

    def call_many(self, calls: Iterable[tuple[str, Any]], limits: ToolLimits | None = None) -> list[ToolResult]:
        """Run `calls` ((name, arguments) pairs) at once, `parallel` at a time; results in order."""
        futures = [self.submit(name, arguments, limits) for name, arguments in calls]
        return [self.wait(f, limits) for f in futures]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the sandbox's process and its calls' children: it leads a process group of its own
    (`start_new_session`), which they are in. Each child also dies with it (guard layer 7); this takes
    them at once, and where the kernel has no parent-death signal."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            pass
    proc.kill()


def _plain(limits: ToolLimits) -> dict[str, Any]:
    return {"cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
            "wall_seconds": limits.wall_seconds, "max_result_chars": limits.max_result_chars}


def _refuse(name: Any, arguments: Any, limits: ToolLimits) -> ToolResult | None:
    """The result for a call refused before it runs (unknown tool, arguments that are not a table
    of JSON values, text that is not UTF-8), or None."""
    cut = limits.max_result_chars
    if not isinstance(name, str) or name not in TOOLS:
        return ToolResult.failure("unknown_tool", f"unknown tool {name!r}; tools: {', '.join(TOOLS.names())}",
                                  max_chars=cut)
    if not isinstance(arguments, dict):
        return ToolResult.failure("malformed", f"the arguments of {name} must be a JSON object, got "
                                  f"{type(arguments).__name__}", max_chars=cut)
    try:
        size = len(json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except UnicodeEncodeError as exc:
        return ToolResult.failure("non_utf8", f"the arguments of {name} are not valid UTF-8 ({exc.reason})",
                                  max_chars=cut)
    except (TypeError, ValueError) as exc:
        return ToolResult.failure("malformed", f"the arguments of {name} are not JSON: {exc}", max_chars=cut)
    if size > MAX_ARGUMENT_BYTES:
        return ToolResult.failure("malformed", f"the arguments of {name} take {size} bytes (at most "
                                  f"{MAX_ARGUMENT_BYTES})", max_chars=cut)
    return None


def run_calls(calls: Sequence[tuple[str, Any]], limits: ToolLimits | None = None, *,
              parallel: int = 8) -> list[ToolResult]:
    """Run `calls` in a sandbox started for them (a script's one-off; the engine keeps one open)."""
    with Sandbox(limits, parallel=parallel) as box:
        return box.call_many(calls)


__all__ = ["Sandbox", "run_calls"]
