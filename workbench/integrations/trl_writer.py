"""The store side of the live TRL logging (`workbench.integrations.trl`): what one generation batch
carries (`GenerationBatch`), and the background thread (`StepWriter`) that turns finished optimizer steps into store
rows and commits them, heart-beats the run and applies `stop`. It needs neither TRL nor torch, so the
trainer hooks stay in `trl.py` and this part can be read (and tested) on its own."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from workbench.errors import WorkbenchError
from workbench.tasks.rewards import term_means, terms_array

if TYPE_CHECKING:
    from workbench.store.protocols import RunStore

HEARTBEAT_S = 5.0
"""Seconds between the writer's heartbeats of a TRL run."""


@dataclass
class GenerationBatch:
    """One generation batch (rows in TRL's order: `num_generations` consecutive rows per prompt)."""

    step: int
    first_row: int
    policy_version: int
    prompts: list[str]
    responses: list[str]
    answers: list[str | None]
    token_ids: list[list[int]]
    rewards: np.ndarray
    rewards_per_func: np.ndarray
    advantages: np.ndarray
    group: np.ndarray
    logprobs: list[np.ndarray | None]
    entropy: list[np.ndarray | None] = field(default_factory=list)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    used: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    off_policy: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        n = len(self.prompts)
        self.entropy = [None] * n
        self.seen, self.used, self.off_policy = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)


@dataclass
class TrainStep:
    step: int
    logged: bool
    metrics: dict[str, Any] = field(default_factory=dict)


class StepWriter:
    """The background thread: builds each step's rows and commits queued steps together."""

    def __init__(self, store: RunStore, run_id: str, static: dict[str, Any], heartbeat_s: float = HEARTBEAT_S) -> None:
        self.store, self.run_id, self.static, self.heartbeat_s = store, run_id, static, heartbeat_s
        self.error: BaseException | None = None
        self.steps_written = 0
        self.stop_requested = False
        self.last_step: int | None = None
        self.cpu_s = 0.0
        """CPU seconds this thread spent building rows, committing, heart-beating and reading controls."""
        self._signal: object = object()  # the last control signal seen (never equal at first)
        self._queue: queue.Queue = queue.Queue(maxsize=256)
        self._prompts_seen: set[str] = set()
        self._thread = threading.Thread(target=self._work, name=f"trl-writer-{run_id}", daemon=True)
        self._thread.start()

    def put(self, step: int, batches: list[GenerationBatch], metrics: dict[str, Any]) -> None:
        if self.error is not None:
            raise WorkbenchError(f"writing run {self.run_id} to the store failed: {self.error}") from self.error
        self._queue.put((step, batches, metrics))

    def close(self) -> None:
        """Commit everything handed over, stop the thread, re-raise a failed commit."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise WorkbenchError(f"writing run {self.run_id} to the store failed: {self.error}") from self.error

    def _work(self) -> None:
        last_beat = time.monotonic()
        done = False
        while not done:
            try:
                items = [self._queue.get(timeout=self.heartbeat_s)]
            except queue.Empty:
                items = []
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = any(i is None for i in items)
            if self.error is not None:
                continue
            cpu0 = time.thread_time()
            try:
                records = [self._record(*i) for i in items if i is not None]
                if records:
                    self.store.write_steps(records)
                    self.steps_written += len(records)
                    self.last_step = records[-1].step
                if time.monotonic() - last_beat >= self.heartbeat_s:
                    self.store.heartbeat(self.run_id)
                    last_beat = time.monotonic()
                if not done:
                    self._controls()
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread at the next step
                self.error = exc
            self.cpu_s += time.thread_time() - cpu0

    def _controls(self) -> None:
        """Apply `stop` (TRL stops after the current optimizer step); reject every other command: TRL's
        trainer has no budget, allocator, temperature or pause to set."""
        signal = self.store.control_signal(self.run_id)
        if signal is not None and signal == self._signal:
            return
        self._signal = signal
        for row in self.store.pending_controls(self.run_id):
            if row["command"] == "stop" and not self.stop_requested:
                self.store.set_run_status(self.run_id, "stopping")  # the status before the outcome
                self.store.resolve_control(row["control_id"], "applied", step=self.last_step,
                                           reason="TRL stops after the current optimizer step")
                self.stop_requested = True
            else:
                self.store.resolve_control(row["control_id"], "rejected", reason=(
                    f"a TRL run applies only stop; {row['command']!r} cannot be applied to TRL's trainer"
                    if row["command"] != "stop" else "the run is already stopping"))

    def _record(self, step: int, batches: list[GenerationBatch], metrics: dict[str, Any]):
        import polars as pl

        from workbench.integrations.common import prompt_ids
        from workbench.store import StepRecord

        prompts = [p for b in batches for p in b.prompts]
        if not prompts:
            return StepRecord(self.run_id, step, metrics={**metrics, "rollout/count": 0}, rollouts=[])
        pids = prompt_ids(pl.Series(prompts, dtype=pl.Utf8)).to_list()
        rows = self._rollouts(batches, pids)
        m = dict(metrics)
        m.update(self._rollout_metrics(batches, rows))
        n = rows.num_rows
        answers = [a for b in batches for a in b.answers]
        new = []
        for pid, text, answer in zip(pids, prompts, answers):
            if pid not in self._prompts_seen:
                self._prompts_seen.add(pid)
                new.append(dict(prompt_id=pid, split="train", text=text, answer=answer))
        ids, sizes = np.unique(np.asarray(pids), return_counts=True)
        allocs = [dict(prompt_id=str(p), stage=0, allocator="trl", asked=int(k), granted=int(k),
                       reason=f"TRL GRPOTrainer: num_generations={self.static['num_generations']}",
                       budget_kind="rollouts", budget=n, budget_left=0, used_in_update=True)
                  for p, k in zip(ids, sizes)]
        return StepRecord(self.run_id, step, metrics=m, rollouts=rows, allocations=allocs, prompts=new)

    def _rollouts(self, batches: list[GenerationBatch], pids: list[str]) -> pa.Table:
        counter: dict[str, int] = {}
        idx = []
        for p in pids:
            idx.append(counter.get(p, 0))
            counter[p] = idx[-1] + 1
        ids = [t for b in batches for t in b.token_ids]
        lengths = [len(t) for t in ids]
        eos = set(self.static["eos_token_ids"])
        ent = [e for b in batches for e in b.entropy]
        lp = [e for b in batches for e in b.logprobs]
        cat = np.concatenate
        rewards = cat([b.rewards for b in batches]).astype(np.float32)
        terms = self._terms(batches)
        f32 = pa.list_(pa.float32())

        def lists(values: list[np.ndarray | None]) -> pa.Array:
            return pa.array([None if v is None else v.astype(np.float32) for v in values], f32)

        def stat(values: list[np.ndarray | None], fn) -> pa.Array:  # noqa: ANN001
            return pa.array([None if v is None or not len(v) else float(fn(v)) for v in values], pa.float32())

        return pa.table({
            "stage": pa.array([0] * len(pids), pa.int32()),
            "prompt_id": pa.array(pids, pa.string()),
            "idx": pa.array(idx, pa.int32()),
            "policy_version": pa.array([b.policy_version for b in batches for _ in b.prompts], pa.int32()),
            "response": pa.array([r for b in batches for r in b.responses], pa.string()),
            "token_ids": pa.array(ids, pa.list_(pa.int32())),
            "token_entropy": lists(ent),
            "reward": pa.array(rewards, pa.float32(), mask=np.isnan(rewards)),
            "finish_reason": pa.array(["stop" if t and t[-1] in eos else "length" for t in ids], pa.string()),
            "length": pa.array(lengths, pa.int32()),
            "logprob_sum": stat(lp, np.sum),
            "entropy_mean": stat(ent, np.mean),
            "entropy_max": stat(ent, np.max),
            "advantage": pa.array(cat([b.advantages for b in batches]).astype(np.float32)),
            "temperature": pa.array([self.static["temperature"]] * len(pids), pa.float32()),
            "off_policy": pa.array(cat([b.off_policy for b in batches])),
            "used_in_update": pa.array(cat([b.used for b in batches])),
            "worker": pa.array([self.static["worker"]] * len(pids), pa.string()),
            "token_logprobs": lists(lp),
            "reward_terms": terms_array(terms, len(pids)),
        })

    def _terms(self, batches: list[GenerationBatch]) -> dict[str, np.ndarray]:
        """Each reward function's values (TRL's `rewards_per_func` columns, NaN where it did not score)."""
        per_func = np.concatenate([b.rewards_per_func for b in batches]).astype(np.float64)
        return {name: per_func[:, j] for j, name in enumerate(self.static["reward_funcs"])}

    def _rollout_metrics(self, batches: list[GenerationBatch], rows: pa.Table) -> dict[str, Any]:
        n = rows.num_rows
        if n == 0:
            return {}
        rewards = np.concatenate([b.rewards for b in batches]).astype(np.float64)
        lengths = np.asarray(rows["length"].to_pylist())
        signal = []
        for b in batches:
            for g in np.unique(b.group):
                r = b.rewards[b.group == g]
                r = r[~np.isnan(r)]
                signal.append(len(r) > 1 and bool(np.any(r != r[0])))
        m: dict[str, Any] = {
            "rollout/count": n, "rollout/prompts": len(set(rows["prompt_id"].to_pylist())),
            "rollout/tokens_generated": int(lengths.sum()), "rollout/length_mean": float(lengths.mean()),
            "rollout/stop_frac": float(np.mean([f == "stop" for f in rows["finish_reason"].to_pylist()])),
            "rollout/reward_mean": float(np.nanmean(rewards)) if not np.isnan(rewards).all() else None,
            "rollout/reward_std": float(np.nanstd(rewards)) if not np.isnan(rewards).all() else None,
            "rollout/zero_signal_frac": float(1 - np.mean(signal)),
            "rollout/temperature": self.static["temperature"], "policy_version": batches[0].policy_version,
            "alloc/allocator": "trl", "alloc/budget_kind": "rollouts", "alloc/budget": n,
        }
        m.update(term_means(self._terms(batches)))  # reward/<function>
        ent = [e for b in batches for e in b.entropy if e is not None and len(e)]
        if ent:
            tok = np.concatenate(ent)
            m["rollout/entropy_mean"] = float(tok.mean())
            for p, v in zip((10, 50, 90), np.quantile(tok, [0.1, 0.5, 0.9])):
                m[f"rollout/entropy_p{p}"] = float(v)
        return {k: v for k, v in m.items() if v is not None}
