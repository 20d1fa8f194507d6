"""vLLM rollouts colocated with training on one GPU (`rollout.backend = "vllm"`; the `gpu` extra).

Written against vLLM's offline API as TRL's colocate mode uses it (`trl/generation/vllm_generation.py`)
and as vLLM's released source defines it from 0.10.2 to 0.33.0 (`workbench.vllm_limits` says why that
window and what vLLM accepts). It has NOT been run on a GPU yet (docs/engine.md says what has run);
its pure parts are tested on the CPU without vLLM.

1. Engine: an in-process `vllm.LLM(model=<policy dir>, gpu_memory_utilization=rollout.gpu_memory_utilization,
   enable_sleep_mode=True, distributed_executor_backend="external_launcher", logprobs_mode=
   "processed_logprobs", seed=run seed, dtype=model.dtype)`. The external launcher keeps vLLM's
   worker in this process, so its model is reachable for weight loads; "processed" log-probs are
   those of the distribution actually sampled from (after temperature, top-k, top-p; from 0.10.2 on),
   as our loss expects. `close()` shuts the engine core down and frees its memory.
2. Requests: each group of rows sharing a seed (one prompt's rollouts of a stage) is ONE request,
   `SamplingParams(n=<rows>, seed=<group seed, 62 bits>, logprobs=0, max_tokens=..., stop_token_ids=
   <EOS>)` on the prompt's token ids (`build_requests`, `sampling_kwargs`). vLLM seeds sample i with
   seed + i in an int64, hence the 62-bit mask. Temperatures outside [0.01, 2] are refused.
3. Sleep mode (`rollout.vllm_sleep`): `offload()` (the engine calls it before the policy update)
   puts vLLM to sleep at level 2 (weights and KV cache freed); `update_weights` empties PyTorch's
   cache, wakes the weights, loads the trainer's and resets the prefix cache; `generate` wakes the
   KV cache the same way.
4. Weights (`weight_loader`): vLLM's in-place `reload_weights(weights_iterator=...)` on the
   in-process worker where the installed vLLM has it (0.33.0), else the model's `load_weights` (the
   model runner's path, as TRL does; right for dense unquantized models). `LLM.apply_model` is
   refused: it would pickle CUDA tensors to another process. vLLM's NCCL/IPC weight-transfer engine
   (`WeightTransferConfig`) is not used.
5. Entropy and the engine gap: vLLM returns no entropy. The trainer's model scores the sampled
   responses in one forward pass (no gradient) and the entropy of the same sampling distribution is
   taken there (`trainer_scores`), as verl and TRL do, so `rollouts.token_entropy` stays complete.
   The same pass gives the trainer's log-prob of each sampled token; each step logs the gap to
   vLLM's (`LogprobGap`: `rollout/vllm_kl_k3`, `rollout/vllm_ratio_outside_frac`).
6. Evaluation (calls without `seeds`) runs on the trainer's model in this process (HF backend).
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import inspect
import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from workbench.errors import WorkbenchError
from workbench.rollout.base import BackendDefaults, GenerationBatch, SamplingParams, check_offset
from workbench.vllm_limits import request_seed, temperature_problem, version_problem


def require_vllm() -> None:
    """Raise one line when vLLM is missing or outside the version window this backend is written for."""
    if importlib.util.find_spec("vllm") is None:
        raise WorkbenchError("rollout backend 'vllm': the package 'vllm' is not installed; install the 'gpu' "
                             "extra (pip install -e '.[gpu]') on a CUDA machine, or use backend 'hf'")
    problem = version_problem(importlib.metadata.version("vllm"))
    if problem:
        raise WorkbenchError(problem)


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise WorkbenchError("rollout backend 'vllm' needs a CUDA GPU and none is visible "
                             "(torch.cuda.is_available() is False); use backend 'hf' on this machine")


# -- pure parts (tested without vLLM) ---------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One vLLM request: a prompt sampled `n` times from the stream `seed`, filling `rows`."""

    prompt_token_ids: list[int]
    n: int
    seed: int
    rows: list[int]


def build_requests(prompts: Sequence[Sequence[int]], seeds: Sequence[int]) -> list[Request]:
    """One request per group of rows sharing a seed (the rows of one prompt in one stage)."""
    if len(prompts) != len(seeds):
        raise WorkbenchError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one per prompt)")
    groups: dict[int, list[int]] = {}
    for row, seed in enumerate(seeds):
        groups.setdefault(int(seed), []).append(row)
    out = []
    for seed, rows in groups.items():
        first = list(prompts[rows[0]])
        if any(list(prompts[r]) != first for r in rows[1:]):
            raise WorkbenchError(f"generate: rows {rows} share seed {seed} but not their prompt")
        out.append(Request(first, len(rows), seed, rows))
    return out


def sampling_kwargs(sampling: SamplingParams, n: int, seed: int, eos_token_ids: Sequence[int]) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for one request (top_k 0: off, as in vLLM and TRL)."""
    return dict(n=n, seed=request_seed(seed), temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                top_k=int(sampling.top_k), max_tokens=int(sampling.max_new_tokens), logprobs=0,
                stop_token_ids=[int(t) for t in eos_token_ids], ignore_eos=False, skip_special_tokens=False,
                detokenize=False)


@dataclass
class Completion:
    """One sampled sequence as plain data: ids, the sampled tokens' log-probs, vLLM's finish reason."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None


def plain_outputs(request_outputs: Iterable[Any]) -> list[list[Completion]]:
    """vLLM `RequestOutput`s -> per request, its `n` completions (the sampled token's log-prob from
    each position's {token id: Logprob} map)."""
    out = []
    for ro in request_outputs:
        comps = []
        for o in ro.outputs:
            ids = list(o.token_ids)
            lps = [float(pos[t].logprob) if pos is not None and t in pos else 0.0
                   for t, pos in zip(ids, o.logprobs or [None] * len(ids))]
            comps.append(Completion(ids, lps, o.finish_reason))
        out.append(comps)
    return out


def outputs_to_batch(requests: Sequence[Request], completions: Sequence[Sequence[Completion]], n_rows: int,
                     pad_token_id: int, eos_token_ids: Sequence[int], gen_time_s: float) -> GenerationBatch:
    """Our GenerationBatch from per-request completions (row order restored; no entropy yet)."""
    width = max((len(c.token_ids) for cs in completions for c in cs), default=0)
    tokens = torch.full((n_rows, width), pad_token_id, dtype=torch.long)
    logprobs = torch.zeros((n_rows, width), dtype=torch.float32)
    lengths = torch.zeros(n_rows, dtype=torch.long)
    finished = torch.zeros(n_rows, dtype=torch.bool)
    eos = {int(t) for t in eos_token_ids}
    for req, comps in zip(requests, completions):
        if len(comps) != req.n:
            raise WorkbenchError(f"vLLM returned {len(comps)} completions for a request of n={req.n}")
        for row, c in zip(req.rows, comps):
            t = len(c.token_ids)
            tokens[row, :t] = torch.tensor(c.token_ids, dtype=torch.long)
            logprobs[row, :t] = torch.tensor(c.logprobs, dtype=torch.float32)
            lengths[row] = t
            finished[row] = bool(t) and (c.token_ids[-1] in eos or c.finish_reason == "stop")
    return GenerationBatch(tokens=tokens, logprobs=logprobs, entropy=torch.zeros((n_rows, width)), lengths=lengths,
                           finished=finished, gen_time_s=gen_time_s, has_entropy=False)


def trainer_scores(model: torch.nn.Module, prompts: Sequence[Sequence[int]], batch: GenerationBatch,
                   sampling: SamplingParams, pad_token_id: int, *, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, T] entropy of the sampling distribution at each generated position and [N, T] log-prob of
    each sampled token under it, from the trainer's model (one forward pass per chunk of rows, no
    gradient); 0 past each length."""
    from workbench.algorithms import pack_sequences
    from workbench.rollout.hf import sampling_logprobs

    device = next(model.parameters()).device
    n, width = batch.tokens.shape
    entropy = torch.zeros((n, width), dtype=torch.float32)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    if width == 0:
        return entropy, logprobs
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for i in range(0, n, chunk):
                rows = slice(i, min(n, i + chunk))
                packed = pack_sequences(prompts[rows], batch.tokens[rows], batch.lengths[rows], pad_token_id)
                ids, mask = packed.input_ids.to(device), packed.attention_mask.to(device)
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
                logits = logits[:, packed.response_start - 1:-1]
                k, t, v = logits.shape
                logp = sampling_logprobs(logits.reshape(k * t, v), sampling).reshape(k, t, v)
                ent = torch.special.entr(logp.exp()).sum(-1).float().cpu()
                taken = logp.gather(-1, batch.tokens[rows, :t].to(device).unsqueeze(-1)).squeeze(-1).float().cpu()
                valid = torch.arange(t).unsqueeze(0) < batch.lengths[rows].unsqueeze(1)
                entropy[rows, :t] = torch.where(valid, ent, torch.zeros_like(ent))
                logprobs[rows, :t] = torch.where(valid, taken, torch.zeros_like(taken))
    finally:
        model.train(was_training)
    return entropy, logprobs


RATIO_BAND = (0.5, 2.0)
"""Tokens whose trainer/vLLM probability ratio leaves this band count in `rollout/vllm_ratio_outside_frac`."""


class LogprobGap:
    """The gap between vLLM's log-probs and the trainer's on the same sampled tokens, summed over a
    step's stages: `rollout/vllm_kl_k3` (mean k3 estimate of KL(vLLM || trainer), r = p_trainer /
    p_vllm, k3 = r - 1 - log r) and `rollout/vllm_ratio_outside_frac` (share of tokens with r outside
    `RATIO_BAND`)."""

    def __init__(self) -> None:
        self.k3, self.outside, self.tokens = 0.0, 0, 0

    def add(self, behaviour: torch.Tensor, trainer: torch.Tensor, lengths: torch.Tensor) -> None:
        valid = torch.arange(behaviour.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        log_r = (trainer.double() - behaviour.double())[valid]
        self.k3 += float((torch.expm1(log_r) - log_r).sum())
        lo, hi = RATIO_BAND
        self.outside += int(((log_r < math.log(lo)) | (log_r > math.log(hi))).sum())
        self.tokens += int(valid.sum())

    def take(self) -> dict[str, float]:
        """This step's figures (none when no token was scored), and a fresh start."""
        out = {}
        if self.tokens:
            out = {"rollout/vllm_kl_k3": self.k3 / self.tokens,
                   "rollout/vllm_ratio_outside_frac": self.outside / self.tokens}
        self.k3, self.outside, self.tokens = 0.0, 0, 0
        return out

    def score(self, model: torch.nn.Module, prompts: Sequence[Sequence[int]], batch: GenerationBatch,
              sampling: SamplingParams, pad_token_id: int) -> None:
        """Fill `batch.entropy` from the trainer's model and add the batch's log-prob gap."""
        batch.entropy, trainer_lp = trainer_scores(model, prompts, batch, sampling, pad_token_id)
        batch.has_entropy = True
        self.add(batch.logprobs, trainer_lp, batch.lengths)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def inprocess_worker(llm: Any) -> Any:
    """vLLM's worker when it lives in this process (external launcher), else None (`llm.llm_engine.
    model_executor.driver_worker` in 0.10.2 to 0.33.0; it forwards attributes to the GPU worker)."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    return getattr(executor, "driver_worker", None)


def weight_loader(worker: Any) -> Any:
    """How new weights go into vLLM's in-process model: the worker's in-place `reload_weights(
    weights_iterator=...)` where the model runner takes one (vLLM's own reload path, 0.33.0), else the
    model's `load_weights` (0.10.2 to 0.11: `reload_weights()` there only re-reads the checkpoint).
    None when neither is reachable."""
    runner = getattr(worker, "model_runner", None)
    reload = getattr(runner, "reload_weights", None)
    if reload is not None and "weights_iterator" in inspect.signature(reload).parameters:
        return lambda named: worker.reload_weights(weights_iterator=iter(named))
    model = getattr(runner, "model", None)
    if model is not None and hasattr(model, "load_weights"):
        return model.load_weights
    return None


def check_temperature(temperature: float) -> None:
    problem = temperature_problem(temperature)
    if problem:
        raise WorkbenchError(f"sampling.temperature: {problem}")


class VLLMBackend(BackendDefaults):
    """RolloutBackend over an in-process `vllm.LLM` (see the module docstring)."""

    def __init__(self, llm: Any, *, eos_token_ids: Sequence[int], pad_token_id: int, local: Any = None,
                 sleep: bool = False) -> None:
        self.llm, self.local, self.sleep_mode = llm, local, sleep
        self.eos_token_ids, self.pad_token_id = list(eos_token_ids), int(pad_token_id)
        self._version = 0
        self._asleep = False
        self._weights_stale = False
        self.gap = LogprobGap()

    @classmethod
    def from_path(cls, path: str, *, local: Any = None, eos_token_ids: Sequence[int] | None = None,
                  pad_token_id: int | None = None, gpu_memory_utilization: float = 0.3, sleep: bool = True,
                  dtype: str = "auto", seed: int = 0) -> "VLLMBackend":
        require_vllm()
        require_cuda()
        from vllm import LLM

        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                           ("MASTER_PORT", str(_free_port()))):
            os.environ.setdefault(key, value)  # the external launcher reads torch.distributed's variables
        llm = LLM(model=str(path), gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=sleep,
                  distributed_executor_backend="external_launcher", logprobs_mode="processed_logprobs",
                  seed=request_seed(seed), dtype=dtype, max_num_batched_tokens=4096)
        if eos_token_ids is None:
            eos_token_ids = list(local.eos_token_ids) if local is not None else [llm.get_tokenizer().eos_token_id]
        if pad_token_id is None:
            pad_token_id = local.pad_token_id if local is not None else eos_token_ids[0]
        return cls(llm, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id, local=local, sleep=sleep)

    @property
    def policy_version(self) -> int:
        return self.local.policy_version if self.local is not None else self._version

    @policy_version.setter
    def policy_version(self, value: int) -> None:
        if self.local is not None:
            self.local.policy_version = value
        self._version = value

    # -- weights and memory ---------------------------------------------------------------------

    def offload(self) -> None:
        """Free vLLM's GPU memory for the policy update (sleep level 2: weights and KV cache)."""
        if self.sleep_mode and not self._asleep and self.llm is not None:
            self.llm.sleep(level=2)
            self._asleep, self._weights_stale = True, True

    def _wake(self, tag: str) -> None:
        """Wake one kind of vLLM memory, after handing PyTorch's cached blocks back (as TRL does):
        the trainer's freed activations would otherwise stand between vLLM and its memory."""
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.llm.wake_up(tags=[tag])

    def load_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load (name, tensor) pairs into vLLM's in-process model, then drop cached prefixes (old KV
        values). Refuses to go through `LLM.apply_model`, which would pickle the tensors to a worker
        in another process."""
        loader = weight_loader(inprocess_worker(self.llm))
        if loader is None:
            raise WorkbenchError("rollout backend 'vllm': vLLM's model is not in this process (no in-process "
                                 "worker behind llm.llm_engine.model_executor); weights are not sent through "
                                 "LLM.apply_model, which would pickle them to another process")
        if self._asleep:
            self._wake("weights")
        loader(list(named))
        self.llm.reset_prefix_cache()
        self._weights_stale = False

    def update_weights(self, model: torch.nn.Module) -> None:
        if self.local is not None:
            self.local.update_weights(model)
        else:
            self._version += 1
        self.load_weights((name, p.detach()) for name, p in model.named_parameters())

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        if self.local is not None:
            self.local.load_state(state, version)
        self.load_weights(state.items())
        self.policy_version = version

    def close(self) -> None:
        """Shut vLLM's engine down and free its GPU memory, so that another engine can start in this
        process (sleep mode allows one per process). Safe to call twice."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()  # the engine core's executor and scheduler (0.10.2 to 0.33.0)
        del llm, core
        if importlib.util.find_spec("vllm") is not None:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()  # vLLM's process groups; empties the CUDA cache
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- generation -----------------------------------------------------------------------------

    def take_metrics(self) -> dict[str, float]:
        return self.gap.take()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None,
                 interrupt: Callable[[], bool] | None = None, offset: int = 0) -> GenerationBatch:
        """vLLM's batch runs to its end (`interruptible` is False); evaluation (no seeds) on the local
        backend when there is one."""
        check_offset(self, offset)
        if seeds is None:
            if self.local is not None:
                return self.local.generate(prompts, sampling, generator=generator)
            g = generator or torch.Generator().manual_seed(0)
            seeds = [int(torch.randint(0, 2**62, (1,), generator=g)) for _ in prompts]
        if self.llm is None:
            raise WorkbenchError("rollout backend 'vllm': generate after close()")
        check_temperature(sampling.temperature)
        from vllm import SamplingParams as VSamplingParams

        if self._weights_stale and self.local is not None:
            self.load_weights((name, p.detach()) for name, p in self.local.model.named_parameters())
        if self._asleep:
            self._wake("kv_cache")
            self._asleep = False
        start = time.perf_counter()
        requests = build_requests(prompts, seeds)
        params = [VSamplingParams(**sampling_kwargs(sampling, r.n, r.seed, self.eos_token_ids)) for r in requests]
        outs = self.llm.generate([{"prompt_token_ids": r.prompt_token_ids} for r in requests], params,
                                 use_tqdm=False)
        batch = outputs_to_batch(requests, plain_outputs(outs), len(prompts), self.pad_token_id,
                                 self.eos_token_ids, time.perf_counter() - start)
        if self.local is not None:
            self.gap.score(self.local.model, prompts, batch, sampling, self.pad_token_id)
        return batch
