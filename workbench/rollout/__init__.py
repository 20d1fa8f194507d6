"""Rollout backends behind one interface (`RolloutBackend` in `workbench.rollout.base`).

`make_backend(kind, model, tokenizer, device)` builds one by name: "hf" (in-process Hugging Face
generation, CPU or CUDA) works everywhere; "vllm" and "ray" need their optional extras.
"""

from __future__ import annotations

from workbench.errors import WorkbenchError
from workbench.rollout.base import GenerationBatch, RolloutBackend, SamplingParams

BACKENDS = ("hf", "vllm", "ray")
_EXTRAS = {"vllm": "gpu", "ray": "ray"}


def make_backend(kind: str, model, tokenizer, device: str = "cpu") -> RolloutBackend:
    """The rollout backend named `kind` over `model` and `tokenizer` on `device`."""
    if kind == "hf":
        from workbench.rollout.hf import HFBackend

        return HFBackend(model, tokenizer, device)
    if kind in _EXTRAS:
        raise WorkbenchError(
            f"rollout backend {kind!r} is not available in this installation: install the "
            f"'{_EXTRAS[kind]}' extra (pip install 'workbench[{_EXTRAS[kind]}]') on a machine that supports it, "
            f"or use backend 'hf'"
        )
    raise WorkbenchError(f"unknown rollout backend {kind!r}; valid names: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "GenerationBatch", "RolloutBackend", "SamplingParams", "make_backend"]
