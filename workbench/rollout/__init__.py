"""Rollout backends behind one interface (`RolloutBackend` in `workbench.rollout.base`).

`make_backend(kind, model, tokenizer, device)` builds one by name: "hf" (in-process Hugging Face
generation, CPU or CUDA) works everywhere; "vllm" needs the `gpu` extra and CUDA, "ray" the `ray`
extra. `backend_for_run(cfg, ...)` builds the one a run config asks for (`[rollout]`).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

from workbench.errors import WorkbenchError
from workbench.registry import Registry
from workbench.rollout.base import BackendDefaults, GenerationBatch, RolloutBackend, SamplingParams, group_seed

BACKENDS: Registry[Callable[..., RolloutBackend]] = Registry("rollout backend", error=WorkbenchError, sort=False)
"""Backend name -> builder(model, tokenizer, device, options=, model_path=)."""
_EXTRAS = {"vllm": "gpu", "ray": "ray"}


def require(kind: str) -> None:
    """Raise one clear line when backend `kind` cannot run here (its package, or CUDA, is missing)."""
    BACKENDS.get(kind)
    if kind in _EXTRAS and importlib.util.find_spec(kind) is None:
        raise WorkbenchError(
            f"rollout backend {kind!r} is not available in this installation: the package {kind!r} is not "
            f"installed; install the '{_EXTRAS[kind]}' extra (pip install -e '.[{_EXTRAS[kind]}]') on a machine "
            f"that supports it, or use backend 'hf'"
        )
    if kind == "vllm":
        from workbench.rollout.vllm_backend import require_cuda

        require_cuda()


def make_backend(kind: str, model, tokenizer, device: str = "cpu", *, options: Any = None,
                 model_path: str | None = None) -> RolloutBackend:
    """The rollout backend named `kind` over `model` and `tokenizer` on `device`.

    "ray" takes `options` (`RayOptions`; default: one worker, a local runtime); "vllm" loads
    `model_path` into an in-process vLLM engine on the GPU."""
    require(kind)
    return BACKENDS.get(kind)(model, tokenizer, device, options=options, model_path=model_path)


@BACKENDS.register("hf")
def _hf(model, tokenizer, device: str, *, options: Any, model_path: str | None) -> RolloutBackend:
    from workbench.rollout.hf import HFBackend

    return HFBackend(model, tokenizer, device)


@BACKENDS.register("vllm")
def _vllm(model, tokenizer, device: str, *, options: Any, model_path: str | None) -> RolloutBackend:
    from workbench.rollout.hf import HFBackend
    from workbench.rollout.vllm_backend import VLLMBackend

    if model_path is None:
        raise WorkbenchError("rollout backend 'vllm' needs the model's directory (model.path)")
    return VLLMBackend.from_path(model_path, local=HFBackend(model, tokenizer, device), **(options or {}))


@BACKENDS.register("ray")
def _ray(model, tokenizer, device: str, *, options: Any, model_path: str | None) -> RolloutBackend:
    from workbench.rollout.hf import HFBackend
    from workbench.rollout.ray_backend import RayBackend, RayOptions

    return RayBackend(model, HFBackend(model, tokenizer, device), options or RayOptions())


def backend_for_run(cfg: Any, model, tokenizer, device, model_path: str) -> RolloutBackend:
    """The backend `cfg.rollout` asks for, over the trainer's `model`."""
    kind = cfg.rollout.backend
    if kind == "ray":
        from workbench.rollout.ray_backend import RayOptions

        return make_backend("ray", model, tokenizer, device,
                            options=RayOptions.from_config(cfg, model_path=model_path))
    if kind == "vllm":
        r = cfg.rollout
        return make_backend("vllm", model, tokenizer, device, model_path=model_path,
                            options=dict(gpu_memory_utilization=r.gpu_memory_utilization, sleep=r.vllm_sleep,
                                         dtype=cfg.model.dtype, seed=cfg.seed))
    # any other registered backend takes its defaults; an unknown name is refused by the registry (never
    # silently the in-process one)
    return make_backend(kind, model, tokenizer, device, model_path=model_path)


__all__ = ["BACKENDS", "BackendDefaults", "GenerationBatch", "RolloutBackend", "SamplingParams", "backend_for_run",
           "group_seed", "make_backend", "require"]
