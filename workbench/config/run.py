"""`RunConfig`, the whole run's configuration: its sections (one module each in this package), the checks
that span several of them, and loading from TOML with `--set` overrides.

    cfg = load_config("configs/organism.toml", overrides=["optim.lr=5e-5", "steps=10"])
    cfg.to_dict()                       # what the store keeps in runs.config
    RunConfig.from_dict(cfg.to_dict())  # round trip
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.checks import build_config, check, to_plain
from workbench.config.algorithm import AlgorithmConfig
from workbench.config.allocator import AllocatorConfig
from workbench.config.checkpoint import CheckpointConfig
from workbench.config.evaluation import EvalConfig
from workbench.config.model import ModelConfig
from workbench.config.optim import OptimConfig
from workbench.config.pipeline import PipelineConfig
from workbench.config.rollout import RolloutConfig
from workbench.config.sampling import SamplingConfig
from workbench.config.shapes import shape_problem
from workbench.config.store import LoggingConfig, StoreConfig
from workbench.errors import ConfigError
# Two sections stay with the layer-2 parts that read them (importing them from here would point a
# lower layer at this one): the reward terms (workbench/tasks/reward_config.py) and the guards
# (workbench/guards/config.py).
from workbench.guards.config import GuardConfig, guard_set
from workbench.tasks.reward_config import RewardsConfig
from workbench.tools.config import ToolsConfig
from workbench.vllm_limits import temperature_problem, uses_vllm


@dataclass(frozen=True)
class RunConfig:
    name: str = "organism-uniform"
    """Run name shown in the dashboard (several runs may share one)."""
    seed: int = 0
    """Seed of the run: sampler order, allocator decisions, rollouts; same seed on the CPU, same run."""
    steps: int = 240
    """Training steps."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy."""
    task: dict[str, Any] = field(default_factory=lambda: {"kind": "arithmetic"})
    """The prompts and their verifier: the task's own table, `kind` = "arithmetic" (the organism's
    synthetic task) or "file" (a JSONL/Parquet data set); its fields are listed under [task] below."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """How rollouts are sampled."""
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    """How the budget is spread over prompts."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Advantages and policy loss."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimiser and learning-rate schedule."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Held-out evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints (resume restarts from the last one)."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """What reaches the store."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Where rollouts are generated: in-process, vLLM, or Ray workers."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """How steps are committed to the store (group commit)."""
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    """The reward as a weighted sum of terms (the verifier, a format check, DAPO's overlong penalty, functions)."""
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    """Asynchronous generation: rollouts ahead of the policy, bounded staleness, off-policy correction."""
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    """The tools an episode may call, how it writes calls and the limits every call runs under (read
    when `rollout.shape = "episodes"`; docs/tools.md)."""
    guards: tuple[GuardConfig, ...] = ()
    """`[[guards]]`: rules over the run's metrics and rollouts that alert, pause, roll back or stop it
    (on top of the default presets; see docs/guards.md)."""

    def __post_init__(self) -> None:
        check(self.steps >= 0, "steps", "an integer >= 0", self.steps)
        self.rewards.check_lengths(self.sampling.max_new_tokens)
        self.pipeline.check_rollout(self.rollout)
        problem = shape_problem(self.rollout.shape, self.pipeline.enabled, self.rollout.backend)  # issue #32
        if problem:
            raise ConfigError(problem)
        if uses_vllm(self.rollout) and temperature_problem(self.sampling.temperature):
            raise ConfigError(f"sampling.temperature: {temperature_problem(self.sampling.temperature)}")
        _check_registries(self)
        guard_set(self.guards, check_metrics=True)

    # -- loading and saving --------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        """Built and checked (`workbench.checks.build_config`); ConfigError names the bad field."""
        return build_config(cls, data, where="")

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)


# -- names that live in registries other parts own -----------------------------------------------


def _check_registries(cfg: RunConfig) -> None:
    """Names that live in registries and tables other parts own (task, advantage, loss, allocator)."""
    from workbench.algorithms import AGGREGATIONS, get_advantage, get_policy_loss
    from workbench.allocators import get_allocator, make_allocator

    task_config(cfg.task)
    for name, getter, value in (
        ("algorithm.advantage", get_advantage, cfg.algorithm.advantage),
        ("algorithm.loss", get_policy_loss, cfg.algorithm.loss),
        ("allocator.name", get_allocator, cfg.allocator.name),
    ):
        try:
            getter(value)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"{name}: {exc}") from None
    check(cfg.algorithm.aggregation in AGGREGATIONS, "algorithm.aggregation",
           "one of " + ", ".join(AGGREGATIONS), cfg.algorithm.aggregation)
    try:
        make_allocator(cfg.allocator.name, dict(cfg.allocator.params), seed=cfg.seed)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"allocator.params: {exc}") from None


def config_warnings(cfg: RunConfig) -> list[str]:
    """What a valid config cannot promise, one line each (the engine warns with them when a run starts,
    and records each as a `warning` event)."""
    from workbench.allocators import get_allocator
    from workbench.config.shapes import history_warning

    said = history_warning(cfg.rollout.shape, cfg.rollout.speculative.mode, cfg.allocator.name,
                           get_allocator(cfg.allocator.name).reads_history)
    return [said] if said else []


def task_config(data: dict[str, Any]) -> Any:
    """The task's own config dataclass built from the [task] table (the tasks part validates it)."""
    from workbench.tasks import task_config_from_dict

    data = dict(data)
    data.setdefault("kind", "arithmetic")
    return task_config_from_dict(data)


# -- TOML and --set overrides ----------------------------------------------------------------------


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` strings (values parsed as TOML, else taken as strings) to plain data."""
    out = to_plain(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value (for example optim.lr=5e-5)")
        key, text = item.split("=", 1)
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            if not isinstance(node.get(part, {}), dict):
                raise ConfigError(f"--set {key}: {part} is not a table")
            node = node.setdefault(part, {})
        node[parts[-1]] = _parse_value(text.strip())
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """The defaults, then the TOML file (if any), then `--set` overrides; validated."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p}: not found")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p}: not valid TOML ({exc})") from None
    if overrides:
        data = apply_overrides(data, overrides)
    return RunConfig.from_dict(data)
