"""Launching runs as detached processes.

`launch(config, store=..., overrides=..., name=...)` resolves and validates the run config here (a
bad field is reported before anything starts), creates the run's row in the store (status
`created`), writes the resolved config to `<store>/runs/<run id>/config.toml`, and starts

    python -m workbench.cli run <that config> --store <store> --run-id <run id>

in its own session (own process group: closing the dashboard or a terminal does not kill it), with
stdout and stderr in `<store>/runs/<run id>/run.log`. It returns the run id at once; the engine
adopts the row, heart-beats, and reports its status there. `restart(store, run_id)` starts
`workbench resume RUN` the same way for a stopped or crashed run. Both work at a lower CPU priority
than the dashboard and with torch's threads waiting quietly (`workbench.control.priority`).
"""

from __future__ import annotations

import copy
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import ControlError

if TYPE_CHECKING:
    from workbench.store.handle import StoreLike

_CHILDREN: dict[int, subprocess.Popen] = {}
"""Processes started here, kept so they can be reaped (no zombies left behind)."""


def store_root(store: StoreLike) -> Path:
    """The local directory of a store (a path, an open Store or its handle); for a store on object
    storage, its local folder (`workbench.store.objectstore.local_dir`)."""
    from workbench.store.handle import StoreHandle

    home = StoreHandle.at(store).home
    if home is None:
        raise ControlError("launch: runs can only be launched on a local store directory or an s3:// store")
    return home


def _store_spec(store: StoreLike) -> tuple[str, dict[str, str]]:
    """What a child process is given for `--store` (the directory, or the s3:// URL) and the
    environment it needs on top of this one (the catalog of an open store on object storage; a spec
    given as text leaves the catalog to this process's environment, which the child inherits)."""
    from workbench.store.objectstore import is_object_url, object_url

    if isinstance(store, (str, os.PathLike)):
        return (object_url(store), {}) if is_object_url(store) else (str(store_root(store)), {})
    root = store_root(store)
    handle = store.handle
    return (handle.spec, handle.child_env()) if handle.on_object_storage else (str(root), {})


def run_dir(store: StoreLike, run_id: str) -> Path:
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
        for key, value in overrides.items():  # a copy: a later dotted key must not write into the caller's dict
            _set_nested(data, key, copy.deepcopy(value))
    elif overrides:
        data = apply_overrides(data, list(overrides))
    if name:
        data["name"] = name
    return RunConfig.from_dict(data)


MAX_OVERRIDES = 64
"""Most `field=value` lines one launch request may carry."""
MAX_OVERRIDE_CHARS = 2000
"""Longest `field=value` line."""
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def known_fields() -> set[str]:
    """Every dotted config field an override may name: the run config's fields, every task kind's
    fields under `task.`, every registered allocator's parameters under `allocator.params.`, the
    organism recipe's under `model.organism.` (and the tables themselves)."""
    import dataclasses
    import typing

    from workbench.allocators import available_allocators, get_allocator
    from workbench.config import RunConfig
    from workbench.models.organism import OrganismRecipe
    from workbench.tasks import TASK_KINDS

    out: set[str] = set()

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            name = prefix + f.name
            out.add(name)
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], name + ".")

    walk(RunConfig, "")
    for config_cls, _ in TASK_KINDS.values():
        out.update(f"task.{f.name}" for f in dataclasses.fields(config_cls))
    for name in available_allocators():
        out.update(f"allocator.params.{f.name}" for f in dataclasses.fields(get_allocator(name).Config))
    walk(OrganismRecipe, "model.organism.")
    return out


def check_overrides(overrides: list[str], *, where: str = "launch") -> list[str]:
    """Override lines as the dashboard may pass them: `field=value` with a known field (see
    `known_fields`), no user verifier module (code to import is named in a config file, not typed into
    a form), within `MAX_OVERRIDES` lines of `MAX_OVERRIDE_CHARS`. ControlError naming the line."""
    if len(overrides) > MAX_OVERRIDES:
        raise ControlError(f"{where}: {len(overrides)} overrides; at most {MAX_OVERRIDES}")
    known = known_fields()
    out = []
    for n, line in enumerate(overrides, start=1):
        line = line.strip()
        if len(line) > MAX_OVERRIDE_CHARS:
            raise ControlError(f"{where}: override line {n} is {len(line)} characters long (at most {MAX_OVERRIDE_CHARS})")
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ControlError(f"{where}: override line {n} {line[:60]!r}: expected field=value (for example optim.lr=5e-5)")
        if not _FIELD.fullmatch(key):
            raise ControlError(f"{where}: override line {n}: {key[:60]!r} is not a field name")
        if key not in known:
            raise ControlError(f"{where}: override line {n}: unknown field {key!r} (see `workbench config show`)")
        if _names_function_term(key, value):
            raise ControlError(f"{where}: override line {n}: rewards.terms: a function term (module:function) "
                               "is named in the config file, not in a launch form")
        if key == "task.verifier" and ":" in value:
            raise ControlError(f"{where}: override line {n}: task.verifier: a user verifier (module:function) "
                               "is named in the config file, not in a launch form")
        out.append(f"{key}={value.strip()}")
    return out


def _names_function_term(key: str, value: str) -> bool:
    """Whether an override sets reward terms holding a function term (code to import), however the
    value is written (`rewards.terms=[...]` or `rewards={terms=[...]}`, escapes included)."""
    from workbench.config import apply_overrides

    if key not in ("rewards", "rewards.terms"):
        return False
    try:
        terms = apply_overrides({}, [f"{key}={value}"]).get("rewards", {})
    except Exception:  # noqa: BLE001 - not a table: the config check refuses it with its own message
        return False
    terms = terms.get("terms") if isinstance(terms, dict) else None
    return isinstance(terms, list) and any(isinstance(t, dict) and t.get("kind") == "function" for t in terms)


def check_config_path(path: str | os.PathLike, config_dirs: list[Path]) -> Path:
    """The config file `path` resolved, if it is a .toml file inside one of `config_dirs` (symbolic
    links and `..` resolved first); ControlError naming the path otherwise."""
    raw = str(path)
    if "\x00" in raw:
        raise ControlError("launch: config path contains a NUL byte")
    resolved = Path(raw).expanduser().resolve()
    roots = [Path(d).expanduser().resolve() for d in config_dirs]
    if not any(resolved.is_relative_to(root) for root in roots):
        raise ControlError(f"launch: config {raw!r} is outside the configs directory "
                           f"({', '.join(str(r) for r in roots) or 'none'})")
    if resolved.suffix != ".toml" or not resolved.is_file():
        raise ControlError(f"launch: config {raw!r} is not a .toml file in the configs directory")
    return resolved


def preflight(cfg: Any) -> None:
    """Check what would otherwise fail only after the run's row exists, so that a bad input is
    refused before anything is written: the model directory exists (unless it is a built-in source), and
    the task's data set loads (every row read and validated; a bad file names its path and rows)."""
    from workbench.config import task_config
    from workbench.errors import ConfigError, DataError
    from workbench.tasks import get_task

    from workbench.models.sources import SOURCES

    if cfg.model.path not in SOURCES:  # "organism" and "smollm2" are built or converted by the engine
        path = Path(cfg.model.path).expanduser()
        if not path.is_dir():
            what = "is a file, not a model directory" if path.exists() else "does not exist"
            raise ConfigError(f"model.path: {path} {what}")
    task = get_task(task_config(cfg.task))
    if not task.train_prompts():
        raise DataError(f"task: no training prompts in {cfg.task.get('path', cfg.task.get('kind'))}")
    task.eval_prompts()


def spawn(argv: list[str], log_path: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `python -m workbench.cli <argv>` detached, appending its output to `log_path`."""
    _reap()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "workbench.cli", *argv]
    from workbench.control.priority import child_env

    env = {**child_env(), "PYTHONUNBUFFERED": "1", **(env_extra or {})}  # quiet waiting; the run lowers its own priority
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
    store: StoreLike,
    overrides: list[str] | dict[str, Any] | None = None,
    name: str | None = None,
) -> str:
    """Validate the config, create the run row, start the run detached; return its id at once."""
    from workbench.config_docs import to_toml
    from workbench.store import open_store

    cfg = resolve_config(config, overrides, name=name)
    preflight(cfg)
    root = store_root(store)
    spec, env_extra = _store_spec(store)
    own = isinstance(store, (str, os.PathLike))
    st = open_store(spec) if own else store
    try:
        run_id = st.create_run(
            cfg.name, cfg.to_dict(), cfg.seed, host=socket.gethostname(), status="created"
        )
        rdir = run_dir(root, run_id)
        rdir.mkdir(parents=True, exist_ok=True)
        cfg_path = rdir / "config.toml"
        cfg_path.write_text(to_toml(cfg))
        argv = ["run", str(cfg_path), "--store", spec, "--run-id", run_id]
        proc = spawn(argv, rdir / "run.log", env_extra)
        st.set_run_status(run_id, "created", pid=proc.pid)
    finally:
        if own:
            st.close()
    return run_id


def restart(store: StoreLike, run_id: str) -> int:
    """Start `workbench resume RUN` detached for a stopped or crashed run; returns its pid."""
    root = store_root(store)
    spec, env_extra = _store_spec(store)
    proc = spawn(["resume", run_id, "--store", spec], run_dir(root, run_id) / "run.log", env_extra)
    return proc.pid
