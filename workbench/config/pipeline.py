"""The `[pipeline]` section of a run config: asynchronous generation (rollouts ahead of the policy).

The section is named `pipeline` because `async` is a keyword in Python (a config field could not
carry that name); `docs/async.md` describes the design and each setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workbench.checks import check

CORRECTIONS = ("bypass", "decoupled", "none")
"""Off-policy corrections of the policy loss (see `workbench.algorithms.correction`)."""


@dataclass(frozen=True)
class PipelineConfig:
    max_staleness: int = 0
    """eta: how many policy versions a consumed rollout may lag the trainer. 0 is the synchronous loop,
    exactly (generate, then train); k > 0 lets a generator with its own copy of the weights (a child
    process by default, see `generator`) run up to k batches ahead, the bound kept at admission (a
    batch starts only while accepted + running < (eta + version + 1) batches), never by dropping
    finished rollouts."""
    max_staleness_bound: int = 0
    """The largest eta a live `set_staleness` command may set (0: `max_staleness`)."""
    partial_rollouts: bool = False
    """When new weights reach the generator mid-batch, install them at once and continue the
    unfinished responses under them (their tokens, log-probs and seeds' streams kept, each asking
    only for the tokens it has left; `segments` and `version_end` record it). Off: weights are
    installed between batches, so no rollout spans two versions."""
    over_provision: float = 1.0
    """APRIL-style over-provisioning: start up to this factor more groups than a step needs and take
    the first that finish. Not available yet: only 1 (off) is accepted."""
    correction: Literal["bypass", "decoupled", "none"] = "decoupled"
    """Off-policy correction of the loss. "bypass": the PPO ratio against the generator's own
    log-probabilities. "decoupled": the ratio against the policy at the start of the update (the
    proximal policy), times the truncated behaviour weight min(pi_prox / pi_behav, `is_cap`). "none":
    the ratio against the proximal policy and no weight (for ablations)."""
    correction_level: Literal["token", "sequence"] = "token"
    """Whether the decoupled weight is computed per token or once per sequence (the product of its
    tokens' ratios, i.e. exp of the summed log-ratio)."""
    is_cap: float = 2.0
    """Upper bound of the importance weight pi_prox / pi_behav (truncated importance sampling)."""
    generator: Literal["process", "thread"] = "process"
    """Where the in-process generator runs (Ray workers, `rollout.backend = "ray"`, are processes of
    their own and ignore this). "process": a child process with its own interpreter, torch threads
    and copy of the weights (`workbench.rollout.process_backend`), so generation and training overlap.
    "thread": a thread of the trainer's process with its own copy of the weights; both sides then
    share one interpreter lock, and on the organism they barely overlap (docs/async.md)."""
    threads_per_side: int = 0
    """torch intra-op threads each side (generator, trainer) computes with; 0: half the machine's
    cores (at least 1), so that on 2 cores each side has one core of its own. With a generator thread,
    torch has one thread-pool size per process, so this replaces `model.threads` while it runs."""

    def __post_init__(self) -> None:
        check(self.max_staleness >= 0, "pipeline.max_staleness", "an integer >= 0", self.max_staleness)
        check(self.max_staleness_bound >= 0, "pipeline.max_staleness_bound", "an integer >= 0",
              self.max_staleness_bound)
        check(not self.max_staleness_bound or self.max_staleness_bound >= self.max_staleness,
              "pipeline.max_staleness_bound", f"0, or an integer >= pipeline.max_staleness = {self.max_staleness}",
              self.max_staleness_bound)
        check(self.over_provision >= 1, "pipeline.over_provision", "a factor >= 1", self.over_provision)
        check(self.over_provision == 1, "pipeline.over_provision", "only 1: over-provisioning is not available yet",
              self.over_provision)
        check(self.correction in CORRECTIONS, "pipeline.correction", f"one of {', '.join(CORRECTIONS)}",
              self.correction)
        check(self.correction_level in ("token", "sequence"), "pipeline.correction_level", "token or sequence",
              self.correction_level)
        check(self.is_cap >= 1, "pipeline.is_cap", "a number >= 1", self.is_cap)
        check(self.generator in ("process", "thread"), "pipeline.generator", "process or thread", self.generator)
        check(self.threads_per_side >= 0, "pipeline.threads_per_side", "an integer >= 0; 0: half the cores",
              self.threads_per_side)

    def check_rollout(self, rollout: Any) -> None:
        """The pipeline with the run's `[rollout]`: an in-process generator or Ray workers (HF), and
        partial rollouts only in process (a Ray worker's batch cannot be interrupted yet)."""
        if not self.enabled:
            return
        check(rollout.backend in ("hf", "ray"), "pipeline.max_staleness",
              f'0 with rollout.backend {rollout.backend!r}: above 0 needs "hf" or "ray"', self.bound)
        check(rollout.backend != "ray" or (not self.partial_rollouts and rollout.worker_backend == "hf"),
              "pipeline.partial_rollouts", 'only false with Ray workers, and rollout.worker_backend = "hf"',
              self.partial_rollouts)

    @property
    def bound(self) -> int:
        """The largest eta this run may use (`set_staleness` checks against it)."""
        return self.max_staleness_bound or self.max_staleness

    @property
    def enabled(self) -> bool:
        """Whether a generator runs ahead (eta > 0 now or allowed later)."""
        return self.bound > 0
