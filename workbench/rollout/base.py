"""The rollout backend contract every backend keeps (in-process Hugging Face, the generator process,
Ray workers, vLLM).

A backend turns a list of prompts (token ids, one entry per sequence to sample: the engine repeats a
prompt once per rollout granted) into sampled continuations with per-token logprobs and the entropy of
the sampling distribution at each position. The contract (`RolloutBackend`) says, besides:

- Weights: `update_weights(model)` takes the trainer's module after an optimiser step (the synchronous
  loop, and the trainer's side of the pipeline); `load_state(state, version)` takes a state dict as a
  given policy version (what the pipeline's generator installs). Both set `policy_version`.
- Interruption: `generate(..., interrupt=, offset=)`. A backend whose `interruptible` is True asks
  `interrupt()` between decoding steps and returns unfinished rows with `cut` set when it says so; a
  call with `offset` continues the seeds' streams where a cut segment of that many tokens left them.
  A backend that cannot stop a batch midway (Ray, vLLM) has `interruptible = False`, never cuts, and
  refuses a non-zero `offset`.
- The pipeline: `generator_backend(kind, threads=)` is the backend the asynchronous pipeline's
  generator thread makes batches with, holding weights of its own (pushed to it with `load_state`),
  while this backend goes on evaluating from the trainer's. Closing it releases what it started and
  nothing of this backend's (Ray's workers stay with the run).
- `close()` releases what the backend holds; the engine calls it once, when the run ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 16
    """Generation stops after this many new tokens (finish reason "length")."""


@dataclass
class GenerationBatch:
    """Results for N sequences, right-padded to the longest generation T.

    Positions at or beyond `lengths[i]` hold `pad_token_id` in `tokens` and 0 in `logprobs`/`entropy`.
    `lengths` counts generated tokens including the EOS token when one was produced.
    """

    tokens: torch.Tensor
    """[N, T] int64 generated token ids."""
    logprobs: torch.Tensor
    """[N, T] float32 log-probability of each sampled token under the sampling distribution."""
    entropy: torch.Tensor
    """[N, T] float32 entropy (nats) of the sampling distribution at each position."""
    lengths: torch.Tensor
    """[N] int64 number of generated tokens."""
    finished: torch.Tensor
    """[N] bool: True when the sequence ended with EOS ("stop"), False when it hit max_new_tokens ("length")."""
    gen_time_s: float
    """Wall time of the generation call."""
    workers: list[str] | None = None
    """[N] name of the worker that generated each sequence ("ray-0", ...); None: this process ("local")."""
    has_entropy: bool = True
    """False when the generator returned no entropy (vLLM): `entropy` holds zeros until the trainer's
    forward pass fills it (`workbench.rollout.vllm_backend.trainer_scores`)."""
    cut: torch.Tensor | None = None
    """[N] bool: generation was interrupted (new weights arrived) before the row finished or reached
    `max_new_tokens`; None: nothing was interrupted (see `HFBackend.generate`'s `interrupt`)."""

    def finish_reasons(self) -> list[str]:
        return ["stop" if f else "length" for f in self.finished.tolist()]

    def splice(self, rows: torch.Tensor, cont: "GenerationBatch", pad_token_id: int) -> "GenerationBatch":
        """This batch with its cut `rows` continued by `cont` (one row each, in order): tokens,
        log-probs and entropy concatenated after the `T` generated so far, lengths added, the finish
        and cut flags those of the continuation (a partial rollout carried over to new weights)."""
        t = self.tokens.shape[1]
        width = t + cont.tokens.shape[1]

        def widen(x: torch.Tensor, tail: torch.Tensor, value: float | int) -> torch.Tensor:
            out = torch.nn.functional.pad(x, (0, width - t), value=value)
            out[rows, t:] = tail.to(out.dtype)
            return out

        lengths, finished = self.lengths.clone(), self.finished.clone()
        lengths[rows] += cont.lengths
        finished[rows] = cont.finished
        cut = torch.zeros_like(finished)
        if cont.cut is not None:
            cut[rows] = cont.cut
        return GenerationBatch(
            tokens=widen(self.tokens, cont.tokens, pad_token_id), logprobs=widen(self.logprobs, cont.logprobs, 0.0),
            entropy=widen(self.entropy, cont.entropy, 0.0), lengths=lengths, finished=finished,
            gen_time_s=self.gen_time_s + cont.gen_time_s, workers=self.workers, has_entropy=self.has_entropy,
            cut=cut if bool(cut.any()) else None)


def group_seed(*key: int) -> int:
    """A 63-bit sampling seed for one group of rollouts, from e.g. (run seed, step, stage, prompt index).

    Derived from the key alone, never from the worker or the batch, so any split of a stage across
    workers samples every group identically."""
    import numpy as np

    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, dtype=np.uint64)[0] >> 1)


@dataclass(frozen=True)
class ModelSpec:
    """How another process rebuilds the trainer's module (the generator process, a Ray worker): its
    class, config and dtype; the weights travel apart (shared memory, Ray's object store)."""

    cls: Any
    config: Any
    dtype: str
    """torch dtype name ("float32", "bfloat16")."""

    @classmethod
    def of(cls, model: torch.nn.Module) -> "ModelSpec":
        return cls(type(model), model.config, str(next(model.parameters()).dtype).removeprefix("torch."))

    def build(self, state: Mapping[str, torch.Tensor], device: str | torch.device) -> torch.nn.Module:
        """The module in eval mode on `device`, holding `state`."""
        model = self.cls(self.config).to(getattr(torch, self.dtype)).to(device)
        model.load_state_dict(state)
        return model.eval()


class BackendDefaults:
    """The optional part of the backend contract, with what a backend that has nothing to say there
    does. The engine calls these on every backend; the shipped backends derive from this class and
    override what applies to them (vLLM offloads, Ray reports its workers and shuts its runtime down)."""

    interruptible: bool = False
    """Whether `generate` honours `interrupt` (see the module docstring); False: it never cuts a batch."""

    expected_new_tokens: float | None = None
    """Mean generated tokens per rollout so far, set by the engine before each step (a backend that
    splits a stage across workers balances by it); None: `max_new_tokens`."""

    def offload(self) -> None:
        """Free accelerator memory before the policy update (vLLM's sleep mode); no-op here."""

    def take_metrics(self) -> dict[str, float]:
        """Figures of this step the engine logs with the step's metrics (and resets them)."""
        return {}

    def take_events(self) -> list[dict]:
        """Events since the last call (e.g. a worker restarted), logged to the store's events table."""
        return []

    def close(self) -> None:
        """Release what the backend holds (workers, a runtime it started); no-op here."""

    def generator_backend(self, kind: str, *, threads: int) -> "RolloutBackend":
        """The backend of an asynchronous pipeline's generator; this one cannot feed a pipeline."""
        from workbench.errors import WorkbenchError

        raise WorkbenchError(f"pipeline.max_staleness: the rollout backend {type(self).__name__} cannot feed "
                             "an asynchronous pipeline (only the in-process and Ray backends can)")


def check_offset(backend: Any, offset: int) -> None:
    """Refuse the continuation of a cut segment on a backend that never cuts one."""
    if offset:
        from workbench.errors import WorkbenchError

        raise WorkbenchError(f"generate: offset {offset} continues a cut batch, which {type(backend).__name__} "
                             "never makes (interruptible = False)")


@runtime_checkable
class RolloutBackend(Protocol):
    """What the engine needs from a rollout backend (the module docstring says how the parts fit)."""

    policy_version: int
    """The version of the weights it samples from (set by `update_weights` and `load_state`); stored
    with each rollout."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        *,
        generator: torch.Generator | None = None,
        seeds: Sequence[int] | None = None,
        interrupt: Callable[[], bool] | None = None,
        offset: int = 0,
    ) -> GenerationBatch:
        """Sample one continuation per entry of `prompts` (token ids, BOS included).

        `seeds` gives one seed per entry: entries sharing a seed form a group sampled from one stream
        of its own (the engine's rollouts); without it `generator` drives the whole batch (evaluation).
        `interrupt` and `offset`: partial rollouts (the module docstring)."""
        ...

    def update_weights(self, model: torch.nn.Module) -> None:
        """Take the trainer's new weights (after an optimiser step); `policy_version` goes up by one."""
        ...

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Sample from the weights `state` (a state dict) from now on, as policy version `version`."""
        ...

    def generator_backend(self, kind: str, *, threads: int) -> "RolloutBackend":
        """The backend an asynchronous pipeline's generator makes batches with (`kind`: "process" or
        "thread", `pipeline.generator`; `threads`: its torch threads), starting from this backend's
        weights and version; closing it leaves this backend as it was."""
        ...

    # the optional part, with defaults in BackendDefaults
    interruptible: bool
    expected_new_tokens: float | None

    def offload(self) -> None: ...

    def take_metrics(self) -> dict[str, float]: ...

    def take_events(self) -> list[dict]: ...

    def close(self) -> None: ...
