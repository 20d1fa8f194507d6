"""What live control may change in a running engine (`Controllable`), and the heartbeat thread.

`LiveSettings` holds the settings a control command may change mid-run: budget, allocator and its
parameters, sampling temperature, eval interval, and the checkpoint/stop requests. The loop reads
them at each step (temperature at each stage). Every setter validates first and changes nothing
when it raises `ConfigError`, so a bad command never harms the run.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

from workbench.allocators import make_allocator
from workbench.allocators.base import Allocator
from workbench.errors import ConfigError, StoreError

log = logging.getLogger(__name__)


class LiveSettings:
    """The engine's `workbench.control.protocol.Controllable`."""

    def __init__(self, *, budget_kind: str, budget: int, allocator: Allocator, temperature: float,
                 eval_every: int, seed: int) -> None:
        self.budget_kind = budget_kind
        self.budget = budget
        self.allocator = allocator
        self.temperature = temperature
        self.eval_every = eval_every
        self.seed = seed
        self.checkpoint_requested = False
        self.stop_requested = False

    # -- Controllable ------------------------------------------------------------------------------

    def set_budget(self, kind: Literal["rollouts", "tokens"], amount: int) -> None:
        if kind not in ("rollouts", "tokens"):
            raise ConfigError(f"budget.kind: {kind!r} is not allowed (rollouts or tokens)")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise ConfigError(f"budget.amount: {amount!r} is not allowed (an integer >= 1)")
        self.budget_kind, self.budget = kind, amount

    def set_allocator(self, name: str, params: dict[str, Any]) -> None:
        new = make_allocator(name, dict(params or {}), seed=self.seed)
        self.allocator = new

    def set_allocator_params(self, params: dict[str, Any]) -> None:
        self.allocator.set_params(dict(params))

    def set_temperature(self, temperature: float) -> None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ConfigError(f"temperature: {temperature!r} is not allowed (a number > 0)")
        self.temperature = float(temperature)

    def set_eval_interval(self, every: int) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(f"eval.every: {every!r} is not allowed (an integer >= 0; 0 turns it off)")
        self.eval_every = every

    def request_checkpoint(self) -> None:
        self.checkpoint_requested = True

    def request_stop(self) -> None:
        self.stop_requested = True

    # -- what the step rows record ------------------------------------------------------------------

    def allocator_params(self) -> dict[str, Any]:
        from dataclasses import asdict, is_dataclass

        cfg = self.allocator.config
        return asdict(cfg) if is_dataclass(cfg) else dict(cfg or {})

    def state_dict(self) -> dict[str, Any]:
        return {
            "budget_kind": self.budget_kind,
            "budget": self.budget,
            "allocator": self.allocator.name,
            "allocator_params": self.allocator_params(),
            "allocator_state": self.allocator.state_dict(),
            "temperature": self.temperature,
            "eval_every": self.eval_every,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget_kind, self.budget = state["budget_kind"], int(state["budget"])
        self.allocator = make_allocator(state["allocator"], state["allocator_params"], seed=self.seed)
        self.allocator.load_state_dict(state["allocator_state"])
        self.temperature = float(state["temperature"])
        self.eval_every = int(state["eval_every"])


class Heartbeat:
    """A daemon thread calling `store.heartbeat(run_id)` every `every_s` seconds until stopped."""

    def __init__(self, store: Any, run_id: str, every_s: float) -> None:
        self.store, self.run_id, self.every_s = store, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{run_id}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.store.heartbeat(self.run_id)
            except StoreError as exc:  # a missed beat is not fatal; liveness tolerates a few
                log.warning("heartbeat of run %s failed: %s", self.run_id, exc)

    def __enter__(self) -> "Heartbeat":
        try:
            self.store.heartbeat(self.run_id)
        except StoreError as exc:
            log.warning("heartbeat of run %s failed: %s", self.run_id, exc)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
