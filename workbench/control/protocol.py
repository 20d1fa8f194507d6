"""The seam between live control and the engine.

The engine implements `Controllable`; `workbench.control` reads pending rows from the store's
`controls` table at step boundaries (and, for in-step settings, at stage boundaries), validates each
command, calls the matching method, and records the outcome (applied at step N, or rejected with a
reason). A method raises `workbench.errors.ConfigError` (naming the field) to reject a command; the
run is never harmed by a bad command.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

COMMANDS = (
    "pause",
    "resume",
    "stop",
    "checkpoint",
    "set_budget",
    "set_allocator",
    "set_allocator_params",
    "set_temperature",
    "set_lr",
    "set_eval_interval",
    "set_staleness",
    "guard",
)
"""Every command a user can issue (the `command` column of `controls`). `guard` reaches engines that also
offer `change_guard(args)` (add, change or remove a guard, see `workbench.guards.changes`); others reject it."""


@runtime_checkable
class Controllable(Protocol):
    """What a running engine offers live control."""

    def set_budget(self, kind: Literal["rollouts", "tokens"], amount: int) -> None:
        """Budget per step from the next step on."""
        ...

    def set_allocator(self, name: str, params: dict[str, Any]) -> None:
        """Switch allocator (built from `params`; unknown or ill-typed fields rejected)."""
        ...

    def set_allocator_params(self, params: dict[str, Any]) -> None:
        """Change some parameters of the allocator in force."""
        ...

    def set_temperature(self, temperature: float) -> None:
        """Sampling temperature from the next stage on."""
        ...

    def set_lr(self, lr: float) -> None:
        """The learning rate (`optim.lr`, what the run's schedule scales) from the next optimiser step on."""
        ...

    def set_eval_interval(self, every: int) -> None:
        """Evaluate every `every` steps (0 turns evaluation off)."""
        ...

    def set_staleness(self, eta: int) -> None:
        """The asynchronous pipeline's staleness bound eta, for batches admitted from the next step on
        (0 .. the run's `pipeline.max_staleness_bound`)."""
        ...

    def request_checkpoint(self) -> None:
        """Write a checkpoint at the end of the current step."""
        ...

    def request_stop(self) -> None:
        """Checkpoint, then exit cleanly (status `stopped`)."""
        ...
