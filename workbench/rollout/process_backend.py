"""A generator in a child process of its own (`pipeline.generator = "process"`).

Why a process: the in-process backend's decoding loop is Python issuing many small torch calls, and a
generator *thread* beside the trainer contends with it for the interpreter lock. Measured on the
2-core development machine (docs/async.md): with a generator thread, the trainer's update took 2.8x
as long and generation 2x as long as each alone, so the pipeline was slower than the synchronous loop.
A child process has an interpreter, a torch thread pool and a copy of the weights of its own, so one
core generates while the other trains; the pipeline's generator thread only waits on a pipe.

How it works:
1. `ProcessBackend(model, ...)` starts one child (the "spawn" start method: a fresh interpreter, so
   no thread pool or lock state is inherited from the trainer) that builds the model from its class
   and config, copies the weights out of a shared-memory state dict, and serves requests over a pipe.
2. `generate(...)` sends the prompts, sampling parameters and per-group seeds and waits for the batch.
   The seeds make the child's rollouts those of the in-process backend at the same thread count.
3. `load_state(state, version)` copies a new state dict into the shared-memory buffers and has the child load
   them (between generate calls: one request at a time, so the buffers are never read mid-copy).
4. Partial rollouts: while waiting for a batch, the caller's `interrupt()` is polled in this process;
   when it says so, a shared event tells the child's decoding loop to stop after its current token,
   and the batch comes back with `cut` set (the same contract as `HFBackend.generate`).
5. A child that dies (killed, out of memory) raises `WorkbenchError` naming its pid and exit code at
   the next call or while one waits: the pipeline hands it to the trainer, whose run stops (it never
   hangs); `workbench resume` continues from the last checkpoint.

Evaluation and everything that needs the trainer's weights stay in the trainer's process.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from workbench.errors import WorkbenchError
from workbench.rollout.base import BackendDefaults, GenerationBatch, ModelSpec, SamplingParams

POLL_S = 0.002
"""How often a waiting `generate` asks its `interrupt` (seconds)."""


def _to_wire(batch: GenerationBatch) -> dict[str, Any]:
    """A batch as plain numpy arrays (pickled through the pipe, no shared-memory handles to manage)."""
    return {f.name: (v.numpy() if isinstance(v, torch.Tensor) else v)
            for f in dataclasses.fields(batch) for v in [getattr(batch, f.name)]}


def _from_wire(wire: dict[str, Any]) -> GenerationBatch:
    return GenerationBatch(**{k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in wire.items()})


def _serve(conn: Any, cut: Any, spec: ModelSpec, device: str, shared: dict[str, torch.Tensor],
           eos_token_ids: list[int], pad_token_id: int, threads: int) -> None:
    """The child's loop: build the model, then answer "generate", "load" and "close" requests."""
    torch.set_num_threads(max(1, threads))
    try:
        from workbench.rollout.hf import HFBackend

        backend = HFBackend.in_worker(spec, shared, device, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
        model = backend.model
        conn.send(("ready", torch.get_num_threads()))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            op, *args = conn.recv()
        except EOFError:  # the parent went away
            return
        try:
            if op == "close":
                return
            if op == "load":
                t0 = time.perf_counter()
                model.load_state_dict(shared)
                conn.send(("loaded", time.perf_counter() - t0))
            elif op == "generate":
                prompts, sampling, seeds, offset, interruptible = args
                batch = backend.generate(prompts, sampling, seeds=seeds, offset=offset,
                                         interrupt=cut.is_set if interruptible else None)
                conn.send(("batch", _to_wire(batch)))
            else:
                conn.send(("error", f"unknown request {op!r}"))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            conn.send(("error", traceback.format_exc()))


class ProcessBackend(BackendDefaults):
    """A `RolloutBackend` whose generation runs in one child process (see the module docstring).

    Only seeded generation (the engine's rollouts) is served; evaluation stays with the trainer's own
    backend. `policy_version` is the version of the weights last loaded."""

    interruptible = True

    def __init__(self, model: torch.nn.Module, *, device: str | torch.device, eos_token_ids: Sequence[int],
                 pad_token_id: int, threads: int = 1, start_timeout_s: float = 600.0) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.pad_token_id, self.policy_version = int(pad_token_id), 0
        self._shared = {k: v.detach().to("cpu").clone().share_memory_() for k, v in model.state_dict().items()}
        self._conn, child = ctx.Pipe()
        self._cut = ctx.Event()
        self._proc = ctx.Process(
            target=_serve, name="rollout-generator", daemon=True,
            args=(child, self._cut, ModelSpec.of(model), str(device), self._shared, list(eos_token_ids),
                  self.pad_token_id, threads))
        self._proc.start()
        child.close()
        self._metrics: dict[str, float] = {}
        self.threads = int(self._call("ready", timeout=start_timeout_s))

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _died(self) -> WorkbenchError:
        self._proc.join(timeout=1.0)
        return WorkbenchError(f"the rollout generator process (pid {self._proc.pid}) died "
                              f"(exit code {self._proc.exitcode}); the run stops and `workbench resume` "
                              "continues it from its last checkpoint")

    def _call(self, want: str, *, timeout: float | None = None,
              interrupt: Callable[[], bool] | None = None) -> Any:
        """Wait for the child's answer `want`, polling `interrupt` meanwhile; raise if the child died."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                if self._conn.poll(POLL_S):
                    kind, value = self._conn.recv()
                    break
            except (EOFError, OSError):
                raise self._died() from None
            if not self._proc.is_alive():
                raise self._died()
            if interrupt is not None and not self._cut.is_set() and interrupt():
                self._cut.set()
            if deadline is not None and time.monotonic() > deadline:
                self.close()
                raise WorkbenchError(f"the rollout generator process did not answer within {timeout:g} s")
        if kind == "error":
            raise WorkbenchError(f"the rollout generator process failed:\n{value}")
        if kind != want:
            raise WorkbenchError(f"the rollout generator process answered {kind!r} where {want!r} was expected")
        return value

    def _send(self, *msg: Any) -> None:
        try:
            self._conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):
            raise self._died() from None

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Have the child load the state dict `state` as `version` (copied into the shared buffers first)."""
        with torch.no_grad():
            for k, v in state.items():
                self._shared[k].copy_(v)
        self._send("load")
        self._metrics["timing_s/weight_reload"] = self._metrics.get("timing_s/weight_reload", 0.0) + \
            float(self._call("loaded"))
        self.policy_version = version

    def update_weights(self, model: torch.nn.Module) -> None:
        self.load_state(model.state_dict(), self.policy_version + 1)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None,
                 interrupt: Callable[[], bool] | None = None, offset: int = 0) -> GenerationBatch:
        """Sample in the child (see `HFBackend.generate`); only seeded calls are served."""
        if seeds is None:
            raise WorkbenchError("the rollout generator process samples with per-group seeds only "
                                 "(evaluation runs on the trainer's backend)")
        self._cut.clear()
        self._send("generate", [list(map(int, p)) for p in prompts], sampling, [int(x) for x in seeds], int(offset),
                   interrupt is not None)
        return _from_wire(self._call("batch", interrupt=interrupt))

    def take_metrics(self) -> dict[str, float]:
        m, self._metrics = self._metrics, {}
        return m

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(timeout=5.0)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5.0)
        self._conn.close()
