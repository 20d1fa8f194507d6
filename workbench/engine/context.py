"""One run in this process, as the loop passes it: what the run is built from (`Setup`, built once by
`build_setup`), what changes as it runs (`RunState`: the step state, the live settings, the guards'
state, the control signal last seen, the non-finite flag) and where it is recorded (the store and the
run's id). The loop's functions take this one value (`RunContext`); the functions under them take the
part they read (`ctx.parts` for the model, the backend, the prompts; `ctx.state` for what they change).

    parts = build_setup(cfg, store_dir=store.handle.folder(), run_id=run_id, writer=...)
    ctx = RunContext(parts=parts, state=RunState.start(cfg, parts), store=store, run_id=run_id)
    status = _loop(ctx, resume)     # workbench/engine/loop.py (`train` builds the context)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from workbench.config import RunConfig
from workbench.engine.control import LiveSettings
from workbench.engine.setup import Setup, StepState, live_settings
from workbench.errors import StoreUnreachable
from workbench.guards.config import Guard
from workbench.guards.rules import rollout_predicates
from workbench.guards.watch import Watch
from workbench.store.protocols import RunStore

log = logging.getLogger(__name__)


class RunGuards:
    """The guards of one engine process: the watch and the rollbacks made (the guards' state; what they
    do is `workbench.engine.guards`)."""

    def __init__(self, guards: dict[str, Guard]) -> None:
        self.watch = Watch(guards)
        self.loaded = False
        self.rollbacks: dict[str, list[int]] = {}
        """Each guard's rollbacks in this run, oldest first: the checkpoint step each went back to."""

    def sync(self, guards: dict[str, Guard]) -> None:
        """Follow live changes (a `guard` command applied at this step)."""
        for name in list(self.watch.guards):
            if name not in guards:
                self.watch.remove_guard(name)
        for name, g in guards.items():
            if self.watch.guards.get(name) != g:
                self.watch.set_guard(g)

    def needs_rollouts(self) -> bool:
        return any(rollout_predicates(g.tree) for g in self.watch.guards.values())  # type: ignore[attr-defined]


@dataclass
class RunState:
    """What changes as a run goes: checkpointed (`step`, `live`) or rebuilt by this process."""

    live: LiveSettings
    """Settings a control command may change between steps (budget, allocator, temperature, ...)."""
    step: StepState = field(default_factory=StepState)
    """What one step leaves to the next (per-prompt statistics, the reuse cache, the mean length)."""
    control_token: str | None = None
    """The store's control signal at the last step-boundary poll (see `apply_controls`)."""
    guards: RunGuards | None = None
    """The run's guards as this process evaluates them (built by the first `guard_step`)."""
    nonfinite_step: int | None = None
    """The step whose update left weights that are not finite (None: they are finite); cleared when a
    checkpoint is restored."""
    nonfinite_metrics: dict[str, Any] = field(default_factory=dict)
    """That step's `train/` metrics (what the error names)."""

    @classmethod
    def start(cls, cfg: RunConfig, parts: Setup) -> RunState:
        """The state before the first step (or before a checkpoint is restored into it)."""
        return cls(live=live_settings(cfg, parts.optimizer, parts.scheduler),
                   step=StepState(tokens_per_rollout=float(cfg.sampling.max_new_tokens)))


@dataclass
class RunContext:
    """One run in this process: its parts, its state, its store and id, and how the caller follows it."""

    parts: Setup
    state: RunState
    store: RunStore
    run_id: str
    on_step: Callable[[int, dict[str, float]], None] | None = None
    """Called after each step is recorded (and with step 0 after an evaluation at start)."""
    stop_after: int | None = None
    """Stop cleanly (checkpoint, status `stopped`) after this step: tests interrupt a run with it."""

    @property
    def cfg(self) -> RunConfig:
        return self.parts.cfg


def apply_controls(ctx: RunContext, *, step: int, boundary: str) -> list[dict[str, Any]]:
    """Apply pending live-control commands at a step or stage boundary.

    The store's control signal (a token rewritten whenever a command is queued) is read first, and
    `controls` is queried only when it changed since the last step-boundary poll — a query per
    boundary cost ~90 ms, 15% of a default organism step. Stage boundaries leave the token unseen,
    so step-boundary commands they skip are still picked up at the next step."""
    from workbench.control.apply import apply_pending

    st = ctx.state
    token = ctx.store.control_signal(ctx.run_id)
    if token is not None and token == st.control_token:
        return []
    writer = ctx.parts.writer
    # a pause may block here: every step handed over is committed first. While the store is
    # unreachable its commands cannot be read anyway: the run goes on, its steps queue in the writer
    if writer is not None and not writer.flush(through_outage=False):
        return []
    try:
        outcomes = apply_pending(ctx.store, ctx.run_id, st.live, step=step, boundary=boundary)
    except StoreUnreachable as exc:  # the next boundary reads them again
        log.warning("step %d: the run's commands could not be read, the store is unreachable: %s", step, exc)
        return []
    if boundary == "step":
        st.control_token = token
    st.live.note_applied(outcomes)  # their ids go into the next checkpoint (see LiveSettings.plan_replay)
    return outcomes
