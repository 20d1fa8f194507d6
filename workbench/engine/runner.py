"""A run as the store sees it: its row, status transitions, heartbeat, and errors.

    run_id = run(cfg, store="store")              # a new run, in the foreground
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
from typing import Any, Callable, Iterator

from workbench.config import RunConfig, config_warnings
from workbench.engine.control import Heartbeat


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
def _opened(store: Any) -> Iterator[Any]:
    """`store` itself when it is open; else the store at that path, opened for the run and closed after."""
    if not isinstance(store, (str, Path)):
        yield store
        return
    from workbench.store import open_store

    st = open_store(str(store), threads=1)  # see open_store: DuckDB's threads vs torch's
    try:
        yield st
    finally:
        st.close()


def store_dir_of(store: Any) -> str:
    """The local directory of `store` (a path, or a Store opened on a store directory): where runs keep
    their checkpoints and the organism its cache. A Store over a catalog URL has none: pass `store_dir=`."""
    if isinstance(store, (str, Path)):
        from workbench.store.objectstore import is_object_url, local_dir

        return str(local_dir(store)) if is_object_url(store) else str(store)  # s3://: its local folder
    location = getattr(store, "location", None)
    root = getattr(location, "root", None) or getattr(location, "lock_dir", None)  # s3 + SQLite: its folder
    if root is None:
        from workbench.errors import StoreError

        raise StoreError(f"{store!r} has no local directory for the run's checkpoints: pass store_dir=")
    return str(root)


def run(cfg: RunConfig, *, store: Any, run_id: str | None = None, name: str | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None, stop_after: int | None = None,
        store_dir: str | Path | None = None) -> str:
    """Run `cfg` to the end (or until stopped) in this process; returns the run id."""
    folder = str(store_dir or store_dir_of(store))
    if run_id is None:  # a launched run (row given) was checked by its launcher
        from workbench.control.launch import preflight

        preflight(cfg)  # model directory and data set, before the run's row is written
    with _opened(store) as st:
        if run_id is None:
            run_id = st.create_run(name or cfg.name, cfg.to_dict(), cfg.seed, pid=os.getpid(),
                                   host=socket.gethostname(), code_version=_code_version(), status="created")
        _drive(cfg, st, folder, run_id, resume=False, on_step=on_step, stop_after=stop_after)
        return run_id


def resume(store: Any, run_id: str, *, on_step: Callable[[int, dict[str, float]], None] | None = None,
           stop_after: int | None = None, steps: int | None = None, store_dir: str | Path | None = None) -> str:
    """Continue `run_id` from its last checkpoint (the store is rolled back to it)."""
    from workbench.errors import ConfigError

    folder = str(store_dir or store_dir_of(store))
    with _opened(store) as st:
        row = st.run(run_id)
        if not row:
            raise ConfigError(f"run {run_id!r}: not in the store")
        if row.get("status") in ("running", "paused", "stopping") and _alive(row):
            raise ConfigError(f"run {run_id!r} is {row['status']} (pid {row.get('pid')}); stop it first")
        config = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"])
        cfg = RunConfig.from_dict(config)
        if steps is not None:
            cfg = cfg.replace(steps=steps)
        _drive(cfg, st, folder, run_id, resume=True, on_step=on_step, stop_after=stop_after)
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


def _drive(cfg: RunConfig, st: Any, store_dir: str, run_id: str, *, resume: bool,
           on_step: Callable[[int, dict[str, float]], None] | None, stop_after: int | None) -> None:
    from workbench.engine.loop import train

    st.set_run_status(run_id, "running", pid=os.getpid())
    for said in [] if resume else config_warnings(cfg):  # once, when the run starts
        warnings.warn(said, UserWarning, stacklevel=2)
        st.add_event(run_id, "warning", "config", said)
    try:
        with Heartbeat(st, run_id, cfg.logging.heartbeat_s):
            status = train(cfg, store=st, store_dir=store_dir, run_id=run_id, resume=resume, on_step=on_step,
                           stop_after=stop_after)
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
