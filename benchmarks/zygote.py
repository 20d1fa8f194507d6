"""A zygote: a process that imports the workbench (and torch) once, then forks one child per command,
so that each of many short `workbench ...` commands starts in milliseconds instead of 1-3 s of imports
while still being its own process (own session, exit code, stdout and stderr; a hang is killed with its
session, a crash is its own). Used by the bad-input corpus (`benchmarks/badinput.py`).

The zygote serves whatever entry point its process is started with (`zygote(main)`); it never imports
the command line itself: `Zygote` starts `python -c "<ENTRY>"`, a program that imports the CLI's `main`
and hands it over, as `python -m workbench.cli` would run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from workbench.errors import WorkbenchError

PRELOAD = ("torch", "polars", "duckdb", "pyarrow.parquet", "workbench.config",
           "workbench.allocators", "workbench.algorithms", "workbench.store", "workbench.tasks",
           "workbench.control", "math_verify")
"""Modules a zygote imports once, so that each forked case starts in milliseconds instead of seconds."""


ENTRY = "from workbench.cli import main; from benchmarks.zygote import zygote; zygote(main)"
"""The zygote process's program: the `workbench` command's entry point, served."""


def zygote(main: Callable[[], None]) -> None:
    """Serve cases on stdin/stdout (one JSON object a line): for each `{"args", "out", "err"}`, fork a
    child that runs `main()` with `sys.argv = ["workbench", *args]`, exactly as the `workbench` entry
    point does (own session, stdin /dev/null, stdout and stderr to the given files, the request's
    `env` applied to its environment: a value of null unsets the variable; an uncaught
    exception prints its traceback and exits 1), reply `{"pid"}` at once and `{"exit"}` when it ends
    (negative: killed by that signal). The child is a real process: a hang is killed by its session, a
    crash is its own."""
    import importlib
    import json

    for name in PRELOAD:
        importlib.import_module(name)
    extra = os.environ.get("WORKBENCH_BADINPUT_PATH")
    if extra:
        sys.path.insert(0, extra)
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the case
            code = 1
            try:
                os.setsid()
                null = os.open(os.devnull, os.O_RDONLY)
                out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(null, 0)
                os.dup2(out, 1)
                os.dup2(err, 2)
                sys.stdin = open(0, closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                sys.argv = ["workbench", *req["args"]]
                for key, value in (req.get("env") or {}).items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                if os.environ.get("WORKBENCH_BADINPUT_DEBUG"):
                    import faulthandler

                    faulthandler.dump_traceback_later(float(os.environ["WORKBENCH_BADINPUT_DEBUG"]))
                try:
                    main()
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:  # noqa: BLE001 - what Python itself does with an uncaught exception
                    import traceback

                    traceback.print_exc()
                    code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"exit": code}) + "\n")
        sys.stdout.flush()


class Zygote:
    """One zygote process and the cases it runs, one at a time."""

    def __init__(self, env: dict[str, str], cwd: Path, entry: str = ENTRY):
        """`entry`: the zygote's program (default: the `workbench` command's, `ENTRY`)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", entry],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def wait_ready(self) -> None:
        """Block until the zygote has imported what it preloads (seconds; not counted in any case)."""
        import json

        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            raise WorkbenchError("a zygote process (which forks the bad-input corpus's cases or the chaos "
                                 "bench's engine processes) failed to start")

    def run(self, args: list[str], out: Path, err: Path, timeout_s: float,
            env: dict[str, str | None] | None = None) -> tuple[int | None, bool]:
        """(exit code, timed out) of `workbench <args>` run in a forked child (`env`: changes to its
        environment, None unsetting a variable). Past `timeout_s` its session is killed (SIGKILL)."""
        import json
        import queue
        import threading

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"args": args, "out": str(out), "err": str(err), "env": env or {}}) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        box: queue.Queue = queue.Queue()
        reader = threading.Thread(target=lambda: box.put(self.proc.stdout.readline()), daemon=True)
        reader.start()
        try:
            return json.loads(box.get(timeout=timeout_s))["exit"], False
        except queue.Empty:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            return json.loads(box.get(timeout=60))["exit"], True

    def close(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
