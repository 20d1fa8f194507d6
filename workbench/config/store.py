"""`[logging]` (what reaches the store) and `[store]` (how steps are committed to it)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check


@dataclass(frozen=True)
class LoggingConfig:
    rollouts: bool = True
    """Log every rollout to the store (off: step metrics, allocations and prompt stats only)."""
    token_entropy: bool = True
    """Log each rollout's per-token entropy list."""
    token_ids: bool = True
    """Log each rollout's generated token ids."""
    token_logprobs: bool = False
    """Log each rollout's per-token log-probabilities: the behaviour policy's (the weights that sampled
    it, `rollouts.token_logprobs`) and the trainer's in the update (`rollouts.token_trainer_logprobs`),
    for the Rollouts page's behaviour-vs-trainer colouring (docs/async.md). Off by default: two more
    float lists per rollout (one float per generated token each, as `token_entropy`): x1.15-1.25 the
    store bytes per rollout on the tiny run's 3.5-token responses (`workbench bench logprobs`); no
    step-time cost measurable."""
    background_writes: bool = True
    """Commit each step to the store on a writer thread while the next step runs (one step in flight;
    the store then lags the engine by at most one step, and every checkpoint waits for it). With the
    engine's store on one DuckDB thread, a default organism step took 0.78 s with it vs 0.86 s without."""
    heartbeat_s: float = 2.0
    """Seconds between heartbeats of a running engine."""
    inflight_s: float = 0.5
    """Seconds between updates of the run's rollouts-in-flight file while a step generates
    (`<store>/live/<run id>/inflight.mmap`, the Live page's progress of the step; in-process `hf`
    backend only; 0 turns it off). Written at each batch's end and at most this often before it."""
    rollouts_block: int = 0
    """Benchmark aid (`workbench bench engine`'s logging overhead): above 0, rollouts are logged in
    alternate blocks of this many steps only (steps 0..n-1 logged, n..2n-1 not, ...), so that one run
    holds both sides under the same load. 0 (the default): every step as `rollouts` says."""

    def __post_init__(self) -> None:
        check(self.heartbeat_s > 0, "logging.heartbeat_s", "a number > 0", self.heartbeat_s)
        check(self.inflight_s == 0 or self.inflight_s >= 0.01, "logging.inflight_s", "0 (off) or a number >= 0.01",
              self.inflight_s)
        check(self.rollouts_block >= 0, "logging.rollouts_block", "an integer >= 0", self.rollouts_block)


@dataclass(frozen=True)
class StoreConfig:
    commit_max_rows: int = 16384
    """Group commit: the most rollouts one store transaction holds. Steps that reach the writer while it
    commits wait and go together in its next transaction, up to this many rollouts (whole steps; a
    larger step goes alone). A step reaching an idle writer is committed at once, unless
    `commit_spacing_s` asks it to wait."""
    commit_interval_s: float = 1.0
    """Group commit: the longest a finished step is held back before it is handed to the store's
    writer (the engine holds each step until the next policy update starts, so the commit's Python
    work does not slow generation). Pause, stop, the end of the run, each evaluation and each
    checkpoint flush at once."""
    commit_spacing_s: float = 0.5
    """Group commit: the least time between the end of one commit and the start of the next. Steps
    that finish faster than this share a transaction, so the commit's work (catalog rows, Parquet files)
    is paid once per several steps; a step becomes visible at most this long plus one commit after it
    is handed over. 0: commit each step as soon as the writer is idle. Flushes do not wait."""
    writer_nice: int = 0
    """Scheduling niceness of the store's writer thread (0-19, Linux; ignored elsewhere). Above 0 the
    commit's CPU work yields to the training threads when both want a core."""
    max_queued_steps: int = 256
    """Outages: while the store does not answer (object storage, a PostgreSQL catalog), the writer
    retries its commit with backoff and the run goes on training, its steps queued in memory; at this
    many queued steps the run pauses until the store is back, then goes on by itself. Meanwhile
    `workbench runs` and the dashboard say "store unreachable, retrying since ..." (read from a file in
    the store's local folder); an event `store_outage` records each outage. Needs
    `logging.background_writes` (without it a step waits for its own commit)."""

    def __post_init__(self) -> None:
        check(self.commit_max_rows >= 1, "store.commit_max_rows", "an integer >= 1", self.commit_max_rows)
        check(self.commit_interval_s > 0, "store.commit_interval_s", "a number > 0 (seconds)",
              self.commit_interval_s)
        check(self.commit_spacing_s >= 0, "store.commit_spacing_s", "a number >= 0 (seconds)",
              self.commit_spacing_s)
        check(0 <= self.writer_nice <= 19, "store.writer_nice", "an integer from 0 to 19", self.writer_nice)
        check(self.max_queued_steps >= 1, "store.max_queued_steps", "an integer >= 1 (steps)",
              self.max_queued_steps)
