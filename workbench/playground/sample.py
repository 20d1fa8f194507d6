"""Sampling a run's checkpoint: the Playground page's and `workbench sample`'s one core.

    policy = load_policy(store_dir, run_id, config, step=40)       # 0: the initial model
    result = sample(policy, SampleRequest(run_id, 40, prompt_id="arith-train-000003", n=8, seed=1))
    result["samples"][0]["verdict"], result["pass_at_k"]["1"]

What makes the samples the run's own:

1. The model is built exactly as the engine builds it (`models.sources.run_model_dir`: the organism, SmolLM2
   or the user's directory; `model.dtype`), then the checkpoint's weights are loaded into it (a full
   checkpoint `step-NNNNNN.pt`, or a weights-only snapshot `weights-NNNNNN.pt`).
2. Prompts are tokenised by `engine.setup.encode_prompts` with the run's chat-template setting, and a
   prompt picked by id is the task's own (its reference answer included).
3. Tokens come from the in-process rollout backend (`rollout.hf.HFBackend`), with the run's sampling
   settings unless the request changes them, one seeded group stream (`rollout.base.group_seed(seed)`)
   as the engine's groups have: the same seed gives the same tokens wherever it is asked (this module
   from the command line, or the dashboard's worker process). A vLLM run's checkpoint is sampled by
   this backend too.
4. Verdicts and reward terms come from `tasks.rewards.score` with the run's `[rewards]` and task.

Checkpoint `k` holds the weights after step `k`'s update, so its samples are distributed as the run's
rollouts of step `k + 1` (sampled from those weights).

Limits (`Limits`): samples, new tokens, prompt characters, seconds. A request past one is refused
with one line naming the field, before anything is loaded; the seconds are enforced while decoding
(the backend is interrupted, and the request fails with a line saying why).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from workbench.errors import ConfigError, DataError, WorkbenchError

if TYPE_CHECKING:
    from workbench.store.store import Store

INITIAL = 0
"""The checkpoint "step" of the initial model (before the first update)."""


@dataclass(frozen=True)
class Limits:
    """What one sampling request may ask for (a request past one is refused, naming the field)."""

    max_samples: int = 64
    """Samples per request."""
    max_new_tokens: int = 1024
    """New tokens per sample."""
    max_prompt_chars: int = 8000
    """Characters of a typed prompt."""
    max_seconds: float = 120.0
    """Wall time of the decoding (the request fails past it; nothing is half-returned)."""


@dataclass(frozen=True)
class SampleRequest:
    """One request: `n` samples of one prompt from one checkpoint of one run."""

    run_id: str
    checkpoint: int = INITIAL
    """The step whose checkpoint to sample (0: the initial model)."""
    prompt: str | None = None
    """A typed prompt (exactly one of `prompt` and `prompt_id`)."""
    prompt_id: str | None = None
    """A prompt of the run's task, train or held-out split, by id."""
    answer: str | None = None
    """A typed prompt's reference answer (None: the task's prompt with the same text, else no verdict)."""
    n: int = 8
    seed: int = 0
    temperature: float | None = None
    """None: the run's `sampling.temperature` (likewise the three below)."""
    top_p: float | None = None
    top_k: int | None = None
    max_new_tokens: int | None = None

    def check(self, limits: Limits) -> None:
        """Refuse a request past `limits` or malformed, with one line naming the field."""
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigError("run: a run id is needed")
        if not isinstance(self.checkpoint, int) or self.checkpoint < 0:
            raise ConfigError(f"checkpoint: a step >= 0 (0: the initial model), got {self.checkpoint!r}")
        if (self.prompt is None) == (self.prompt_id is None):
            raise ConfigError("prompt: give exactly one of a typed prompt and a prompt id")
        if self.prompt is not None and not self.prompt.strip():
            raise ConfigError("prompt: the typed prompt is empty")
        if self.prompt is not None and len(self.prompt) > limits.max_prompt_chars:
            raise ConfigError(f"prompt: {len(self.prompt):,} characters, over the limit of "
                              f"{limits.max_prompt_chars:,} per request")
        if not isinstance(self.n, int) or not 1 <= self.n <= limits.max_samples:
            raise ConfigError(f"n: {self.n!r} samples; a request may ask for 1 to {limits.max_samples}")
        if self.max_new_tokens is not None and not 1 <= self.max_new_tokens <= limits.max_new_tokens:
            raise ConfigError(f"max_new_tokens: {self.max_new_tokens!r}; a request may ask for 1 to "
                              f"{limits.max_new_tokens} new tokens per sample")
        if self.temperature is not None and not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"temperature: must be > 0, got {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p: must be in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ConfigError(f"top_k: must be >= 0 (0: off), got {self.top_k!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SampleRequest":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"request: unknown field(s) {', '.join(unknown)}")
        return cls(**data)


@dataclass
class Policy:
    """A run's model at one checkpoint, with what sampling and scoring need."""

    run_id: str
    step: int
    cfg: Any
    """The run's RunConfig."""
    model: Any
    tokenizer: Any
    backend: Any
    """The in-process rollout backend over `model`."""
    task: Any
    source: str
    """The file the weights came from ("initial model" for step 0)."""


def weights_path(store_dir: str | Path, run_id: str, step: int) -> Path:
    """The file holding step `step`'s weights: the full checkpoint, else the weights-only snapshot.
    DataError naming the steps that exist when there is neither."""
    from workbench.engine.checkpoint import checkpoint_dir, checkpoint_steps, weights_steps

    folder = checkpoint_dir(store_dir, run_id)
    full, light = folder / f"step-{step:06d}.pt", folder / f"weights-{step:06d}.pt"
    for path in (full, light):
        if path.is_file():
            return path
    have = sorted(set(checkpoint_steps(folder)) | set(weights_steps(folder)))
    listed = ", ".join(map(str, have)) if have else "no checkpoint yet"
    raise DataError(f"checkpoint: run {run_id!r} has no checkpoint of step {step} (it has: 0 (the initial "
                    f"model), {listed})")


def available_steps(store_dir: str | Path, run_id: str) -> list[int]:
    """The steps that can be sampled: 0 (the initial model) and every checkpoint or snapshot."""
    from workbench.engine.checkpoint import checkpoint_dir, checkpoint_steps, weights_steps

    folder = checkpoint_dir(store_dir, run_id)
    return [INITIAL] + sorted(set(checkpoint_steps(folder)) | set(weights_steps(folder)) - {INITIAL})


def run_config(run_row: dict[str, Any]) -> Any:
    """The RunConfig of a run's store row; DataError for a run the workbench did not train."""
    from workbench.config import RunConfig

    if run_row.get("source") not in (None, "", "workbench"):
        raise DataError(f"run {run_row.get('run_id')!r} was imported from {run_row['source']}: it has no "
                        "checkpoints the workbench can load")
    try:
        return RunConfig.from_dict(dict(run_row.get("config") or {}))
    except ConfigError as exc:
        raise DataError(f"run {run_row.get('run_id')!r}: its stored config does not load: {exc}") from exc


def load_policy(store_dir: str | Path, run_id: str, cfg: Any, step: int, *, threads: int = 1) -> Policy:
    """The run's model at checkpoint `step` (0: the initial model), built as the engine builds it."""
    import torch

    from workbench.engine.setup import resolve_device
    from workbench.models.sources import run_model_dir
    from workbench.models import load_model
    from workbench.rollout.hf import HFBackend
    from workbench.tasks import get_task
    from workbench.config import task_config

    source = "initial model"
    state = None
    if step != INITIAL:
        path = weights_path(store_dir, run_id, step)
        state = _read_weights(path)
        source = path.name
    torch.set_num_threads(max(1, int(threads)))
    device = resolve_device(cfg.model.device)
    model, tokenizer = load_model(str(run_model_dir(cfg, store_dir)), device=str(device))
    if cfg.model.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    if state is not None:
        try:
            model.load_state_dict(state)
        except (RuntimeError, KeyError, TypeError) as exc:
            raise DataError(f"checkpoint: {source} of run {run_id!r} does not fit the run's model: "
                            f"{str(exc).splitlines()[0]}") from exc
    model.eval()
    backend = HFBackend(model, tokenizer, device)
    backend.policy_version = step
    return Policy(run_id=run_id, step=step, cfg=cfg, model=model, tokenizer=tokenizer, backend=backend,
                  task=get_task(task_config(cfg.task)), source=source)


def _read_weights(path: Path) -> dict[str, Any]:
    """The model's state dict in a checkpoint or snapshot file; DataError for a file that is not one."""
    import torch

    from workbench.engine.checkpoint import load_checkpoint

    try:  # a full checkpoint holds RNG states and plain objects besides tensors (the engine's own loader)
        data = (torch.load(path, map_location="cpu", weights_only=True) if path.name.startswith("weights-")
                else load_checkpoint(path))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file raises many kinds
        raise DataError(f"checkpoint: {path.name} is corrupt or not a checkpoint ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'})") from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or not model:
        raise DataError(f"checkpoint: {path.name} holds no model weights")
    return model


def find_prompt(policy: Policy, request: SampleRequest) -> Any:
    """The task's prompt a request names (by id, or a typed text equal to one), else a typed prompt."""
    from workbench.tasks.base import Prompt

    prompts = policy.task.train_prompts() + policy.task.eval_prompts()
    if request.prompt_id is not None:
        for p in prompts:
            if p.id == request.prompt_id:
                return p
        raise DataError(f"prompt_id: {request.prompt_id!r} is not a prompt of run {policy.run_id!r}'s task")
    if request.answer is None:
        for p in prompts:
            if p.text == request.prompt:
                return p
    return Prompt(id="typed", text=str(request.prompt), answer=request.answer or "", split="typed")


def sampling_of(policy: Policy, request: SampleRequest) -> Any:
    """The sampling settings in force: the run's, with what the request sets."""
    from workbench.rollout.base import SamplingParams

    s = policy.cfg.sampling
    return SamplingParams(
        temperature=s.temperature if request.temperature is None else float(request.temperature),
        top_p=s.top_p if request.top_p is None else float(request.top_p),
        top_k=s.top_k if request.top_k is None else int(request.top_k),
        max_new_tokens=s.max_new_tokens if request.max_new_tokens is None else int(request.max_new_tokens))


def sample(policy: Policy, request: SampleRequest, limits: Limits = Limits(), *,
           cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """`request.n` samples of the prompt from `policy`, each with its verdict, reward and terms, and
    the prompt's pass@k with its interval (a plain dict, JSON-ready). `cancelled()` is asked between
    decoding steps: True stops the request (WorkbenchError)."""
    from workbench.engine.evaluate import decode
    from workbench.engine.setup import chat_tools, encode_prompts
    from workbench.rollout.base import group_seed
    from workbench.tasks.rewards import score

    request.check(limits)
    if request.run_id != policy.run_id or request.checkpoint != policy.step:
        raise WorkbenchError(f"the policy loaded is run {policy.run_id!r} step {policy.step}, the request "
                             f"asks for run {request.run_id!r} step {request.checkpoint}")
    prompt = find_prompt(policy, request)
    sampling = sampling_of(policy, request)
    ids = encode_prompts(policy.tokenizer, [prompt], policy.cfg.model.chat_template, chat_tools(policy.cfg))[0]
    deadline = time.monotonic() + limits.max_seconds
    why: list[str] = []

    def interrupt() -> bool:
        if cancelled is not None and cancelled():
            why.append("cancelled")
        elif time.monotonic() > deadline:
            why.append(f"over the limit of {limits.max_seconds:g} s per request")
        return bool(why)

    start = time.monotonic()
    if cancelled is not None and cancelled():  # cancelled while the model was loading
        raise WorkbenchError(f"sampling stopped: cancelled (run {policy.run_id!r}, checkpoint {policy.step})")
    batch = policy.backend.generate([ids] * request.n, sampling, seeds=[group_seed(request.seed)] * request.n,
                                    interrupt=interrupt)
    if batch.cut is not None or why:
        raise WorkbenchError(f"sampling stopped: {why[0] if why else 'interrupted'} (run {policy.run_id!r}, "
                             f"checkpoint {policy.step}, {request.n} samples)")
    seconds = time.monotonic() - start
    texts = decode(policy.tokenizer, batch)
    lengths = batch.lengths.cpu().numpy()
    scored = score(policy.cfg.rewards, policy.task, [prompt] * request.n, texts, lengths,
                   batch.finished.cpu().numpy(), max_new_tokens=sampling.max_new_tokens)
    samples = []
    for i, text in enumerate(texts):
        n_tok = int(lengths[i])
        samples.append(dict(
            index=i, text=text, tokens=batch.tokens[i, :n_tok].tolist(),
            token_text=[policy.tokenizer.decode([t]) for t in batch.tokens[i, :n_tok].tolist()],
            entropy=[round(float(x), 6) for x in batch.entropy[i, :n_tok].tolist()],
            logprob_sum=float(batch.logprobs[i, :n_tok].sum()), length=n_tok,
            finish_reason=batch.finish_reasons()[i], reward=float(scored.rewards[i]),
            verdict=scored.verdicts[i], correct=bool(scored.results[i].correct),
            terms={k: float(v[i]) for k, v in scored.terms.items()}))
    correct = sum(s["correct"] for s in samples)
    has_answer = bool(prompt.answer)
    return dict(
        run_id=policy.run_id, checkpoint=policy.step, source=policy.source, prompt=prompt.text,
        prompt_id=prompt.id, split=prompt.split, answer=prompt.answer, request=request.to_dict(),
        sampling=asdict(sampling), n=request.n, correct=correct, seconds=round(seconds, 4),
        pass_at_k=pass_at_k_table(request.n, correct) if has_answer else {}, samples=samples)


def pass_at_k_table(n: int, correct: int) -> dict[str, dict[str, float]]:
    """pass@k for k = 1, 2, 4, ... <= n: the unbiased estimate from `correct` of `n`, and a 95% interval
    of the prompt's true pass@k (the Wilson interval of its pass rate p, through 1 - (1 - p)^k, which
    rises with p)."""
    import polars as pl

    from workbench.analysis.passk import pass_at_k
    from workbench.analysis.prompts import wilson

    lo, hi = wilson(pl.lit(correct), pl.lit(n))
    low, high = pl.select(lo.alias("low"), hi.alias("high")).row(0)
    low, high = max(0.0, float(low)), min(1.0, float(high))
    out, k = {}, 1
    while k <= n:
        out[str(k)] = dict(value=float(pass_at_k(n, correct, k)), low=1 - (1 - low) ** k, high=1 - (1 - high) ** k)
        k *= 2
    return out


def sample_run(store: Store, request: SampleRequest, limits: Limits = Limits(), *, threads: int = 1) -> dict[str, Any]:
    """One request from the command line: read the run from `store` (an open Store; its checkpoints are in
    the store's local folder, `store.handle.folder()`), load its checkpoint, sample. Refuses a bad request
    before loading anything."""
    request.check(limits)
    cfg = run_config(store.run(request.run_id))
    policy = load_policy(store.handle.folder(), request.run_id, cfg, request.checkpoint, threads=threads)
    return sample(policy, request, limits)
