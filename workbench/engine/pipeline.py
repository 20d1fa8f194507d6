"""Where the loop's batches come from: produced on demand (`Synchronous`), or by a generator thread
running ahead of the trainer within a staleness bound (`Pipeline`).

Weights: the loop hands the trainer's new weights to its producer (`push`) and nowhere else. The
synchronous producer gives them to the run's backend (`update_weights`); the pipeline gives them to
the trainer's backend (its policy version) and a copy to the generator's backend (`load_state`, on
the generator thread). Both backends keep the `RolloutBackend` contract (`workbench.rollout.base`).

Versions: the policy version is the number of training steps whose weights the generator holds, so
the batch of step j, made under version v, is `j - 1 - v` versions stale when the trainer takes it
(the synchronous loop: always 0). The trainer `push`es after every step (new weights, or none when
the step did not update); the generator installs them between batches and only then bumps its
version, reading it once per batch.

Admission (AReaL's capacity rule, in batches): the batch of step j may start only while
accepted + running < (eta + version + 1) batches, i.e. j - 1 - eta <= version. So no batch is ever
consumed more than eta versions stale, no finished batch is ever dropped for its age, and at eta = 0
the generator waits for each update exactly as the synchronous loop does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from typing import Any, Callable, Generic, Iterator, TypeVar

import torch

from workbench.engine.timing import GENERATOR_THREAD, worker_of
from workbench.errors import WorkbenchError
from workbench.metrics import Lanes
from workbench.rollout.base import RolloutBackend

T = TypeVar("T")


class Synchronous(Generic[T]):
    """The synchronous loop's producer: each batch is made when the trainer asks for it, by `backend`."""

    def __init__(self, produce: Callable[[int, int], T], backend: RolloutBackend | None = None) -> None:
        self.produce, self.backend = produce, backend

    def take(self, step: int) -> T:
        return self.produce(step, step - 1)

    def push(self, version: int, model: Any = None) -> None:
        """The trainer finished the step of `version`: its new weights `model` (None: unchanged) go to
        the backend (the in-process one already holds them; Ray's workers and vLLM load them)."""
        if model is not None and self.backend is not None:
            self.backend.update_weights(model)

    def set_eta(self, eta: int) -> None:
        """No staleness here."""

    def paused(self) -> contextlib.AbstractContextManager[list[tuple[int, int, T]]]:
        return contextlib.nullcontext([])

    def take_metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass


class Pipeline(Generic[T]):
    """A generator thread calling `produce(step, version)` for steps `first`..`last`, ahead of the
    trainer by at most `eta` versions. A push gives the trainer's `trainer` backend the new weights
    (its policy version) and installs a copy in the `generator` backend on the generator thread.

    `queued` are batches made before a resume (step, version, batch), consumed first. A failure in
    the generator is re-raised by the trainer's next `take` (the run stops, it never hangs). `threads`
    (when > 0) sets torch's intra-op threads, which are one setting per process: both sides use it.
    `close` closes the generator backend (never the trainer's)."""

    def __init__(self, produce: Callable[[int, int], T], *, first: int, last: int, eta: int, version: int,
                 trainer: RolloutBackend | None = None, generator: RolloutBackend | None = None, threads: int = 0,
                 queued: list[tuple[int, int, T]] | None = None, start: bool = True) -> None:
        self.produce, self.trainer, self.generator, self.threads = produce, trainer, generator, threads
        self.eta, self.version, self.last = eta, version, last
        self.queue: deque[tuple[int, int, T]] = deque(queued or [])
        self.next = self.queue[-1][0] + 1 if self.queue else first
        self._cond = threading.Condition()
        self._pending: tuple[int, Any, int] | None = None
        self._error: BaseException | None = None
        self._stop = self._paused = self._busy = False
        self._clock = {"generator_busy": 0.0, "generator_idle": 0.0, "trainer_idle": 0.0}
        self._lanes = Lanes()  # the generator's idle waits and weight installs, the trainer's waits
        self._thread = threading.Thread(target=self._run, name=GENERATOR_THREAD, daemon=True)
        if start:
            self._thread.start()

    def start(self) -> None:
        """Start the generator thread (when built with `start=False`)."""
        self._thread.start()

    # -- the generator thread ------------------------------------------------------------------------

    def admissible(self, step: int) -> bool:
        """accepted + running < (eta + version + 1) batches, for the batch of `step`."""
        return step - 1 - self.eta <= self.version

    def _run(self) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            while True:
                t_wait, w_wait = time.perf_counter(), time.time()
                with self._cond:
                    while True:
                        if self._stop:
                            return
                        if self._pending is not None:
                            self._install()
                            continue
                        if not self._paused and self.next <= self.last and self.admissible(self.next):
                            break
                        self._cond.wait()
                    step, version, self._busy = self.next, self.version, True
                    self.next += 1
                t0, w0 = time.perf_counter(), time.time()
                item = self.produce(step, version)
                t1 = time.perf_counter()
                with self._cond:
                    self.queue.append((step, version, item))
                    self._busy = False
                    if t0 - t_wait > 1e-3:
                        self._lanes.add("generator", "idle", w_wait, w0)
                    self._clock["generator_idle"] += t0 - t_wait
                    self._clock["generator_busy"] += t1 - t0
                    self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer, which re-raises it
            with self._cond:
                self._error, self._busy = exc, False
                self._cond.notify_all()

    def _install(self) -> None:
        """Install the pushed weights (the lock held, on the generator thread) as the trainer's policy
        version of the push (two pushes the generator did not install in between count as two)."""
        version, weights, policy = self._pending
        self._pending = None
        if weights is not None and self.generator is not None:
            w0 = time.time()
            self.generator.load_state(weights, policy)
            self._lanes.add(worker_of(), "weight_sync", w0, time.time())
        self.version = version  # bumped only once the weights are in place
        self._cond.notify_all()

    def pending(self) -> bool:
        """Whether the trainer pushed weights the generator has not installed (partial rollouts)."""
        return self._pending is not None

    def refresh(self) -> int:
        """Install pushed weights mid-batch (generator thread); return the version now held."""
        with self._cond:
            if self._pending is not None:
                self._install()
            return self.version

    # -- the trainer's side ----------------------------------------------------------------------------

    def take(self, step: int) -> T:
        """The batch of `step` (waiting for it); raises if the generator died."""
        t0, w0 = time.perf_counter(), time.time()
        with self._cond:
            while not self.queue and self._error is None:
                self._cond.wait(timeout=1.0)
            self._clock["trainer_idle"] += time.perf_counter() - t0
            if time.perf_counter() - t0 > 1e-3:
                self._lanes.add("trainer", "idle", w0, time.time())
            if not self.queue:
                raise WorkbenchError(f"the rollout generator stopped at step {self.next - 1}: "
                                     f"{type(self._error).__name__}: {self._error}") from self._error
            got, _, item = self.queue.popleft()
        if got != step:
            raise WorkbenchError(f"the rollout generator made step {got} where the trainer expected {step}")
        return item

    def push(self, version: int, model: Any = None) -> None:
        """The trainer finished the step of `version`: its backend takes `model` (None: unchanged) and
        the generator a copy of its weights."""
        weights = None
        if model is not None:
            if self.trainer is not None:
                self.trainer.update_weights(model)
            weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        policy = self.trainer.policy_version if self.trainer is not None else version
        with self._cond:
            if self._pending is not None and weights is None:
                weights = self._pending[1]  # an earlier push the generator has not taken yet
            self._pending = (version, weights, policy)
            self._cond.notify_all()

    def set_eta(self, eta: int) -> None:
        """A new staleness bound, for the batches admitted from now on."""
        with self._cond:
            self.eta = eta
            self._cond.notify_all()

    @contextlib.contextmanager
    def paused(self) -> Iterator[list[tuple[int, int, T]]]:
        """Hold the generator between batches (for a checkpoint); yields the batches made but not taken."""
        with self._cond:
            self._paused = True
            while self._busy:
                self._cond.wait()
            queued = list(self.queue)
        try:
            yield queued
        finally:
            with self._cond:
                self._paused = False
                self._cond.notify_all()

    def take_metrics(self) -> dict[str, float]:
        """Busy and idle seconds of both sides since the last call (`timing_s/...`), and the spans of
        their waits and the generator's weight installs (`lane/...`, workbench/engine/timing.py)."""
        with self._cond:
            out = {f"timing_s/{k}": v for k, v in self._clock.items()}
            out.update(self._lanes.metrics())
            self._clock = dict.fromkeys(self._clock, 0.0)
            out["rollout/queued_batches"] = float(len(self.queue))
        return out

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        if self.generator is not None:  # what the generator held (a child process; Ray's workers go back)
            self.generator.close()
