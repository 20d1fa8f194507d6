"""A run as the store sees it: its row, status transitions, heartbeat, and errors.

    run_id = run(cfg, store="store")              # a new run, in the foreground (or store=StoreHandle / Store)
    run(cfg, store="store", run_id=ID)            # adopt a row created by `workbench.control.launch`
    resume("store", run_id)                       # from the last checkpoint (store rolled back to it)

Status: created -> running -> finished | stopped | failed (with the error). A run killed outright is
marked crashed by liveness (stale heartbeat, process gone); `resume` continues it.
"""

from __future__ import annotations

import json
import os
import socket
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from workbench.config import RunConfig, config_warnings
from workbench.engine.control import Heartbeat

if TYPE_CHECKING:
    from workbench.store.handle import StoreHandle
    from workbench.store.protocols import RunStore


def _code_version() -> str:
    from workbench import __version__

    head = Path(__file__).resolve().parents[2] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            ref = (head.parent / ref[5:]).read_text().strip()
        return f"{__version__}+{ref[:10]}"
    except OSError:
        return __version__


@contextmanager
def _opened(store: StoreHandle | RunStore | str | Path) -> Iterator[RunStore]:
    """`store` itself when it is open; else the store it names, opened for the run and closed after."""
    from workbench.store.handle import StoreHandle

    if not isinstance(store, (str, os.PathLike, StoreHandle)):
        yield store
        return
    st = StoreHandle.at(store).open(threads=1)  # see open_store: DuckDB's threads vs torch's
    try:
        yield st
    finally:
        st.close()


def run(cfg: RunConfig, *, store: StoreHandle | RunStore | str | Path, run_id: str | None = None,
        name: str | None = None, on_step: Callable[[int, dict[str, float]], None] | None = None,
        stop_after: int | None = None) -> str:
    """Run `cfg` to the end (or until stopped) in this process; returns the run id. `store`: a store
    directory or `s3://` URL, a `StoreHandle`, or an open Store (its handle names the local folder
    where the run keeps its checkpoints)."""
    if run_id is None:  # a launched run (row given) was checked by its launcher
        from workbench.control.launch import preflight

        preflight(cfg)  # model directory and data set, before the run's row is written
    with _opened(store) as st:
        st.handle.folder()  # one clear line before the row is written when there is no local folder
        if run_id is None:
            run_id = st.create_run(name or cfg.name, cfg.to_dict(), cfg.seed, pid=os.getpid(),
                                   host=socket.gethostname(), code_version=_code_version(), status="created")
        _drive(cfg, st, run_id, resume=False, on_step=on_step, stop_after=stop_after)
        return run_id


def resume(store: StoreHandle | RunStore | str | Path, run_id: str, *,
           on_step: Callable[[int, dict[str, float]], None] | None = None, stop_after: int | None = None,
           steps: int | None = None) -> str:
    """Continue `run_id` from its last checkpoint (the store is rolled back to it)."""
    from workbench.errors import ConfigError

    with _opened(store) as st:
        st.handle.folder()
        row = st.run(run_id)
        if not row:
            raise ConfigError(f"run {run_id!r}: not in the store")
        if row.get("status") in ("running", "paused", "stopping") and _alive(row):
            raise ConfigError(f"run {run_id!r} is {row['status']} (pid {row.get('pid')}); stop it first")
        config = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"])
        cfg = RunConfig.from_dict(config)
        if steps is not None:
            cfg = cfg.replace(steps=steps)
        _drive(cfg, st, run_id, resume=True, on_step=on_step, stop_after=stop_after)
        return run_id


def _alive(row: dict[str, Any]) -> bool:
    pid = row.get("pid")
    if not pid or pid == os.getpid():
        return False
    try:
        import psutil

        return psutil.pid_exists(int(pid))
    except Exception:  # noqa: BLE001
        return False


def _drive(cfg: RunConfig, st: RunStore, run_id: str, *, resume: bool,
           on_step: Callable[[int, dict[str, float]], None] | None, stop_after: int | None) -> None:
    from workbench.engine.loop import train

    st.set_run_status(run_id, "running", pid=os.getpid())
    for said in [] if resume else config_warnings(cfg):  # once, when the run starts
        warnings.warn(said, UserWarning, stacklevel=2)
        st.add_event(run_id, "warning", "config", said)
    try:
        with Heartbeat(st, run_id, cfg.logging.heartbeat_s):
            status = train(cfg, store=st, run_id=run_id, resume=resume, on_step=on_step, stop_after=stop_after)
    except KeyboardInterrupt:
        st.set_run_status(run_id, "stopped", error="interrupted (resume continues from the last checkpoint)")
        st.add_event(run_id, "warning", "interrupted", "interrupted by the user")
        raise
    except BaseException as exc:
        st.set_run_status(run_id, "failed", error=f"{type(exc).__name__}: {exc}")
        st.add_event(run_id, "error", "error", f"{type(exc).__name__}: {exc}",
                     data={"traceback": traceback.format_exc()[-4000:]})
        raise
    st.set_run_status(run_id, status)
