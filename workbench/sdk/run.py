"""`Run`: one training job's logging into a workbench store (see `workbench/sdk/__init__.py`)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from workbench.correctness import parse_rule, rule_config, run_rule
from workbench.errors import DataError, StoreError, WorkbenchError
from workbench.sdk.rows import build, summary
from workbench.sdk.writer import SdkWriter
from workbench.metrics import TEXT_COLUMNS
from workbench.store import StepRecord
from workbench.store.records import STEP_METRIC_KEYS

if TYPE_CHECKING:
    from workbench.store.handle import StoreLike
    from workbench.store.protocols import ImportStore
    from workbench.store.store import Store

log = logging.getLogger("workbench.sdk")

SOURCE = "sdk"
"""`runs.source` of a run logged through the SDK."""
ON_ERROR = ("warn", "raise")


class SdkWarning(UserWarning):
    """Bad input to an SDK call, or a store that did not take a commit (the trainer goes on)."""


class Run:
    """A run that a training loop logs into. Made by `workbench.init`; see the package docstring."""

    def __init__(self, store: Store, run_id: str, *, rank: int, world_size: int, rule: Any, last_step: int | None,
                 on_error: str, writer: SdkWriter, owns_store: bool, heartbeat_s: float) -> None:
        self.store, self.run_id, self.rank, self.world_size = store, run_id, rank, world_size
        self.rule, self.on_error = rule, on_error
        self.last_step = last_step
        """The last step this rank had committed when the run was opened (None: none); calls for it or an
        earlier step are skipped, so a trainer restarted from an older checkpoint duplicates nothing."""
        self.problems: list[str] = []
        """Every warning this run raised (bad input, failed commits), in order."""
        self.skipped_steps: set[int] = set()
        self._writer, self._owns_store = writer, owns_store
        self._open: int | None = None
        self._parts: list[pa.Table] = []
        self._prompts: dict[str, dict[str, Any]] = {}
        self._episodes: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])  # turns, tool_calls rows
        self._metrics: dict[str, Any] = {}
        self._events: list[dict[str, Any]] = []
        self._first_idx: dict[str, int] = {}
        self._pid_cache: dict[str, str] = {}
        self._sealed: int | None = last_step
        self._lock = threading.Lock()
        self._finished = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        atexit.register(self._at_exit)  # a script that ends without finish() still commits what it logged
        if rank == 0 and heartbeat_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, args=(heartbeat_s,), daemon=True,
                                          name=f"sdk-heartbeat-{run_id}")
            self._beat.start()

    # -- bad input and store failures -----------------------------------------------------------
    def _problem(self, message: str, *, step: int | None = None, kind: str = "sdk_bad_input",
                 exc: Exception | None = None) -> None:
        """Report a problem: raise it (`on_error="raise"`), else warn and record it as an event."""
        if self.on_error == "raise" and exc is not None:
            raise exc
        self.problems.append(message)
        warnings.warn(f"workbench run {self.run_id}: {message}", SdkWarning, stacklevel=3)
        self._events.append({"level": "warning", "kind": kind, "message": message, "step": step,
                             "data": {"rank": self.rank}})

    def _store_problem(self, message: str) -> None:  # from the writer's thread
        self.problems.append(message)
        log.warning("workbench run %s (rank %d): %s", self.run_id, self.rank, message)

    # -- logging ------------------------------------------------------------------------------
    def _step_ok(self, step: Any, call: str) -> int | None:
        """The step as an int, or None when the call must be skipped (reported)."""
        if isinstance(step, bool) or not isinstance(step, int) and not (hasattr(step, "__index__")):
            self._problem(f"{call}: step must be an integer, got {step!r}; call ignored",
                          exc=DataError(f"{call}: step must be an integer, got {step!r}"))
            return None
        step = int(step)
        if self.last_step is not None and step <= self.last_step:
            if step not in self.skipped_steps:
                self.skipped_steps.add(step)
                log.info("run %s: step %d was committed before a restart; skipped", self.run_id, step)
            return None
        if self._open is not None and step < self._open or self._open is None and self._sealed is not None \
                and step <= self._sealed:
            last = self._open if self._open is not None else self._sealed
            self._problem(f"{call}: step {step} goes backwards (step {last} was logged already); call ignored",
                          step=step, exc=DataError(f"{call}: step {step} goes backwards (after step {last})"))
            return None
        if self._open is not None and step > self._open:
            self._seal()
        self._open = step
        return step

    def log_step(self, step: int, metrics: dict[str, Any] | None = None) -> None:
        """Step metrics (namespaced names as in `workbench metrics`: `train/loss`, `train/grad_norm`, ...).
        Several calls for one step merge their metrics. Only rank 0's metrics are stored."""
        if self._finished:
            return
        with self._lock:
            if (step := self._step_ok(step, "log_step")) is None:
                return
            bad = [k for k in (metrics or {}) if not isinstance(k, str)]
            if bad or not isinstance(metrics or {}, dict):
                self._problem(f"log_step: metrics must be a dict with string keys; step {step} kept without them",
                              step=step, exc=DataError("log_step: metrics must be a dict with string keys"))
                return
            kept = {k: _scalar(v) for k, v in (metrics or {}).items()}
            bad = sorted(k for k, v in kept.items() if not _number(v) and v is not None and k not in TEXT_KEYS)
            if bad:
                self._problem(f"log_step step {step}: metric(s) {bad} are not numbers; left out", step=step,
                              exc=DataError(f"log_step: metric {bad[0]!r} is not a number"))
            self._metrics.update({k: v for k, v in kept.items() if k not in bad})

    def log_rollouts(self, step: int, prompts: Any, responses: Any, rewards: Any, *,
                     reward_terms: dict[str, Any] | None = None, stage: int = 0, policy_version: int | None = None,
                     temperature: float | None = None, **per_rollout: Any) -> int:
        """One batch of a step's rollouts; returns how many were kept. `prompts`, `responses`, `rewards`
        have one value per rollout; optional per-rollout arguments: answers, advantages, correct (the
        verifier's verdict; else the run's rule over the reward), verdicts, finish_reasons, groups (the
        trainer's group key; else equal prompt text is one group), token_ids, token_entropy,
        token_logprobs (one sequence per rollout), episodes (a `workbench.episodes.Episode` or None per
        rollout: its turns and tool calls are stored, docs/sdk.md); `reward_terms` maps a term's name to
        its values.
        Several calls for one step add up; a call for a later step commits the earlier one."""
        if self._finished:
            return 0
        with self._lock:
            if (step := self._step_ok(step, "log_rollouts")) is None:
                return 0
            try:
                built = build(step, prompts, responses, rewards, rule=self.rule, rank=self.rank,
                              first_idx=self._first_idx, pid_cache=self._pid_cache, reward_terms=reward_terms, stage=stage,
                              policy_version=policy_version, temperature=temperature, **per_rollout)
            except (DataError, TypeError, ValueError) as exc:
                self._problem(f"log_rollouts step {step}: {exc}; nothing of this call was stored", step=step,
                              exc=exc if isinstance(exc, DataError) else DataError(str(exc)))
                return 0
            for message in built.warnings:
                self._problem(f"log_rollouts step {step}: {message}", step=step, exc=DataError(message))
            assert built.table is not None
            self._parts.append(built.table)
            self._episodes[0].extend(built.turns)
            self._episodes[1].extend(built.tool_calls)
            for row in built.prompts:
                self._prompts.setdefault(row["prompt_id"], row)
            return built.table.num_rows

    def _seal(self) -> None:
        """Hand the open step to the writer (caller holds the lock); its record (the rows put together,
        step summaries, allocation rows) is built on the writer's thread."""
        if self._open is None:
            return
        step, self._open = self._open, None
        parts, prompts, metrics, events = self._parts, list(self._prompts.values()), self._metrics, self._events
        episodes = self._episodes
        self._parts, self._prompts, self._metrics, self._events, self._first_idx = [], {}, {}, [], {}
        self._episodes = ([], [])
        self._sealed = step
        if not parts and self.rank != 0 and not events:
            return
        rows = sum(p.num_rows for p in parts)
        self._writer.submit(lambda: self._record(step, parts, prompts, metrics, events, episodes), rows, step)

    def _record(self, step: int, parts: list[pa.Table], prompts: list[dict[str, Any]], metrics: dict[str, Any],
                events: list[dict[str, Any]], episodes: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], []),
                ) -> StepRecord:
        table = pa.concat_tables(parts, promote_options="default") if parts else None
        if table is not None and self.world_size == 1:  # a rank's share would misstate the step
            metrics = {**summary(table), **metrics}
        return StepRecord(self.run_id, step, metrics=metrics, rollouts=table if table is not None else [],
                          allocations=_allocations(table) if table is not None else [], prompts=prompts,
                          events=events, step_row=self.rank == 0, turns=episodes[0], tool_calls=episodes[1])

    def flush(self, timeout_s: float | None = None) -> bool:
        """Commit the open step and wait for every step handed over to be committed (False when
        `timeout_s` passed first; the steps stay queued)."""
        with self._lock:
            self._seal()
        return self._writer.flush(timeout_s)

    def finish(self, status: str = "finished", *, timeout_s: float = 60.0) -> None:
        """Commit what is open and queued, stop the writer, and (rank 0) mark the run `status`."""
        if self._finished:
            return
        with self._lock:
            self._seal()
            self._finished = True
        self._stop.set()
        atexit.unregister(self._at_exit)
        self._writer.close(timeout_s)
        leftover = self._events
        if self._writer.dropped:
            self.problems.append(f"{len(self._writer.dropped)} step(s) were not stored: "
                                 f"{self._writer.dropped[:10]}")
        try:
            for event in leftover:
                self.store.add_event(self.run_id, event["level"], event["kind"], event["message"],
                                     step=event.get("step"), data=event.get("data"))
            if self.rank == 0:
                self.store.set_run_status(self.run_id, status)
        except WorkbenchError as exc:
            self._store_problem(f"finish: could not record the run's end: {exc}")
        if self._owns_store:
            self.store.close()

    def _at_exit(self) -> None:
        if not self._finished:
            try:
                self.finish()
            except Exception as exc:  # noqa: BLE001 - the interpreter is ending
                log.warning("workbench run %s: finishing at exit failed: %s", self.run_id, exc)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.finish("finished" if kind is None else "failed")

    @property
    def commits(self) -> list[tuple[int, int, float]]:
        """(steps, rollouts, seconds) of each commit so far."""
        return self._writer.commits

    @property
    def writer_cpu_s(self) -> float:
        return self._writer.cpu_s

    def _heartbeat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self.store.heartbeat(self.run_id)
            except Exception as exc:  # noqa: BLE001 - never into the trainer
                log.debug("heartbeat of run %s failed: %s", self.run_id, exc)


TEXT_KEYS = frozenset(k for column in TEXT_COLUMNS for k in STEP_METRIC_KEYS.get(column, (column,)))
"""Step metrics that may hold text (the allocator's name, ...): every other one must be a number."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool included: stored as 0/1


def _scalar(value: Any) -> Any:
    """A one-element tensor or numpy value as a Python number (what the steps row stores)."""
    if hasattr(value, "item") and getattr(value, "size", 1) in (1, None) or hasattr(value, "numel"):
        try:
            return value.item()
        except (ValueError, RuntimeError):
            return value
    return value


def _allocations(table: pa.Table) -> list[dict[str, Any]]:
    """One allocation row per group of the step's share (asked = granted = its size), as importers write."""
    import polars as pl

    frame = pl.from_arrow(table.select(["stage", "prompt_id"]))
    assert isinstance(frame, pl.DataFrame)
    groups = frame.group_by("stage", "prompt_id", maintain_order=True).len()
    return groups.select("stage", "prompt_id", pl.lit(SOURCE).alias("allocator"),
                         pl.col("len").cast(pl.Int32).alias("asked"), pl.col("len").cast(pl.Int32).alias("granted"),
                         pl.lit("logged through the SDK").alias("reason"), pl.lit("rollouts").alias("budget_kind"),
                         pl.lit(True).alias("used_in_update")).to_dicts()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def init(store: StoreLike | None = None, name: str = "sdk-run", config: dict[str, Any] | None = None, *,
         run_id: str | None = None, resume: bool = True, rank: int | None = None, world_size: int | None = None,
         seed: int = 0, correct_if: str | None = None, on_error: str = "warn", commit_max_rows: int = 16384,
         max_queued_rows: int = 65536, block_s: float = 300.0, wait_s: float = 60.0,
         heartbeat_s: float = 5.0, writer_nice: int = 5, guards: bool = True, commit_window_s: float = 1.0) -> Run:
    """Open (or continue) a run in a store and start its background writer; see the package docstring."""
    from workbench.store import open_store

    if on_error not in ON_ERROR:
        raise DataError(f"init: on_error {on_error!r}: must be one of {ON_ERROR}")
    if not _number(commit_window_s) or not 0 <= float(commit_window_s) <= 3600:
        raise DataError(f"init: commit_window_s {commit_window_s!r}: must be a number of seconds from 0 to 3600")
    rank = _env_int("RANK", 0) if rank is None else int(rank)
    world_size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
    if not 0 <= rank < max(world_size, 1):
        raise DataError(f"init: rank {rank} is outside world_size {world_size}")
    if config is not None and not isinstance(config, dict):
        raise DataError(f"init: config must be a dict, got {type(config).__name__}")
    owns = store is None or isinstance(store, (str, os.PathLike))
    if owns:
        path = store or os.environ.get("WORKBENCH_STORE", "store")
        if rank != 0:  # rank 0 creates the store and the run; opening first could race its creation
            _wait_for_run(path, name, run_id, wait_s, rank)
        store = open_store(path, threads=1)
    rule = parse_rule(correct_if, where="init: correct_if")
    try:
        found = _find_run(store, name, run_id, resume)
        if found is None and rank == 0:
            full = {"trainer": config or {}, "correctness": rule_config(rule, "the trainer's verdict where it "
                    "logs one, else the rule"), "sdk": {"world_size": world_size}}
            found = store.create_run(name, full, seed, status="running", source=SOURCE, run_id=run_id)
        deadline = time.monotonic() + wait_s
        while found is None:  # another rank creates it
            if time.monotonic() > deadline:
                raise StoreError(f"init: rank {rank} found no run {run_id or name!r} after {wait_s:.0f} s; "
                                 "rank 0 creates it (give every rank the same name or run_id)")
            time.sleep(0.2)
            found = _find_run(store, name, run_id, True)
        stored = store.run(found)
        if correct_if is None:
            rule = run_rule(stored["config"])
        elif run_rule(stored["config"]) != rule:
            raise DataError(f"init: correct_if {rule.text!r}: run {found} judges by "
                            f"{run_rule(stored['config']).text!r}")
        if rank == 0:
            store.set_run_status(found, "running", pid=os.getpid())
        last = store.last_logged_step(found, worker=None if rank == 0 else f"rank-{rank}")
    except BaseException:
        if owns:
            store.close()
        raise
    holder: dict[str, Run] = {}
    watch = None
    if rank == 0 and guards:  # the default guards over every committed step, alert only (as for imports)
        from workbench.integrations.guards import ImportWatch

        watch = ImportWatch(store, found, new_run=last is None)
    writer = SdkWriter(store, commit_max_rows=commit_max_rows, max_queued_rows=max_queued_rows, block_s=block_s,
                       nice=writer_nice, commit_window_s=commit_window_s, on_error=lambda m: holder["run"]._store_problem(m) if "run" in holder else None,
                       name=f"sdk-writer-{rank}", after_commit=watch.observe_records if watch is not None else None)
    run = Run(store, found, rank=rank, world_size=world_size, rule=rule, last_step=last, on_error=on_error,
              writer=writer, owns_store=owns, heartbeat_s=heartbeat_s)
    holder["run"] = run
    return run


def _wait_for_run(path: Any, name: str, run_id: str | None, wait_s: float, rank: int) -> None:
    """Wait (up to `wait_s`) until the store at `path` exists and holds the run rank 0 creates."""
    from workbench.store import open_store

    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open_store(path, read_only=True) as peek:
                if _find_run(peek, name, run_id, True) is not None:
                    return
        except StoreError:
            pass  # not created yet
        if time.monotonic() > deadline:
            raise StoreError(f"init: rank {rank} found no run {run_id or name!r} in store {path} after "
                             f"{wait_s:.0f} s; rank 0 creates it (give every rank the same name or run_id)")
        time.sleep(0.2)


def _find_run(store: ImportStore, name: str, run_id: str | None, resume: bool) -> str | None:
    if run_id is not None:
        try:
            store.run(run_id)
            return run_id
        except StoreError:
            return None
    if not resume:
        return None
    runs = store.runs_from(SOURCE, name)
    return runs["run_id"][0] if runs.height else None
