"""The Playground page's data: the one sampling worker of this dashboard process (a process of its own,
`workbench.playground.worker`: the page's script thread never runs a model), the checkpoints a run has,
and the results already computed (every session sees them; only the control role submits)."""

from __future__ import annotations

import threading
from typing import Any

import streamlit as st

from app import data
from workbench.playground.sample import SampleRequest, available_steps
from workbench.playground.worker import Worker


def store_home() -> str:
    """The store's local folder (where runs keep their checkpoints)."""
    from workbench.store.objectstore import is_object_url, local_dir

    location = data.store_location()
    return str(local_dir(location)) if is_object_url(location) else location


_WORKERS: dict[tuple[str, str], Worker] = {}
"""This dashboard process's worker per store (started by the first request, not by viewing the page)."""
_LOCK = threading.Lock()


def worker(*, start: bool = True) -> Worker | None:
    """This dashboard's sampling worker, started (again, when it stopped) if `start`; else None when none
    runs."""
    key = (data.store_location(), store_home())
    with _LOCK:
        w = _WORKERS.get(key)
        if (w is None or not w.alive()) and start:
            w = _WORKERS[key] = Worker(key[0])
        return w


@st.cache_data(ttl=5.0, show_spinner=False)
def steps(run_id: str) -> list[int]:
    """The steps of `run_id` that can be sampled: 0 (the initial model) and its checkpoints."""
    return available_steps(store_home(), run_id)


def submit(requests: list[SampleRequest]) -> list[str]:
    """Queue the requests (one per checkpoint); their ids."""
    w = worker()
    return [w.submit(r) for r in requests]


def statuses(ids: list[str]) -> list[dict[str, Any]]:
    w = worker(start=False)
    if w is None:  # the worker was never started here, or this session's batch belonged to a stopped one
        return [{"id": i, "state": "failed", "error": "the sampling worker stopped; sample again"} for i in ids]
    return [w.status(i) for i in ids]


def cancel(ids: list[str]) -> None:
    w = worker(start=False)
    for i in ids if w is not None else []:
        if w.status(i).get("state") in ("queued", "running"):
            w.cancel(i)


def computed(run_id: str) -> list[dict[str, Any]]:
    """The latest finished result of each checkpoint of `run_id` for its latest prompt (what a viewer
    without the control role sees), oldest checkpoint first."""
    w = worker(start=False)
    done = [s for s in (w.finished() if w is not None else []) if s["result"]["run_id"] == run_id]
    if not done:
        return []
    prompt = done[-1]["result"]["prompt"]
    latest: dict[int, dict[str, Any]] = {}
    for s in done:
        if s["result"]["prompt"] == prompt:
            latest[s["result"]["checkpoint"]] = s
    return [latest[k] for k in sorted(latest)]
