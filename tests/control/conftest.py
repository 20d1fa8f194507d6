"""Shared fixtures of the live-control tests: a real store in a temporary directory, and a test double
of the ENGINE (it records the Controllable calls it receives and rejects what the real engine would)."""

from __future__ import annotations

from typing import Any

import pytest

from workbench.errors import ConfigError


class RecordingEngine:
    """Implements `Controllable`, records every call; rejects like the engine's own setters."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.allocator_params: dict[str, Any] = {"n": 8}

    def set_budget(self, kind, amount):
        self.calls.append(("set_budget", (kind, amount)))

    def set_allocator(self, name, params):
        self.calls.append(("set_allocator", (name, params)))

    def set_allocator_params(self, params):
        if "n" in params and params["n"] > 64:
            raise ConfigError(f"uniform.n: {params['n']} is above this engine's limit 64")
        self.calls.append(("set_allocator_params", (params,)))

    def set_temperature(self, temperature):
        self.calls.append(("set_temperature", (temperature,)))

    def set_lr(self, lr):
        self.calls.append(("set_lr", (lr,)))

    def set_eval_interval(self, every):
        self.calls.append(("set_eval_interval", (every,)))

    def set_staleness(self, eta):
        if eta > 2:
            raise ConfigError(f"pipeline.max_staleness: {eta} is above this run's bound 2")
        self.calls.append(("set_staleness", (eta,)))

    def request_checkpoint(self):
        self.calls.append(("request_checkpoint", ()))

    def request_stop(self):
        self.calls.append(("request_stop", ()))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store per test module (creating one costs seconds); each test gets its own run."""
    from workbench.store import open_store

    with open_store(tmp_path_factory.mktemp("ctl") / "store") as st:
        yield st


@pytest.fixture
def run_id(store):
    return store.create_run("ctl-test", {"allocator": {"name": "uniform", "params": {"n": 8}}}, 0,
                            status="running")


@pytest.fixture
def engine():
    return RecordingEngine()
