"""What a run is built from, once, before its first step (`Setup`: model, tokenizer, rollout backend and
shape, task and its tokenised prompts, optimiser and schedule, sampler, the store writer) and what it
carries from one step to the next (`StepState`: per-prompt statistics, the reuse cache, the running
mean response length). What changes as the run goes is `workbench.engine.context.RunState`; both go
into a checkpoint; only `StepState` is plain data."""

from __future__ import annotations

import copy
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from workbench.allocators import make_allocator
from workbench.allocators.base import PromptStats
from workbench.config import RunConfig, task_config
from workbench.engine.checkpoint import checkpoint_dir
from workbench.control.commands import control_limits
from workbench.engine.control import LiveSettings
from workbench.engine.sampler import PromptSampler
from workbench.guards.config import guard_set
from workbench.tasks import get_task
from workbench.rollout.base import RolloutBackend
from workbench.tasks.base import Prompt, Task

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from workbench.engine.steplog import StepWriter
    from workbench.rollout.shapes import Shape


@dataclass(frozen=True)
class Prompts:
    """The task's prompts as the loop uses them: the training prompts with their token ids, the
    evaluation prompts, and the `prompts` rows the store gets with the first step."""

    train: list[Prompt]
    train_tok: list[list[int]]
    """Token ids of each training prompt, in `train` order."""
    index: dict[str, int]
    """Prompt id -> index into `train`."""
    eval: list[Prompt]
    eval_tok: list[list[int]]
    rows: list[dict[str, Any]]
    """The `prompts` rows of the task (written with the first step)."""

    @property
    def train_ids(self) -> list[str]:
        return [p.id for p in self.train]

    @classmethod
    def encode(cls, tokenizer: Any, train: list[Prompt], evals: list[Prompt], chat_template: bool,
               tools: list[dict[str, Any]] | None = None) -> Prompts:
        rows = [dict(prompt_id=p.id, split=p.split, level=p.level, text=p.text, answer=p.answer,
                     metadata=p.metadata) for p in train + evals]
        return cls(train=train, train_tok=encode_prompts(tokenizer, train, chat_template, tools),
                   index={p.id: i for i, p in enumerate(train)}, eval=evals,
                   eval_tok=encode_prompts(tokenizer, evals, chat_template, tools), rows=rows)


@dataclass(frozen=True)
class Setup:
    """What a run is built from, once, before its first step (nothing here is reassigned while it runs)."""

    cfg: RunConfig
    device: torch.device
    model: torch.nn.Module
    """The trainer's policy (the in-process backend samples from this same module)."""
    tokenizer: PreTrainedTokenizerBase
    backend: RolloutBackend
    shape: Shape
    """How a prompt's group is generated (`workbench.rollout.shapes`): the engine's one generate seam."""
    task: Task
    prompts: Prompts
    pad_id: int
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PromptSampler
    ckpt_dir: Path
    writer: StepWriter | None
    ref_model: torch.nn.Module | None = None
    """A frozen copy of the initial policy, only when `algorithm.kl_coef` > 0."""


@dataclass
class StepState:
    """What one step leaves to the next (checkpointed with the run)."""

    stats: dict[str, PromptStats] = field(default_factory=dict)
    """Per-prompt Beta posterior and history, what allocators decide from."""
    reuse: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each prompt's latest on-policy correct response, for allocators that reuse responses."""
    tokens_per_rollout: float = 8.0
    """Running mean of generated tokens per rollout (token budgets and worker balancing use it)."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from workbench.errors import ConfigError

        raise ConfigError("model.device: 'cuda' is not available on this machine (use 'cpu' or 'auto')")
    return torch.device(name)


def chat_tools(cfg: RunConfig) -> list[dict[str, Any]] | None:
    """The tool schemas a run's chat template renders into its prompts (`model.chat_tools`), else None."""
    if not cfg.model.chat_tools:
        return None
    from workbench.tools import tool_specs

    return tool_specs(cfg.tools.enabled)


def encode_prompts(tokenizer: Any, prompts: list[Prompt], chat_template: bool,
                   tools: list[dict[str, Any]] | None = None) -> list[list[int]]:
    """Token ids of each prompt (BOS first when the tokenizer has one); `tools`: schemas the chat
    template renders (`chat_tools`)."""
    if chat_template:
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p.text}], tools=tools, tokenize=False,
                                               add_generation_prompt=True) for p in prompts]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer([p.text for p in prompts], add_special_tokens=True)["input_ids"]
    bos = tokenizer.bos_token_id
    if bos is not None and not chat_template:
        ids = [x if x and x[0] == bos else [bos] + list(x) for x in ids]
    return [list(x) for x in ids]


def lr_lambda(cfg: RunConfig, total: int):
    o = cfg.optim

    def f(k: int) -> float:
        if k < o.warmup_steps:
            return (k + 1) / o.warmup_steps
        if o.schedule == "constant" or total <= o.warmup_steps:
            return 1.0
        frac = min(1.0, (k - o.warmup_steps) / max(1, total - o.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * frac)) if o.schedule == "cosine" else 1 - frac
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * shape

    return f


def _spread(prompts: list[Prompt], k: int) -> list[Prompt]:
    """At most k prompts, evenly spaced (keeps every level represented)."""
    if not k or k >= len(prompts):
        return prompts
    step = len(prompts) / k
    return [prompts[int(i * step)] for i in range(k)]


def build_setup(cfg: RunConfig, *, store_dir: str | Path, run_id: str,
                writer: StepWriter | None = None) -> Setup:
    from workbench.models import load_model
    from workbench.models.sources import run_model_dir
    from workbench.rollout import backend_for_run, require
    from workbench.rollout.shapes import make_shape

    require(cfg.rollout.backend)  # one clear line before anything is built when its package is missing
    torch.manual_seed(cfg.seed)
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    device = resolve_device(cfg.model.device)
    if cfg.model.deterministic and device.type == "cuda":  # cuBLAS is deterministic only with a fixed workspace
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(cfg.model.deterministic, warn_only=device.type != "cpu")
    path = run_model_dir(cfg, store_dir)  # the one answer (workbench.models.sources), built when missing
    model, tokenizer = load_model(str(path), device=str(device))
    if cfg.model.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.train()
    if hasattr(model, "config"):
        model.config.use_cache = True
    task = get_task(task_config(cfg.task))
    train, evals = task.train_prompts(), _spread(task.eval_prompts(), cfg.eval.max_prompts)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ref = None
    if cfg.algorithm.kl_coef > 0:
        ref = copy.deepcopy(model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
    o = cfg.optim
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps,
                                  weight_decay=o.weight_decay, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, cfg.steps * cfg.algorithm.updates_per_step))
    backend = backend_for_run(cfg, model, tokenizer, device, str(path))
    if cfg.logging.inflight_s > 0 and hasattr(backend, "progress"):  # the Live page's rollouts in flight
        from workbench.store.inflight import InflightChannel, text_of

        backend.progress = InflightChannel(store_dir, run_id, every_s=cfg.logging.inflight_s, decode=text_of(tokenizer))
    shape = make_shape(cfg, tokenizer)
    if hasattr(shape, "bind"):  # episodes: evaluation samples episodes with the run's backend
        shape.bind(backend)
    return Setup(
        cfg=cfg, device=device, model=model, tokenizer=tokenizer, backend=backend, shape=shape, task=task,
        prompts=Prompts.encode(tokenizer, train, evals, cfg.model.chat_template, chat_tools(cfg)), pad_id=int(pad_id),
        optimizer=optimizer, scheduler=scheduler, sampler=PromptSampler(len(train), cfg.seed),
        ckpt_dir=checkpoint_dir(store_dir, run_id), writer=writer, ref_model=ref,
    )


def live_settings(cfg: RunConfig, optimizer: torch.optim.Optimizer,
                  scheduler: torch.optim.lr_scheduler.LRScheduler) -> LiveSettings:
    """The settings a control command may change, as the config sets them before the first step."""
    live = LiveSettings(budget_kind=cfg.allocator.budget_kind, budget=cfg.allocator.budget,
                        allocator=make_allocator(cfg.allocator.name, dict(cfg.allocator.params), seed=cfg.seed),
                        temperature=cfg.sampling.temperature, eval_every=cfg.eval.every, seed=cfg.seed,
                        staleness=cfg.pipeline.max_staleness, staleness_bound=cfg.pipeline.bound)
    live.guards = guard_set(cfg.guards)  # the defaults and the config's; `guard` commands change them
    live.bind_optimizer(optimizer, scheduler)  # `set_lr` changes the rate on both
    live.control_limits = control_limits(cfg.rollout)  # vLLM runs: only temperatures vLLM samples at
    return live

