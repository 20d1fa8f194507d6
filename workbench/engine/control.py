"""What live control may change in a running engine (`Controllable`), and the heartbeat thread.

`LiveSettings` holds the settings a control command may change mid-run: budget, allocator and its
parameters, sampling temperature, learning rate (on the optimiser and its schedule, which it is bound
to), eval interval, and the checkpoint/stop requests. The loop reads
them at each step (temperature at each stage). Every setter validates first and changes nothing
when it raises `ConfigError`, so a bad command never harms the run.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING, Any, Literal

from workbench.allocators import make_allocator
from workbench.allocators.base import Allocator
from workbench.errors import ConfigError, StoreError
from workbench.faults import fault_point
from workbench.guards.changes import apply_guard_change
from workbench.guards.config import Guard, guard_set

if TYPE_CHECKING:
    from workbench.store.protocols import RunWriter

log = logging.getLogger(__name__)


REPLAYED = frozenset({"set_budget", "set_allocator", "set_allocator_params", "set_temperature", "set_lr",
                      "set_eval_interval", "set_staleness", "checkpoint", "guard"})
"""Commands a resumed run applies again when they were applied after its last checkpoint."""


class LiveSettings:
    """The engine's `workbench.control.protocol.Controllable`."""

    def __init__(self, *, budget_kind: str, budget: int, allocator: Allocator, temperature: float,
                 eval_every: int, seed: int, staleness: int = 0, staleness_bound: int = 0) -> None:
        self.budget_kind = budget_kind
        self.budget = budget
        self.allocator = allocator
        self.temperature = temperature
        self.eval_every = eval_every
        self.seed = seed
        self.staleness = staleness
        """eta in force: how many versions the pipeline's batches may lag (0: synchronous)."""
        self.staleness_bound = staleness_bound
        """The run's largest eta (`pipeline.max_staleness_bound`); `set_staleness` stays within it."""
        self.checkpoint_requested = False
        self.stop_requested = False
        self.applied_controls: list[int] = []
        """Ids of the control commands applied so far in the run's history (saved in checkpoints)."""
        self.control_limits: Any = None
        """`workbench.control.commands.Limits` for this run's commands (None: the defaults; vLLM runs
        narrow the temperature, see `workbench.control.commands.control_limits`)."""
        self.replay: dict[int, list[dict[str, Any]]] = {}
        """Commands to apply again at their step while a resumed run regenerates it (see `plan_replay`)."""
        self.guards: dict[str, Guard] | None = None
        """The guards in force by name (`workbench.guards`): the engine's set-up puts the config's here;
        None (a `LiveSettings` made without a config): the default presets."""
        self.optimizer: Any = None
        self.scheduler: Any = None
        """The trainer's optimiser and its `LambdaLR` schedule (`bind_optimizer`), what `set_lr` changes."""

    def bind_optimizer(self, optimizer: Any, scheduler: Any) -> None:
        """The optimiser (and its learning-rate schedule) `set_lr` changes; their state, the learning
        rate included, goes into checkpoints with the optimiser's own."""
        self.optimizer, self.scheduler = optimizer, scheduler

    # -- Controllable ------------------------------------------------------------------------------

    def set_budget(self, kind: Literal["rollouts", "tokens"], amount: int) -> None:
        if kind not in ("rollouts", "tokens"):
            raise ConfigError(f"budget.kind: {kind!r} is not allowed (rollouts or tokens)")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise ConfigError(f"budget.amount: {amount!r} is not allowed (an integer >= 1)")
        self.budget_kind, self.budget = kind, amount
        fault_point("control")

    def set_allocator(self, name: str, params: dict[str, Any]) -> None:
        new = make_allocator(name, dict(params or {}), seed=self.seed)
        self.allocator = new
        fault_point("control")

    def set_allocator_params(self, params: dict[str, Any]) -> None:
        self.allocator.set_params(dict(params))
        fault_point("control")

    def set_temperature(self, temperature: float) -> None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ConfigError(f"temperature: {temperature!r} is not allowed (a number > 0)")
        self.temperature = float(temperature)
        fault_point("control")

    def set_lr(self, lr: float) -> None:
        """The peak learning rate (`optim.lr`): the schedule's base from now on, and each parameter
        group's rate for the next optimiser step (the base times the schedule's factor at its step)."""
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not lr > 0:
            raise ConfigError(f"optim.lr: {lr!r} is not allowed (a finite number > 0)")
        if self.optimizer is None:
            raise ConfigError("optim.lr: this engine has no optimiser to change")
        groups = self.optimizer.param_groups
        factors = [1.0] * len(groups)
        if self.scheduler is not None:
            self.scheduler.base_lrs = [float(lr)] * len(groups)
            factors = [f(self.scheduler.last_epoch) for f in self.scheduler.lr_lambdas]
        for group, factor in zip(groups, factors):
            group["initial_lr"] = float(lr)
            group["lr"] = float(lr) * factor
        fault_point("control")

    def set_eval_interval(self, every: int) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(f"eval.every: {every!r} is not allowed (an integer >= 0; 0 turns it off)")
        self.eval_every = every
        fault_point("control")

    def set_staleness(self, eta: int) -> None:
        if isinstance(eta, bool) or not isinstance(eta, int) or not 0 <= eta <= self.staleness_bound:
            raise ConfigError(f"pipeline.max_staleness: {eta!r} is not allowed (an integer from 0 to the run's "
                              f"pipeline.max_staleness_bound, {self.staleness_bound})")
        self.staleness = eta

    def change_guard(self, args: dict[str, Any]) -> None:
        self.guards = apply_guard_change(self.guards if self.guards is not None else guard_set(()), args)
        fault_point("control")

    def request_checkpoint(self) -> None:
        self.checkpoint_requested = True
        fault_point("control")

    def request_stop(self) -> None:
        self.stop_requested = True
        fault_point("control")

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
            "applied_controls": list(self.applied_controls),
            "staleness": self.staleness,
            "guards": None if self.guards is None else [g.to_dict() for g in self.guards.values()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget_kind, self.budget = state["budget_kind"], int(state["budget"])
        self.allocator = make_allocator(state["allocator"], state["allocator_params"], seed=self.seed)
        self.allocator.load_state_dict(state["allocator_state"])
        self.temperature = float(state["temperature"])
        self.eval_every = int(state["eval_every"])
        self.staleness = int(state.get("staleness", self.staleness))
        self.applied_controls = [int(c) for c in state.get("applied_controls") or []]
        self._legacy = "applied_controls" not in state
        if state.get("guards") is not None:
            self.guards = {d["name"]: Guard.from_dict(d) for d in state["guards"]}

    # -- controls in the run's history ----------------------------------------------------------

    def note_applied(self, outcomes: list[dict[str, Any]]) -> None:
        """Record the commands `apply_pending` applied (their ids go into the next checkpoint)."""
        self.applied_controls += [int(o["control_id"]) for o in outcomes if o.get("status") == "applied"]

    def plan_replay(self, controls: list[dict[str, Any]], checkpoint_step: int) -> list[int]:
        """Plan the commands a resumed run must apply again; returns their ids.

        A command applied after the last checkpoint changed settings the checkpoint does not hold,
        yet the store records it as applied (at step N): it is not pending any more. So that the
        regenerated steps equal the lost ones, it is applied again, exactly once, at the start of step
        N (`replay_at`), without a second outcome in the store. Commands the checkpoint already holds
        (e.g. those applied together with a `stop`, whose checkpoint is written at step N - 1) are
        not replayed; nor are pause, resume and stop, which change no training state."""
        done = set(self.applied_controls)
        self.replay = {}
        planned = []
        for row in sorted(controls, key=lambda r: (r.get("applied_step") or 0, int(r["control_id"]))):
            step = row.get("applied_step")
            if row.get("status") != "applied" or step is None or row.get("command") not in REPLAYED:
                continue
            if int(row["control_id"]) in done or (getattr(self, "_legacy", False) and step <= checkpoint_step):
                continue
            self.replay.setdefault(int(step), []).append(row)
            planned.append(int(row["control_id"]))
        return planned

    def replay_at(self, step: int) -> list[dict[str, Any]]:
        """Apply again the planned commands of `step` (see `plan_replay`); returns what was applied."""
        # The engine depends on control (control sees the engine only as its `Controllable` protocol);
        # imported here so that importing the engine does not load the control package's API.
        from workbench.control.apply import apply_one
        from workbench.control.commands import LIMITS

        done = []
        for row in self.replay.pop(step, []):
            status, reason, _ = apply_one(row, self, paused=False, limits=LIMITS)
            if status != "applied":  # it was applied once with the same settings; should not happen
                log.warning("replaying control %s (%s) at step %d failed: %s", row["control_id"],
                            row["command"], step, reason)
                continue
            self.applied_controls.append(int(row["control_id"]))
            done.append(row)
        return done


class Heartbeat:
    """A daemon thread calling `store.heartbeat(run_id)` every `every_s` seconds until stopped."""

    def __init__(self, store: RunWriter, run_id: str, every_s: float) -> None:
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
