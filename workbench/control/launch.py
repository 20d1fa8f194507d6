"""Launching runs as detached processes.

`launch(config, store=..., overrides=..., name=...)` resolves and validates the run config here (a
bad field is reported before anything starts), creates the run's row in the store (status
`created`), writes the resolved config to `<store>/runs/<run id>/config.toml`, and starts

    python -m workbench.cli run <that config> --store <store> --run-id <run id>

in its own session (own process group: closing the dashboard or a terminal does not kill it), with
stdout and stderr in `<store>/runs/<run id>/run.log`. It returns the run id at once; the engine
adopts the row, heart-beats, and reports its status there. `restart(store, run_id)` starts
`workbench resume RUN` the same way for a stopped or crashed run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workbench.errors import ControlError

_CHILDREN: dict[int, subprocess.Popen] = {}
"""Processes started here, kept so they can be reaped (no zombies left behind)."""


def store_root(store: Any) -> Path:
    """The local directory of a store (a path, or a Store opened on a directory)."""
    if isinstance(store, (str, os.PathLike)):
        return Path(store).expanduser().absolute()
    root = getattr(getattr(store, "location", None), "root", None) or getattr(store, "path", None)
    if root is None:
        raise ControlError("launch: runs can only be launched on a local store directory")
    return Path(root)


def run_dir(store: Any, run_id: str) -> Path:
    """`<store>/runs/<run id>/`: the run's log, launched config and checkpoints live here."""
    return store_root(store) / "runs" / run_id


def _set_nested(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ControlError(f"launch: override {key}: {part} is not a table")
        node = nxt
    node[parts[-1]] = value


def resolve_config(
    config: str | os.PathLike | dict[str, Any] | None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    name: str | None = None,
) -> Any:
    """The validated RunConfig: defaults, then the file or dict, then overrides (`key=value` strings
    as on the command line, or a `{"optim.lr": 5e-5}` dict), then `name`. ConfigError names the field."""
    from workbench.config import RunConfig, apply_overrides, load_config

    if isinstance(config, dict):
        data = RunConfig.from_dict(config).to_dict()
    else:
        data = load_config(config).to_dict()
    if isinstance(overrides, dict):
        for key, value in overrides.items():
            _set_nested(data, key, value)
    elif overrides:
        data = apply_overrides(data, list(overrides))
    if name:
        data["name"] = name
    return RunConfig.from_dict(data)


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen:
    """Start `python -m workbench.cli <argv>` detached, appending its output to `log_path`."""
    _reap()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "workbench.cli", *argv]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "ab") as log:
        log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def launch(
    config: str | os.PathLike | dict[str, Any] | None = None,
    *,
    store: Any,
    overrides: list[str] | dict[str, Any] | None = None,
    name: str | None = None,
) -> str:
    """Validate the config, create the run row, start the run detached; return its id at once."""
    from workbench.config import to_toml
    from workbench.store import open_store

    cfg = resolve_config(config, overrides, name=name)
    root = store_root(store)
    own = isinstance(store, (str, os.PathLike))
    st = open_store(root) if own else store
    try:
        run_id = st.create_run(
            cfg.name, cfg.to_dict(), cfg.seed, host=socket.gethostname(), status="created"
        )
        rdir = run_dir(root, run_id)
        rdir.mkdir(parents=True, exist_ok=True)
        cfg_path = rdir / "config.toml"
        cfg_path.write_text(to_toml(cfg))
        argv = ["run", str(cfg_path), "--store", str(root), "--run-id", run_id]
        proc = spawn(argv, rdir / "run.log")
        st.set_run_status(run_id, "created", pid=proc.pid)
    finally:
        if own:
            st.close()
    return run_id


def restart(store: Any, run_id: str) -> int:
    """Start `workbench resume RUN` detached for a stopped or crashed run; returns its pid."""
    root = store_root(store)
    proc = spawn(["resume", run_id, "--store", str(root)], run_dir(root, run_id) / "run.log")
    return proc.pid
