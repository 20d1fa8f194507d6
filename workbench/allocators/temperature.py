"""E3's entropy-targeting temperature controller: a sampler controller any allocator can run with.

Paper: Liao et al. 2025, "Enhancing Efficiency and Exploration in Reinforcement Learning for LLMs"
(arXiv:2505.18573), adaptive temperature.

Rule (a departure from GRPO's fixed sampling temperature):
1. After each step the engine passes the measured mean token entropy H of the step's rollouts
   (nats) to `update(H)`.
2. The temperature moves toward the one that would give the target entropy H*:
   T <- T * (1 + T * ln(H* / H) / (ln V + ln ln V)), V the vocabulary size (ln V bounds the entropy).
3. T stays in [`t_min`, `t_max`]; a non-finite or non-positive H leaves T unchanged.

Usage (engine): `ctl = TemperatureController(TemperatureConfig(target_entropy=0.4, vocab_size=V))`;
sample each step at `ctl.temperature`; after scoring, `ctl.update(entropy_mean)`; checkpoint
`ctl.state_dict()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.allocators._config import config_from_dict
from workbench.checks import check_float, check_int


@dataclass(frozen=True)
class TemperatureConfig:
    target_entropy: float = 0.5
    """Target mean token entropy H* (nats)."""
    vocab_size: int = 32000
    """Vocabulary size V of the model being trained."""
    t_init: float = 1.0
    """Starting temperature."""
    t_min: float = 0.1
    """Lower clamp of the temperature."""
    t_max: float = 2.0
    """Upper clamp of the temperature."""

    def __post_init__(self) -> None:
        o = "temperature"
        check_float(o, "target_entropy", self.target_entropy, 0.0, None, lo_open=True)
        check_int(o, "vocab_size", self.vocab_size, 3)
        check_float(o, "t_min", self.t_min, 0.0, None, lo_open=True)
        check_float(o, "t_max", self.t_max, self.t_min, None)
        check_float(o, "t_init", self.t_init, self.t_min, self.t_max)


class TemperatureController:
    """Holds the sampling temperature and moves it each step toward the target entropy."""

    def __init__(self, config: TemperatureConfig | None = None) -> None:
        self.config = config or TemperatureConfig()
        self.temperature = self.config.t_init

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "TemperatureController":
        """Build from a plain dict; unknown or ill-typed fields raise ConfigError naming the field."""
        return cls(config_from_dict(TemperatureConfig, params))

    def set_params(self, params: dict[str, Any]) -> None:
        """Change some fields (a live control); the current temperature is kept, clamped to the new range."""
        self.config = config_from_dict(TemperatureConfig, params, base=self.config)
        self.temperature = min(max(self.temperature, self.config.t_min), self.config.t_max)

    def update(self, entropy: float) -> float:
        """Fold in one step's measured mean token entropy; returns the new temperature."""
        c = self.config
        if not (isinstance(entropy, (int, float)) and math.isfinite(entropy) and entropy > 0):
            return self.temperature
        scale = math.log(c.vocab_size) + math.log(math.log(c.vocab_size))
        t = self.temperature
        t = t * (1.0 + t * math.log(c.target_entropy / entropy) / scale)
        self.temperature = min(max(t, c.t_min), c.t_max)
        return self.temperature

    def state_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.temperature = float(state["temperature"])
