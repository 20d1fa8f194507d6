"""`[rollout]`: where rollouts are generated (in-process, vLLM, Ray workers) and their shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from workbench.checks import check
from workbench.config.shapes import EpisodesConfig, SpeculativeConfig, TreeConfig


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
    # -- rollout shapes (issue #32; workbench/config/shapes.py, docs/rollout-shapes.md) --
    shape: Literal["independent", "speculative", "tree", "episodes"] = "independent"
    """The shape of a prompt's group: "independent" samples, "speculative" (SPEC-RL: the prompt's
    previous rollouts as drafts, verified against the current policy, `[rollout.speculative]`) or
    "tree" (LATR: branch at uncertain tokens, `[rollout.tree]`), or "episodes" (multi-turn, the model
    calling the tools of `[tools]` and reading their results, `[rollout.episodes]`). The synchronous loop and
    `backend = "hf"` only (vLLM and Ray are refused at load)."""
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    """Speculative rollouts' settings (rollout.shape = "speculative")."""
    tree: TreeConfig = field(default_factory=TreeConfig)
    """Tree rollouts' settings (rollout.shape = "tree")."""
    episodes: EpisodesConfig = field(default_factory=EpisodesConfig)
    """Episodes' limits (rollout.shape = "episodes")."""
    DOC_TABLES: ClassVar = [("### `[rollout.speculative]` (rollout.shape = \"speculative\")", SpeculativeConfig),
                            ("### `[rollout.tree]` (rollout.shape = \"tree\")", TreeConfig),
                            ("### `[rollout.episodes]` (rollout.shape = \"episodes\")", EpisodesConfig)]

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
