"""Fixtures for the store tests: a fresh store directory per test and a small synthetic run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from workbench.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun

SMALL = Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=12, prompt_pool=20, blocks=2)


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "store") as s:
        yield s


@pytest.fixture
def filled(store):
    """A store with one run of 3 synthetic steps (4 prompts x 4 rollouts of 12 tokens each)."""
    run_id = store.create_run("small", {"lr": 1e-5}, seed=1)
    syn = SyntheticRun(run_id, SMALL, seed=1)
    records = [syn.step(i) for i in range(3)]
    for record in records:
        store.write_step(record)
    return store, run_id, records


@contextmanager
def polled_counts(store, run_id: str) -> Iterator[list[tuple[int, int]]]:
    """While the block runs, a reader thread polls the run's (rollouts, steps) counts in one query each
    time; yields the list it fills (a torn read shows as rollouts != steps x rollouts per step)."""
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            frame = store.sql("SELECT (SELECT count(*) FROM rollouts WHERE run_id = $r) AS n, "
                              "(SELECT count(*) FROM steps WHERE run_id = $r) AS s", {"r": run_id})
            seen.append((int(frame["n"][0]), int(frame["s"][0])))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        yield seen
    finally:
        done.set()
        reader.join()
