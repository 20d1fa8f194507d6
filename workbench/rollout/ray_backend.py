"""Rollout workers as Ray actors (`rollout.backend = "ray"`).

This is the driver's side. `RayBackend` keeps `rollout.workers` actors (`RolloutWorker`, the actor's
side, in `ray_worker.py`), each holding a copy of the policy and a generation backend (`HFBackend` on
the CPU or on the GPU Ray assigns it; `VLLMBackend` on a GPU). The engine talks to it through the same
`RolloutBackend` interface as the in-process backend:

1. Split: a stage's rows are grouped by sampling seed (one group = one prompt's rollouts of the
   stage), and the groups are dealt to the workers largest first, each to the least-loaded worker,
   weighing a group by its expected tokens (prompt tokens + rollouts x expected new tokens)
   (`split_groups`). Results come back in the engine's row order, each row naming its worker.
2. Seeds: each group samples from its own stream seeded by the engine from (run seed, step, stage,
   prompt) (`group_seed`), so 1, 2 or N workers give the rollouts of the in-process backend.
3. Weights: after each policy update the trainer's state dict is put once in Ray's object store and
   every worker loads it before its next generation (`update_weights`, `load_state`; the step's
   `timing_s/weight_sync`). Each call also carries the policy version, so a restarted worker (which
   comes back with its first weights) reloads the latest before generating. Between GPUs, an NCCL
   broadcast from the trainer would replace the object store in `update_weights` (docs/engine.md).
4. Failures: a worker that dies (its process killed) is restarted by Ray (`max_restarts`) and its
   share of the stage is generated again; the step's events name the worker. Nothing reaches the
   store before the whole stage is back, so nothing is written twice.
5. Evaluation (calls without `seeds`) runs in the trainer's process on the trainer's model.
6. The asynchronous pipeline: `generator_backend` lends the workers to the pipeline's generator
   (`RayGenerator`), which pushes them its own weights; meanwhile `update_weights` only moves the
   trainer's version and the per-worker figures go with the generator's batches. Closing the
   generator gives the workers back (a guard's rollback makes the pipeline again over the same
   workers); the run's end closes them.

Per-worker figures for the step (`take_metrics`): `perf/worker/<name>/rollouts_per_s` (rows over the
worker's own generation time), `rollout/workers`, and each worker's lanes (`lane/<name>/<phase>/...`:
its generate, weight_sync, restart and idle spans, timed on the worker and placed on the trainer's clock
by `workbench/rollout/worker_lanes.py`).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from workbench.errors import WorkbenchError
from workbench.rollout.base import BackendDefaults, GenerationBatch, ModelSpec, SamplingParams, check_offset
from workbench.rollout.ray_worker import RolloutWorker, pack_state
from workbench.rollout.worker_lanes import WorkerLanes


@dataclass(frozen=True)
class RayOptions:
    """What the Ray backend needs from `[rollout]` (see `workbench.config.RolloutConfig`)."""

    workers: int = 1
    worker_backend: str = "hf"
    address: str = ""
    num_cpus: int = 0
    worker_cpus: float = 0.0
    worker_gpus: float = 0.0
    max_restarts: int = 3
    start_timeout_s: float = 120.0
    deterministic: bool = True
    model_path: str | None = None
    """The model directory as the workers' nodes see it (vLLM workers load from it)."""
    gpu_memory_utilization: float = 0.3
    seed: int = 0
    """The run's seed (vLLM workers seed their engine with it)."""

    @classmethod
    def from_config(cls, cfg: Any, *, model_path: str | None = None) -> "RayOptions":
        r = cfg.rollout
        return cls(workers=r.workers, worker_backend=r.worker_backend, address=r.ray_address,
                   num_cpus=r.num_cpus, worker_cpus=r.worker_cpus, worker_gpus=r.worker_gpus,
                   max_restarts=r.max_restarts, start_timeout_s=r.start_timeout_s,
                   deterministic=cfg.model.deterministic, model_path=model_path,
                   gpu_memory_utilization=r.gpu_memory_utilization, seed=cfg.seed)

    def vllm_options(self, dtype: str) -> dict[str, Any] | None:
        """`VLLMBackend.from_path` options of a vLLM worker: the trainer's dtype (vLLM's "auto" would
        load the float32 organism as bfloat16) and the run's seed; None for HF workers."""
        if self.worker_backend != "vllm":
            return None
        return dict(gpu_memory_utilization=self.gpu_memory_utilization, sleep=False, dtype=dtype, seed=self.seed)


# -- pure parts: the split and the reassembly -------------------------------------------------------

def split_groups(seeds: Sequence[int], prompt_lengths: Sequence[int], new_tokens: float,
                 workers: int) -> list[list[int]]:
    """Row indices per worker: rows sharing a seed stay together; groups are dealt largest first to
    the least-loaded worker, a group weighing its prompt once (prefilled once) plus `new_tokens` per
    row. Deterministic; each worker's rows keep the engine's order."""
    if len(seeds) != len(prompt_lengths):
        raise WorkbenchError(f"split_groups: {len(seeds)} seeds for {len(prompt_lengths)} prompts")
    groups: dict[int, list[int]] = {}
    for row, seed in enumerate(seeds):
        groups.setdefault(int(seed), []).append(row)
    weight = {s: prompt_lengths[rows[0]] + len(rows) * new_tokens for s, rows in groups.items()}
    order = sorted(groups, key=lambda s: (-weight[s], groups[s][0]))
    load = [0.0] * workers
    share: list[list[int]] = [[] for _ in range(workers)]
    for s in order:
        w = min(range(workers), key=lambda i: (load[i], i))
        load[w] += weight[s]
        share[w].extend(groups[s])
    return [sorted(rows) for rows in share]


def merge_batches(parts: list[tuple[list[int], GenerationBatch, str]], n: int, pad_token_id: int,
                  gen_time_s: float) -> GenerationBatch:
    """One GenerationBatch of `n` rows from (row indices, batch, worker name) parts."""
    width = max((b.tokens.shape[1] for _, b, _ in parts), default=0)
    tokens = torch.full((n, width), pad_token_id, dtype=torch.long)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    entropy = torch.zeros((n, width), dtype=torch.float32)
    lengths = torch.zeros(n, dtype=torch.long)
    finished = torch.zeros(n, dtype=torch.bool)
    workers = [""] * n
    for rows, b, name in parts:
        idx = torch.as_tensor(rows, dtype=torch.long)
        t = b.tokens.shape[1]
        tokens[idx, :t] = b.tokens.long()
        logprobs[idx, :t] = b.logprobs.float()
        entropy[idx, :t] = b.entropy.float()
        lengths[idx] = b.lengths.long()
        finished[idx] = b.finished.bool()
        for r in rows:
            workers[r] = name
    return GenerationBatch(tokens=tokens, logprobs=logprobs, entropy=entropy, lengths=lengths,
                           finished=finished, gen_time_s=gen_time_s, workers=workers)


def start_local_ray(attempts: int = 3, **kwargs: Any) -> None:
    """`ray.init` of a local runtime without dashboard, tried again when its node misses Ray's fixed
    30 s start-up deadline (seen on an overloaded machine: its agent process started too slowly)."""
    import ray

    kwargs = dict(dict(include_dashboard=False, log_to_driver=False, configure_logging=False), **kwargs)
    for attempt in range(attempts):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt + 1 == attempts:
                raise
            ray.shutdown()


def connect(options: RayOptions) -> bool:
    """Join or start Ray; returns True when this call started it (and its owner should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    address = options.address.strip()
    if address and address != "auto":
        host, _, port = address.rpartition(":")
        if address.startswith("ray://"):
            host, port = address[6:].rpartition(":")[0], address.rpartition(":")[2]
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=min(10.0, options.start_timeout_s)):
                pass
        except (OSError, ValueError) as exc:
            raise WorkbenchError(f"rollout.ray_address: cannot reach a Ray cluster at {address!r} ({exc}); "
                                 f"start one with `ray start --head` or leave the field empty for a local runtime")
    try:
        if address:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        else:
            start_local_ray(num_cpus=options.num_cpus or os.cpu_count())
    except ConnectionError as exc:
        raise WorkbenchError(f"rollout.ray_address: cannot reach a Ray cluster at {address!r}: "
                             f"{str(exc).splitlines()[0]}") from None
    return True


class RayBackend(BackendDefaults):
    """RolloutBackend over `options.workers` Ray actors; `local` (the trainer's in-process backend)
    serves evaluation and owns the policy version."""

    def __init__(self, model: torch.nn.Module, local: Any, options: RayOptions) -> None:
        self.options, self.local = options, local
        self.pad_token_id = int(local.pad_token_id)
        self._started = connect(options)
        self._box: list | None = None
        self._synced = 0
        self._metrics: dict[str, float] = {}
        self._lanes = WorkerLanes()  # what each worker did, on the trainer's clock
        self._sent: dict[int, float] = {}  # when each worker's call in flight was submitted
        self._gap: Any = None  # vLLM workers: a LogprobGap (their log-probs against the trainer's)
        self._events: list[dict[str, Any]] = []
        self._faults: dict[int, str] = {}
        self._lent = False  # the workers generate for a pipeline's generator (`generator_backend`)
        try:
            self._start_workers(model)
        except BaseException:
            self.close()
            raise

    # the policy version is the local backend's (the engine sets it on resume)
    @property
    def policy_version(self) -> int:
        return self.local.policy_version

    @policy_version.setter
    def policy_version(self, value: int) -> None:
        self.local.policy_version = value

    def _cpus_per_worker(self) -> float:
        import ray

        if self.options.worker_cpus:
            return self.options.worker_cpus
        if self.options.address:
            return 1.0
        total = ray.cluster_resources().get("CPU", 1.0)
        return max(1.0, float(int(total // self.options.workers)))

    def _start_workers(self, model: torch.nn.Module) -> None:
        import ray

        o = self.options
        cpus = self._cpus_per_worker()
        actor = ray.remote(RolloutWorker).options(num_cpus=cpus, num_gpus=o.worker_gpus, max_restarts=o.max_restarts,
                                                  max_task_retries=0)
        self._init_state = ray.put(pack_state(model.state_dict()))
        spec = ModelSpec.of(model)
        vllm = o.vllm_options(spec.dtype)
        self.names = [f"ray-{i}" for i in range(o.workers)]
        self.workers = [actor.remote(name, o.worker_backend, spec, self._init_state, list(self.local.eos_token_ids),
                                     self.pad_token_id, int(cpus), o.worker_gpus, o.deterministic, o.model_path, vllm)
                        for name in self.names]
        try:
            infos = ray.get([w.info.remote() for w in self.workers], timeout=o.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise WorkbenchError(
                f"rollout.workers: {o.workers} Ray workers asking for {cpus:g} CPUs and {o.worker_gpus:g} GPUs each "
                f"did not start within {o.start_timeout_s:g} s (cluster resources: {ray.cluster_resources()}); "
                f"lower rollout.workers / rollout.worker_cpus / rollout.worker_gpus") from None
        except ray.exceptions.RayTaskError as exc:
            raise WorkbenchError(f"rollout.workers: a Ray worker failed to start: {exc.cause!r}") from None
        self.info = {i["name"]: i for i in infos}

    # -- the RolloutBackend interface ---------------------------------------------------------------

    def update_weights(self, model: torch.nn.Module) -> None:
        """Bump the policy version, put the new weights in the object store once and have every worker
        load them (the step's `timing_s/weight_sync` when the engine times this call). While the
        workers are lent to a pipeline's generator, only the version moves: the generator ships them
        its own weights."""
        self.local.update_weights(model)
        if not self._lent:
            self._ship(model.state_dict(), self.policy_version)

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        self.local.load_state(state, version)
        if not self._lent:
            self._ship(state, version)

    def _ship(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Put `state` in the object store once and have every worker load it as `version`."""
        import ray

        self._box = [ray.put(pack_state(state))]
        self._lanes.open(self.names)
        sent = time.time()
        refs = [w.load.remote(self._box, version) for w in self.workers]
        for name, ref in zip(self.names, refs):
            try:
                self._lanes.place(name, ray.get(ref), sent, time.time())
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                # a worker died: Ray restarts it and the next generate call reloads these weights
                self._lanes.restart(name, sent, time.time())
        self._lanes.close()
        self._synced = version

    def generator_backend(self, kind: str, *, threads: int) -> "RayGenerator":
        """The workers, lent to a pipeline's generator (`kind` and `threads` concern an in-process
        generator: Ray's workers are processes of their own)."""
        return RayGenerator(self)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None,
                 interrupt: Callable[[], bool] | None = None, offset: int = 0) -> GenerationBatch:
        """Seeded rows on the workers (a batch is never cut: `interruptible` is False); evaluation
        (no seeds) on the local backend."""
        check_offset(self, offset)
        if seeds is None:
            return self.local.generate(prompts, sampling, generator=generator)
        return self._on_workers(prompts, sampling, seeds, self.expected_new_tokens)

    def _on_workers(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, seeds: Sequence[int],
                    new_tokens: float | None) -> GenerationBatch:
        start = time.perf_counter()
        new = new_tokens or sampling.max_new_tokens
        shares = split_groups(seeds, [len(p) for p in prompts], new, len(self.workers))
        pending = {i: rows for i, rows in enumerate(shares) if rows}
        self._lanes.open(self.names)
        calls = {i: self._submit(i, rows, prompts, sampling, seeds) for i, rows in pending.items()}
        parts = []
        for i, rows in pending.items():
            out = self._collect(i, calls[i], rows, prompts, sampling, seeds)
            parts.append((rows, out["batch"], self.names[i]))
            self._note(i, len(rows), out)
        self._lanes.close()
        batch = merge_batches(parts, len(prompts), self.pad_token_id, time.perf_counter() - start)
        if not all(b.has_entropy for _, b, _ in parts):  # vLLM workers: entropy from the trainer's model
            from workbench.rollout.vllm_backend import LogprobGap

            self._gap = self._gap or LogprobGap()
            self._gap.score(self.local.model, prompts, batch, sampling, self.pad_token_id)
        return batch

    def _submit(self, i: int, rows: list[int], prompts, sampling, seeds):
        version = self._synced if self._box is not None else 0  # what the workers were last sent
        fault = self._faults.pop(i, None)
        self._sent[i] = time.time()
        return self.workers[i].generate.remote([list(prompts[r]) for r in rows], sampling,
                                               [int(seeds[r]) for r in rows], version, self._box, fault)

    def _collect(self, i: int, ref, rows, prompts, sampling, seeds) -> dict[str, Any]:
        """The worker's result; when it died, wait for Ray's restart and generate its share again."""
        import ray

        for attempt in range(self.options.max_restarts + 1):
            try:
                out = ray.get(ref)
                out["placed"] = self._lanes.place(self.names[i], out, self._sent[i], time.time())
                return out
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                name, pid = self.names[i], self.info[self.names[i]]["pid"]
                self._events.append(dict(level="warning", kind="worker_restart", message=(
                    f"rollout worker {name} (pid {pid}) died while generating {len(rows)} rollouts; "
                    f"Ray restarts it and its share of the stage is generated again"),
                    data=dict(worker=name, pid=pid, rows=len(rows), attempt=attempt + 1)))
                if attempt == self.options.max_restarts or not self._wait_alive(i):
                    raise WorkbenchError(f"rollout worker {name} died and was not restarted (rollout.max_restarts "
                                         f"= {self.options.max_restarts}): {str(exc).splitlines()[0]}") from None
                self._lanes.restart(name, self._sent[i], time.time())  # down until its share is sent again
                ref = self._submit(i, rows, prompts, sampling, seeds)
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None
        raise AssertionError("unreachable")

    def _wait_alive(self, i: int) -> bool:
        """Wait (up to `start_timeout_s`) for Ray to bring worker `i` back; False when it stays dead."""
        import ray

        deadline = time.monotonic() + self.options.start_timeout_s
        while time.monotonic() < deadline:
            try:
                info = ray.get(self.workers[i].info.remote(), timeout=max(1.0, deadline - time.monotonic()))
                self.info[info["name"]] = info
                return True
            except ray.exceptions.ActorUnavailableError:  # restarting: ask again shortly
                time.sleep(0.2)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                return False
        return False

    def _note(self, i: int, rows: int, out: dict[str, Any]) -> None:
        name = self.names[i]
        old = self.info[name]["pid"]
        if out["pid"] != old:
            self.info[name]["pid"] = out["pid"]
            if not any(e["data"].get("worker") == name for e in self._events):
                self._events.append(dict(level="warning", kind="worker_restart", message=(
                    f"rollout worker {name} was restarted by Ray (pid {old} -> {out['pid']}); "
                    f"it reloaded the policy's latest weights before generating"),
                    data=dict(worker=name, pid=old, new_pid=out["pid"])))
        m = self._metrics
        busy = {"generate": 0.0, "weight_sync": 0.0}
        for phase, start, end in out["placed"]:  # the worker's own seconds, as its lanes hold them
            busy[phase] = busy.get(phase, 0.0) + (end - start)
        m[f"_rows/{name}"] = m.get(f"_rows/{name}", 0.0) + rows
        m[f"_time/{name}"] = m.get(f"_time/{name}", 0.0) + busy["generate"]
        m["_load"] = m.get("_load", 0.0) + busy["weight_sync"]

    # -- what the engine logs -----------------------------------------------------------------------

    def take_metrics(self) -> dict[str, float]:
        """This step's per-worker figures (and resets them); none while the workers are lent to a
        pipeline's generator, whose batches carry them."""
        return {} if self._lent else self._take_metrics()

    def _take_metrics(self) -> dict[str, float]:
        m, self._metrics = self._metrics, {}
        out: dict[str, float] = {"rollout/workers": float(len(self.workers))}
        for name in self.names:
            rows, t = m.get(f"_rows/{name}", 0.0), m.get(f"_time/{name}", 0.0)
            if rows:
                out[f"perf/worker/{name}/rollouts_per_s"] = rows / max(t, 1e-9)
                out[f"perf/worker/{name}/rollouts"] = rows
        if m.get("_load"):
            out["timing_s/weight_reload"] = m["_load"]
        if self._gap is not None:
            out.update(self._gap.take())
        out.update(self._lanes.metrics())
        return out

    def take_events(self) -> list[dict[str, Any]]:
        return [] if self._lent else self._take_events()

    def _take_events(self) -> list[dict[str, Any]]:
        ev, self._events = self._events, []
        return ev

    def inject_fault(self, worker: int, fault: str = "kill") -> None:
        """Tests: the worker kills its own process (as `kill -9` would) during its next generate call."""
        self._faults[worker] = fault

    def worker_pids(self) -> dict[str, int]:
        import ray

        infos = ray.get([w.info.remote() for w in self.workers], timeout=self.options.start_timeout_s)
        for i in infos:
            self.info[i["name"]] = i
        return {i["name"]: i["pid"] for i in infos}

    def close(self) -> None:
        import ray

        for w in getattr(self, "workers", []):
            try:
                ray.kill(w, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers = []
        if self._started and ray.is_initialized():
            ray.shutdown()
            self._started = False


class RayGenerator(BackendDefaults):
    """The workers of a `RayBackend` as the backend of an asynchronous pipeline's generator: seeded
    generation only, weights of its own pushed with `load_state`, a policy version of its own. The
    workers stay the run's: `close` gives them back to the `RayBackend`, which closes them at the end."""

    def __init__(self, ray_backend: RayBackend) -> None:
        self.ray = ray_backend
        self.policy_version = ray_backend.policy_version
        ray_backend._lent = True

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None,
                 interrupt: Callable[[], bool] | None = None, offset: int = 0) -> GenerationBatch:
        check_offset(self, offset)
        if seeds is None:
            raise WorkbenchError("the pipeline's Ray generator samples with per-group seeds only "
                                 "(evaluation runs on the trainer's backend)")
        return self.ray._on_workers(prompts, sampling, seeds, self.expected_new_tokens)

    def update_weights(self, model: torch.nn.Module) -> None:
        self.load_state(model.state_dict(), self.policy_version + 1)

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        self.ray._ship(state, version)
        self.policy_version = version

    def take_metrics(self) -> dict[str, float]:
        return self.ray._take_metrics()

    def take_events(self) -> list[dict[str, Any]]:
        return self.ray._take_events()

    def close(self) -> None:
        self.ray._lent = False
