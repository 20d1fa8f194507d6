"""The loop's producer, synchronous or pipelined, over the one function that makes a batch (`collect`).

`make_producer` picks it from `[pipeline]`: with no staleness allowed (`pipeline.max_staleness` and
its bound 0, the default) batches are made on demand in the trainer's thread, exactly the loop
before the pipeline existed; otherwise a generator thread with its own copy of the weights and its own
backend makes them ahead (`workbench.engine.pipeline.Pipeline`): a generator process
(`pipeline.generator = "process"`, the default), the thread's own in-process backend ("thread"),
or the run's Ray workers.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Callable, Union

import torch

from workbench.engine.batch import Batch, collect
from workbench.engine.pipeline import Pipeline, Synchronous
from workbench.engine.setup import Setup, StepState

Producer = Union[Synchronous[Batch], Pipeline[Batch]]


def make_producer(s: Setup, state: StepState, start: int, queued: list, *,
                  on_stage: Callable[[int, int], None] = lambda step, stage: None) -> Producer:
    """The producer of steps `start`.. for this run. `on_stage(step, stage)` runs at the stage
    boundaries of the synchronous loop (stage-boundary controls); a generator thread does not poll
    controls: they reach its batches at the next step boundary the trainer sees."""
    pc, closing = s.cfg.pipeline, []
    if not pc.enabled:
        return Synchronous(lambda step, version: collect(
            s, state, step, version, on_stage=lambda stage: on_stage(step, stage)))
    threads = pc.threads_per_side or max(1, (os.cpu_count() or 2) // 2)
    # the trainer's share (torch's OpenMP thread count is kept per calling thread: the generator
    # thread sets its own, this call sets the trainer's)
    torch.set_num_threads(threads)
    ship = getattr(s.backend, "ship", None)  # Ray workers: they generate, from the weights shipped
    if ship is None and pc.generator == "process":
        from workbench.rollout.process_backend import ProcessBackend

        # the child holds the generator's weights: this side keeps no copy, and each push goes
        # straight into the child's shared buffers
        model, backend = s.model, ProcessBackend(s.model, device=s.device, eos_token_ids=s.backend.eos_token_ids,
                                                 pad_token_id=s.pad_id, threads=threads)
        backend.policy_version = s.backend.policy_version
        closing.append(backend.close)
        install = backend.ship
    else:
        # the generator's own weights; their requires_grad flags are kept: turning them off changes the
        # CPU kernels' rounding (measured), and eta = 0 must give the synchronous run's log-probs exactly
        model = copy.deepcopy(s.model)
        if ship is not None:
            backend, s.backend = s.backend, s.backend.local  # the trainer keeps the in-process one (evaluation)
            closing.append(backend.close)
        else:
            from workbench.rollout.hf import HFBackend

            backend = HFBackend(model, s.tokenizer, s.device)
            backend.policy_version = s.backend.policy_version

        def install(weights: dict, version: int) -> None:
            model.load_state_dict(weights)
            if ship is not None:
                ship(model, version)
            else:
                backend.policy_version = version

    gen = dataclasses.replace(s, model=model, backend=backend)
    shipped = [s.backend.policy_version]

    def load(weights: dict) -> None:
        shipped[0] += 1
        install(weights, shipped[0])

    def produce(step: int, version: int) -> Batch:
        batch = collect(gen, state, step, version, feed=pipeline if pc.partial_rollouts else None)
        batch.metrics.update(backend.take_metrics())  # Ray: per-worker figures travel with the batch
        batch.events += backend.take_events()
        return batch

    pipeline = Pipeline(produce, first=start, last=s.cfg.steps, eta=s.live.staleness, version=start - 1,
                        load=load, threads=threads, queued=queued,
                        start=False, on_close=closing)
    pipeline.start()
    return pipeline
