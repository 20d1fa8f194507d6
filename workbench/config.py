"""The configuration of a run: frozen dataclasses, loaded from TOML, validated before anything starts.

Every field carries an attribute docstring; that text is what `workbench config show` prints and what
`docs/configs.md` documents. Loading rejects unknown keys, wrong types and out-of-range values with a
`ConfigError` naming the field (`optim.lr`) and what is allowed.

    cfg = load_config("configs/organism.toml", overrides=["optim.lr=5e-5", "steps=10"])
    cfg.to_dict()                       # what the store keeps in runs.config
    RunConfig.from_dict(cfg.to_dict())  # round trip
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal

from workbench.docstrings import field_docs
from workbench.errors import ConfigError
from workbench.vllm_limits import temperature_problem, uses_vllm


@dataclass(frozen=True)
class ModelConfig:
    path: str = "organism"
    """A local Hugging Face causal LM directory (model + tokenizer), or "organism" for the built-in
    model organism (built under the store on first use, cached by its recipe)."""
    organism: dict[str, Any] = field(default_factory=dict)
    """Recipe of the organism when path = "organism" (fields of `OrganismRecipe`, e.g. corrupt_frac;
    empty: the default recipe). Each recipe is built once and cached under the store by its hash."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy trains and generates: "auto" takes CUDA when available, else the CPU."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype of the policy (float32 on CPU; bfloat16 halves memory on a GPU)."""
    threads: int = 0
    """CPU threads for torch (0: torch's default, one per core)."""
    deterministic: bool = True
    """Deterministic torch kernels (`torch.use_deterministic_algorithms`). Without them a CPU run's
    gradients differed in the 7th digit from step 5 on when other processes shared the cores, and the
    runs parted; with them two such runs were identical and no slower (dev/LOG.md). On CUDA an op
    without a deterministic kernel warns instead of failing."""
    chat_template: bool = False
    """Wrap each prompt in the tokenizer's chat template as one user turn (instruction-tuned models)."""


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    """Softmax temperature of the rollouts (> 0); the policy loss uses the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Sample among the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 8
    """Generated tokens per rollout at most (finish reason "length" beyond)."""


@dataclass(frozen=True)
class AllocatorConfig:
    name: str = "uniform"
    """Allocator from the registry (`workbench allocators list`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The allocator's own parameters, validated by its config dataclass."""
    budget_kind: Literal["rollouts", "tokens"] = "rollouts"
    """What the per-step budget counts: rollouts, or generated tokens."""
    budget: int = 512
    """Rollouts (or generated tokens) per training step."""
    prompts_per_step: int = 64
    """Candidate prompts the sampler draws per step (B); an allocator may ask for more."""
    max_stages: int = 8
    """Engine limit on allocation stages within one step."""
    stats_decay: float = 1.0
    """Per-visit decay of the per-prompt Beta posterior (1: never forget)."""


@dataclass(frozen=True)
class AlgorithmConfig:
    advantage: str = "grpo"
    """Advantage estimator from the registry: grpo, dr_grpo, rloo."""
    advantage_params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the advantage estimator."""
    loss: str = "ppo_clip"
    """Policy loss from the registry (ppo_clip)."""
    clip_low: float = 0.2
    """Lower clip of the probability ratio (1 - clip_low)."""
    clip_high: float = 0.28
    """Upper clip of the ratio (1 + clip_high); above clip_low is DAPO's clip-higher."""
    aggregation: str = "token"
    """"token": mean over every token of the batch (DAPO); "sequence": mean of per-sequence means
    (GRPO); "seq-mean-token-sum-norm": token sum over sequences x max_new_tokens (Dr. GRPO)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the frozen initial policy (0: no reference model is kept)."""
    updates_per_step: int = 1
    """Optimiser steps per training step (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward pass, gradients accumulated (0: the whole mini-batch at once)."""


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate (peak, after warm-up)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment coefficients."""
    eps: float = 1e-8
    """AdamW epsilon."""
    warmup_steps: int = 10
    """Linear warm-up of the learning rate over this many optimiser steps."""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after warm-up."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a share of `lr` for the cosine and linear schedules."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""


@dataclass(frozen=True)
class EvalConfig:
    every: int = 40
    """Evaluate on the held-out split every this many steps (0: only before and after training)."""
    samples: int = 16
    """Samples per eval prompt (stored as samples, correct: pass@k for any k <= samples)."""
    temperature: float = 1.0
    """Sampling temperature of the eval samples."""
    max_prompts: int = 0
    """Evaluate on at most this many eval prompts (0: all)."""
    greedy: bool = True
    """Also record greedy correctness per eval prompt."""
    at_start: bool = True
    """Evaluate the initial policy (step 0) before training."""


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 50
    """Write a checkpoint every this many steps (0: only at stop and at the end)."""
    keep: int = 2
    """Checkpoints kept per run (older ones are deleted)."""


@dataclass(frozen=True)
class LoggingConfig:
    rollouts: bool = True
    """Log every rollout to the store (off: step metrics, allocations and prompt stats only)."""
    token_entropy: bool = True
    """Log each rollout's per-token entropy list."""
    token_ids: bool = True
    """Log each rollout's generated token ids."""
    background_writes: bool = True
    """Commit each step to the store on a writer thread while the next step runs (one step in flight;
    the store then lags the engine by at most one step, and every checkpoint waits for it). With the
    engine's store on one DuckDB thread, a default organism step took 0.78 s with it vs 0.86 s without."""
    heartbeat_s: float = 2.0
    """Seconds between heartbeats of a running engine."""


@dataclass(frozen=True)
class StoreConfig:
    commit_max_rows: int = 16384
    """Group commit: the most rollouts one store transaction holds. Steps that reach the writer while it
    commits wait and go together in its next transaction, up to this many rollouts (whole steps; a
    larger step goes alone). A step reaching an idle writer is committed at once."""
    commit_interval_s: float = 1.0
    """Group commit: the longest a finished step is held back before it is handed to the store's
    writer (the engine holds each step until the next policy update starts, so the commit's Python
    work does not slow generation). Pause, stop, the end of the run, each evaluation and each
    checkpoint flush at once."""
    writer_nice: int = 0
    """Scheduling niceness of the store's writer thread (0-19, Linux; ignored elsewhere). Above 0 the
    commit's CPU work yields to the training threads when both want a core."""


@dataclass(frozen=True)
class RolloutConfig:
    backend: Literal["hf", "vllm", "ray"] = "hf"
    """Who generates the rollouts: "hf" (in-process Hugging Face generation on the policy's device),
    "vllm" (an in-process vLLM engine colocated with training on one GPU; the `gpu` extra), or "ray"
    (`workers` Ray actors, each holding a copy of the policy and a `worker_backend`; the `ray` extra).
    Evaluation always runs in the trainer's process."""
    workers: int = 1
    """Ray actors generating rollouts (backend "ray"). Each stage's grants are split across them,
    a prompt's rollouts kept together, balanced by expected tokens."""
    worker_backend: Literal["hf", "vllm"] = "hf"
    """What each Ray worker runs: "hf" (CPU, or the GPU Ray assigns it) or "vllm" (one GPU each)."""
    ray_address: str = ""
    """Ray cluster to join: "" starts a local Ray runtime for the run (no dashboard), "auto" joins the
    cluster started on this machine with `ray start`, "host:port" joins that head node."""
    num_cpus: int = 0
    """CPUs of the local Ray runtime (0: every core of the machine); ignored when joining a cluster."""
    worker_cpus: float = 0.0
    """CPUs Ray reserves for each worker, also its torch threads (0: the local runtime's CPUs divided by
    `workers`, at least 1; 1 on a cluster)."""
    worker_gpus: float = 0.0
    """GPUs Ray reserves for each worker (1: a GPU of its own; 0: the worker runs on the CPU)."""
    max_restarts: int = 3
    """Times Ray restarts a worker that died; its share of the stage is generated again each time."""
    start_timeout_s: float = 120.0
    """Seconds to wait for Ray and for every worker to start before the run fails (a worker asking for
    resources the cluster lacks would otherwise wait forever)."""
    gpu_memory_utilization: float = 0.3
    """vLLM: share of the GPU's memory its engine may take (weights, activations, KV cache); the rest
    is the trainer's."""
    vllm_sleep: bool = True
    """vLLM: put the engine to sleep during the policy update (frees its KV cache and weights' memory
    for training) and wake it for generation, as TRL's colocate mode does."""


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

    # -- loading and saving --------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        cfg = _build(cls, data, "")
        validate(cfg)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)


# -- checks beyond types ----------------------------------------------------------------------------


def _check(ok: bool, name: str, allowed: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{name}: {value!r} is not allowed ({allowed})")


def validate(cfg: RunConfig) -> None:
    """Range and combination checks; raises ConfigError naming the field."""
    _check(cfg.steps >= 0, "steps", "an integer >= 0", cfg.steps)
    _check(bool(cfg.model.path), "model.path", 'a model directory or "organism"', cfg.model.path)
    _check(cfg.model.threads >= 0, "model.threads", "an integer >= 0", cfg.model.threads)
    s = cfg.sampling
    _check(s.temperature > 0, "sampling.temperature", "a number > 0", s.temperature)
    _check(0 < s.top_p <= 1, "sampling.top_p", "a number in (0, 1]", s.top_p)
    _check(s.top_k >= 0, "sampling.top_k", "an integer >= 0 (0: off)", s.top_k)
    _check(s.max_new_tokens >= 1, "sampling.max_new_tokens", "an integer >= 1", s.max_new_tokens)
    a = cfg.allocator
    _check(a.budget >= 1, "allocator.budget", "an integer >= 1", a.budget)
    _check(a.prompts_per_step >= 1, "allocator.prompts_per_step", "an integer >= 1", a.prompts_per_step)
    _check(a.max_stages >= 1, "allocator.max_stages", "an integer >= 1", a.max_stages)
    _check(0 < a.stats_decay <= 1, "allocator.stats_decay", "a number in (0, 1]", a.stats_decay)
    g = cfg.algorithm
    _check(0 <= g.clip_low < 1, "algorithm.clip_low", "a number in [0, 1)", g.clip_low)
    _check(g.clip_high >= 0, "algorithm.clip_high", "a number >= 0", g.clip_high)
    _check(g.kl_coef >= 0, "algorithm.kl_coef", "a number >= 0", g.kl_coef)
    _check(g.updates_per_step >= 1, "algorithm.updates_per_step", "an integer >= 1", g.updates_per_step)
    _check(g.micro_batch_size >= 0, "algorithm.micro_batch_size", "an integer >= 0 (0: whole batch)", g.micro_batch_size)
    o = cfg.optim
    _check(o.lr > 0, "optim.lr", "a number > 0", o.lr)
    _check(o.weight_decay >= 0, "optim.weight_decay", "a number >= 0", o.weight_decay)
    _check(all(0 <= b < 1 for b in o.betas), "optim.betas", "two numbers in [0, 1)", list(o.betas))
    _check(o.eps > 0, "optim.eps", "a number > 0", o.eps)
    _check(o.warmup_steps >= 0, "optim.warmup_steps", "an integer >= 0", o.warmup_steps)
    _check(0 <= o.min_lr_ratio <= 1, "optim.min_lr_ratio", "a share in [0, 1]", o.min_lr_ratio)
    _check(o.grad_clip >= 0, "optim.grad_clip", "a number >= 0 (0: off)", o.grad_clip)
    e = cfg.eval
    _check(e.every >= 0, "eval.every", "an integer >= 0 (0: start and end only)", e.every)
    _check(e.samples >= 1, "eval.samples", "an integer >= 1", e.samples)
    _check(e.temperature > 0, "eval.temperature", "a number > 0", e.temperature)
    _check(e.max_prompts >= 0, "eval.max_prompts", "an integer >= 0 (0: all)", e.max_prompts)
    _check(cfg.checkpoint.every >= 0, "checkpoint.every", "an integer >= 0", cfg.checkpoint.every)
    _check(cfg.checkpoint.keep >= 1, "checkpoint.keep", "an integer >= 1", cfg.checkpoint.keep)
    _check(cfg.logging.heartbeat_s > 0, "logging.heartbeat_s", "a number > 0", cfg.logging.heartbeat_s)
    r = cfg.rollout
    _check(r.workers >= 1, "rollout.workers", "an integer >= 1", r.workers)
    _check(r.num_cpus >= 0, "rollout.num_cpus", "an integer >= 0 (0: every core)", r.num_cpus)
    _check(r.worker_cpus >= 0, "rollout.worker_cpus", "a number >= 0 (0: shared out)", r.worker_cpus)
    _check(r.worker_gpus >= 0, "rollout.worker_gpus", "a number >= 0", r.worker_gpus)
    _check(r.max_restarts >= 0, "rollout.max_restarts", "an integer >= 0", r.max_restarts)
    _check(r.start_timeout_s > 0, "rollout.start_timeout_s", "a number > 0", r.start_timeout_s)
    _check(0 < r.gpu_memory_utilization < 1, "rollout.gpu_memory_utilization", "a share in (0, 1)",
           r.gpu_memory_utilization)
    _check(r.backend == "ray" or r.workers == 1, "rollout.workers",
           'more than 1 needs rollout.backend = "ray"', r.workers)
    if uses_vllm(r) and temperature_problem(s.temperature):
        raise ConfigError(f"sampling.temperature: {temperature_problem(s.temperature)}")
    _check(cfg.store.commit_max_rows >= 1, "store.commit_max_rows", "an integer >= 1", cfg.store.commit_max_rows)
    _check(cfg.store.commit_interval_s > 0, "store.commit_interval_s", "a number > 0 (seconds)",
           cfg.store.commit_interval_s)
    _check(0 <= cfg.store.writer_nice <= 19, "store.writer_nice", "an integer from 0 to 19", cfg.store.writer_nice)
    _check_registries(cfg)


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
    _check(cfg.algorithm.aggregation in AGGREGATIONS, "algorithm.aggregation",
           "one of " + ", ".join(AGGREGATIONS), cfg.algorithm.aggregation)
    try:
        make_allocator(cfg.allocator.name, dict(cfg.allocator.params), seed=cfg.seed)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"allocator.params: {exc}") from None


def task_config(data: dict[str, Any]) -> Any:
    """The task's own config dataclass built from the [task] table (the tasks part validates it)."""
    from workbench.tasks import task_config_from_dict

    data = dict(data)
    data.setdefault("kind", "arithmetic")
    return task_config_from_dict(data)


# -- building dataclasses from plain data, with type checks -----------------------------------------


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {len(typing.get_args(tp))} numbers"
    if origin is dict:
        return "a table"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(tp: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{name}: {value!r} is not allowed ({_type_name(tp)})")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise bad
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise bad
        return tuple(_coerce(a, v, f"{name}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad
        return value
    raise bad


def _build(cls: type, data: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "the config"
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown field (allowed in {where}: {', '.join(known)})"
        )
    kwargs = {}
    for key, value in data.items():
        tp = hints[key]
        name = f"{prefix}{key}"
        kwargs[key] = _build(tp, value, name + ".") if is_dataclass(tp) else _coerce(tp, value, name)
    return cls(**kwargs)


def _to_plain(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


# -- TOML and --set overrides ----------------------------------------------------------------------


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` strings (values parsed as TOML, else taken as strings) to plain data."""
    out = _to_plain(data)
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


__all__ = [
    "RunConfig", "ModelConfig", "SamplingConfig", "AllocatorConfig", "AlgorithmConfig",
    "OptimConfig", "EvalConfig", "CheckpointConfig", "LoggingConfig", "load_config", "apply_overrides",
    "validate", "field_docs",
]
