"""`workbench import ... --follow`: keep watching a folder and import each step file once complete.

When is a step file complete? The frameworks write a step's file in one go at the end of the step
(verl and NeMo-RL open it with "w" and write every line, TRL's pandas writes a whole Parquet file), so
a file is imported when EITHER a file of a later step exists (the trainer has moved on), OR its size
and modification time did not change between two polls AND it looks whole (a JSONL file ends with a
newline, a Parquet file starts and ends with the `PAR1` magic). The dashboard therefore shows a run
that trains now at most one step (plus one poll) behind. A file that fails to parse once it is
complete is bad input: it stops the follow, or with `--skip-bad` is counted and not retried until it
changes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.integrations.common import Importer, Report, StepFile


def ready_files(importer: Importer, seen: dict[Path, tuple[int, int]]) -> list[StepFile]:
    """The pending files that are complete by the rule above; `seen` holds each file's (size,
    mtime) at the previous poll and is updated."""
    pending = importer.pending()
    if not pending:
        return []
    everything = importer.fmt.discover(importer.path, importer.options)
    last: dict[str, int] = {}
    for f in everything:
        last[f.split] = max(last.get(f.split, f.step), f.step)
    out = []
    for f in pending:
        try:
            st = f.path.stat()
        except FileNotFoundError:
            continue
        sig = (st.st_size, st.st_mtime_ns)
        prev = seen.get(f.path)
        seen[f.path] = sig
        later = f.step >= 0 and last.get(f.split, f.step) > f.step
        if later or (prev == sig and importer.fmt.looks_complete(f)):
            out.append(f)
    return out


def follow(importer: Importer, *, poll_s: float = 2.0, idle_exit_s: float = 0.0,
           on_report: Callable[[Report], Any] | None = None, stop: threading.Event | None = None) -> int:
    """Import complete step files as they appear until `stop` is set, SIGTERM/SIGINT arrives, or
    nothing new arrived for `idle_exit_s` seconds (0: never). Returns the number of steps imported."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    seen: dict[Path, tuple[int, int]] = {}
    tried: dict[Path, tuple[int, int]] = {}
    total = 0
    last_new = time.monotonic()
    while not stop.is_set():
        ready = [f for f in ready_files(importer, seen) if tried.get(f.path) != seen.get(f.path)]
        if ready:
            report = importer.import_files(ready)
            for f in ready:
                tried[f.path] = seen[f.path]
            if report.steps or report.eval_steps:
                total += len(report.steps)
                last_new = time.monotonic()
                if on_report is not None:
                    on_report(report)
        if idle_exit_s and time.monotonic() - last_new > idle_exit_s:
            break
        stop.wait(poll_s)
    return total
