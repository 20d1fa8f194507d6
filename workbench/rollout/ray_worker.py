"""The actor side of the Ray rollout backend (`workbench/rollout/ray_backend.py` is the driver's):
`RolloutWorker`, one Ray actor holding a copy of the policy and a generation backend (`HFBackend` on
its CPU or GPU, `VLLMBackend` on a GPU), and the weights' form on the way to it (`pack_state` in the
trainer's process, `unpack_state` in the worker's: numpy arrays that Ray's object store hands to every
worker without a copy). A worker reloads the latest weights before generating when its own are older
(a restarted worker comes back with its first ones), and dies like a `kill -9` when a test asks it to.
Each call answers with its spans of work on this worker's own clock (`spans`: (phase, start, end) in
`time.time()` seconds; `clock`: when the call began and ended here), which the driver places on the
trainer's clock (`workbench/rollout/worker_lanes.py`).
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from typing import Any, Mapping

import numpy as np
import torch

from workbench.rollout.base import ModelSpec, SamplingParams


def pack_state(state: Mapping[str, torch.Tensor]) -> list[tuple[str, str, np.ndarray]]:
    """A state dict as (name, dtype, CPU array): numpy arrays travel through Ray's object store
    without a copy and are read in place by each worker (bfloat16 travels as its int16 bits)."""
    out = []
    for name, t in state.items():
        t = t.detach().to("cpu").contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        arr = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        out.append((name, dtype, arr))
    return out


def unpack_state(packed: list[tuple[str, str, np.ndarray]]) -> dict[str, torch.Tensor]:
    out = {}
    with warnings.catch_warnings():  # arrays read in place from the object store are read-only:
        warnings.simplefilter("ignore", UserWarning)  # load_state_dict only copies out of them
        for name, dtype, arr in packed:
            t = torch.from_numpy(arr)
            out[name] = t.view(torch.bfloat16) if dtype == "bfloat16" else t
    return out


class RolloutWorker:
    """One Ray actor: a copy of the policy and a generation backend (see the module docstring)."""

    def __init__(self, name: str, kind: str, spec: ModelSpec, state: list, eos_token_ids: list[int],
                 pad_token_id: int, threads: int, gpus: float, deterministic: bool, model_path: str | None = None,
                 vllm_options: dict | None = None) -> None:
        torch.set_num_threads(max(1, threads))
        torch.use_deterministic_algorithms(deterministic, warn_only=gpus > 0)
        self.name, self.kind, self.version, self.fault = name, kind, 0, None
        self.device = "cuda" if gpus > 0 else "cpu"
        if kind == "vllm":
            from workbench.rollout.vllm_backend import VLLMBackend

            self.backend = VLLMBackend.from_path(model_path, eos_token_ids=eos_token_ids,
                                                 pad_token_id=pad_token_id, **(vllm_options or {}))
            self.model = None
        else:
            from workbench.rollout.hf import HFBackend

            self.backend = HFBackend.in_worker(spec, unpack_state(state), self.device, eos_token_ids=eos_token_ids,
                                               pad_token_id=pad_token_id)
            self.model = self.backend.model

    def info(self) -> dict[str, Any]:
        import ray

        return dict(name=self.name, pid=os.getpid(), node=ray.get_runtime_context().get_node_id(),
                    device=self.device, host=socket.gethostname(), threads=torch.get_num_threads())

    def _install(self, box: list, version: int) -> tuple[str, float, float]:
        """Load the weights in `box[0]` (an object-store reference); the install's span."""
        import ray

        start = time.time()
        state = unpack_state(ray.get(box[0]))
        if self.model is not None:
            self.model.load_state_dict(state)
        else:
            self.backend.load_weights(state.items())
        self.version = version
        return ("weight_sync", start, time.time())

    def load(self, box: list, version: int) -> dict[str, Any]:
        """Install new weights (see `_install`); the span, the call's clock and this process's pid."""
        span = self._install(box, version)
        return dict(spans=[span], clock=(span[1], span[2]), pid=os.getpid())

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int], version: int,
                 box: list | None, fault: str | None = None) -> dict[str, Any]:
        """Sample the rows; reload the latest weights first when this worker's are older. With the batch,
        this process's pid and the call's spans (weight install, generate) on this worker's clock."""
        entered = time.time()
        spans = [self._install(box, version)] if box and version != self.version else []
        if fault == "kill":  # fault injection for tests: die like a `kill -9` mid-call
            os.kill(os.getpid(), 9)
        start = time.time()
        batch = self.backend.generate(prompts, sampling, seeds=seeds)
        spans.append(("generate", start, time.time()))
        return dict(batch=batch, pid=os.getpid(), spans=spans, clock=(entered, time.time()))
