"""The loop's producer, synchronous or pipelined, over the one function that makes a batch (`collect`).

`make_producer` picks it from `[pipeline]`: with no staleness allowed (`pipeline.max_staleness` and
its bound 0, the default) batches are made on demand in the trainer's thread, exactly the loop
before the pipeline existed; otherwise the pipeline's generator thread makes them ahead
(`workbench.engine.pipeline.Pipeline`) with a backend of its own, which the run's backend gives it
through the backend contract (`RolloutBackend.generator_backend`): a generator process
(`pipeline.generator = "process"`, the default), an in-process backend over a copy of the weights
("thread"), or the run's Ray workers. The run's backend (`ctx.parts.backend`) is never replaced: it keeps
evaluating from the trainer's weights, and a producer made again (after a guard's rollback) asks it
for the same kind of generator.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Union

import torch

from workbench.engine.batch import Batch, collect
from workbench.engine.context import RunContext
from workbench.engine.pipeline import Pipeline, Synchronous
from workbench.store.inflight import stepping

Producer = Union[Synchronous[Batch], Pipeline[Batch]]


def make_producer(ctx: RunContext, start: int, queued: list, *,
                  on_stage: Callable[[int, int], None] = lambda step, stage: None) -> Producer:
    """The producer of steps `start`.. for this run. `on_stage(step, stage)` runs at the stage
    boundaries of the synchronous loop (stage-boundary controls); the pipeline's generator does not
    poll controls: they reach its batches at the next step boundary the trainer sees."""
    s = ctx.parts
    pc = s.cfg.pipeline
    if not pc.enabled:
        def made(step: int, version: int) -> Batch:
            with stepping(s.backend, step):  # the Live page's rollouts in flight name the step
                return collect(ctx, step, version, on_stage=lambda stage: on_stage(step, stage))

        return Synchronous(made, s.backend)
    threads = pc.threads_per_side or max(1, (os.cpu_count() or 2) // 2)
    # the trainer's share (torch's OpenMP thread count is kept per calling thread: the generator
    # thread sets its own, this call sets the trainer's)
    torch.set_num_threads(threads)
    backend = s.backend.generator_backend(pc.generator, threads=threads)
    gen = dataclasses.replace(ctx, parts=dataclasses.replace(s, backend=backend))  # the same state, its own backend

    def produce(step: int, version: int) -> Batch:
        with stepping(backend, step):
            batch = collect(gen, step, version, feed=pipeline if pc.partial_rollouts else None)
        batch.metrics.update(backend.take_metrics())  # Ray: per-worker figures travel with the batch
        batch.events += backend.take_events()
        return batch

    pipeline = Pipeline(produce, first=start, last=s.cfg.steps, eta=ctx.state.live.staleness, version=start - 1,
                        trainer=s.backend, generator=backend, threads=threads, queued=queued, start=False)
    pipeline.start()
    return pipeline
