"""What vLLM accepts, as its released source says (read in vLLM 0.10.0, 0.10.1.1, 0.10.2, 0.11.0 and
0.33.0), kept apart from the backend so that the config loader and live control can check a run
against it without importing torch or vLLM (`workbench.rollout` imports torch, so this lives outside it).

1. Version window (`VLLM_WINDOW`): from 0.10.2, the first release where `logprobs_mode=
   "processed_logprobs"` returns the log-probs of the distribution sampled from (after temperature,
   top-k and top-p: vLLM PR #22387); in 0.10.0 and 0.10.1 "processed" meant before temperature, so
   behaviour log-probs would not match the trainer's. The window ends before 0.34: 0.33.0 is the
   newest release read.
2. Temperature (`TEMPERATURE_RANGE`): `SamplingParams` raises values in (0, 0.01) to 0.01 with only a
   warning (`_MAX_TEMP`), and from some release on rejects values above 2 (0.33.0:
   "temperature must be in [0, 2]"). A vLLM run therefore samples only in [0.01, 2].
3. Seeds (`request_seed`): a request of `n` samples is split into `n` child requests seeded
   `seed + i` (`vllm/v1/engine/parallel_sampling.py`), and the worker stores each seed in an int64
   array (0.33.0 `vllm/v1/worker/gpu/sample/states.py`): a seed needs room for `+ n` below 2**63.
"""

from __future__ import annotations

import math
from typing import Any

VLLM_WINDOW = (">=0.10.2", "<0.34")
"""The vLLM releases the backend is written for (the `gpu` extra pins the same window)."""

TEMPERATURE_RANGE = (0.01, 2.0)
"""The sampling temperatures vLLM honours: below 0.01 it samples at 0.01, above 2 it refuses."""

SEED_BITS = 62
"""Request seeds are masked to 62 bits: seed + n stays below 2**63 for any n below 2**62."""


def request_seed(seed: int) -> int:
    """A group's seed as vLLM gets it: its low 62 bits (vLLM seeds sample i with seed + i, in int64)."""
    return int(seed) & ((1 << SEED_BITS) - 1)


def uses_vllm(rollout: Any) -> bool:
    """Whether a `[rollout]` section (a RolloutConfig or its dict) samples with vLLM."""
    get = rollout.get if isinstance(rollout, dict) else (lambda k, d=None: getattr(rollout, k, d))
    backend = get("backend", "hf")
    return backend == "vllm" or (backend == "ray" and get("worker_backend", "hf") == "vllm")


def temperature_problem(temperature: Any) -> str | None:
    """None when vLLM samples at `temperature` as asked, else what is allowed and why (one line)."""
    lo, hi = TEMPERATURE_RANGE
    ok = (not isinstance(temperature, bool) and isinstance(temperature, (int, float))
          and math.isfinite(temperature) and lo <= temperature <= hi)
    if ok:
        return None
    return (f"{temperature!r} is not allowed with rollout backend 'vllm' (a number in [{lo:g}, {hi:g}]: "
            f"vLLM refuses temperatures above {hi:g} and samples at {lo:g} below it)")


def version_problem(version: str) -> str | None:
    """None when vLLM `version` is inside `VLLM_WINDOW`, else one line saying what is needed."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    window = SpecifierSet(",".join(VLLM_WINDOW))
    try:
        inside = window.contains(Version(version), prereleases=True)
    except InvalidVersion:
        inside = False
    if inside:
        return None
    return (f"rollout backend 'vllm': vLLM {version} is installed, this backend needs vllm{','.join(VLLM_WINDOW)} "
            f"(0.10.2 is the first release whose processed log-probs follow temperature and top-k/top-p; "
            f"0.33 the newest read); install the 'gpu' extra")
