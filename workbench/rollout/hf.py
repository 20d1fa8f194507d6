"""In-process Hugging Face generation with a hand-written KV-cache loop (CPU or CUDA).

`HFBackend` samples continuations for a batch of prompts and returns, per generated token, its
log-probability and the entropy of the distribution it was sampled from (after temperature, top-k and
top-p). Writing the loop ourselves, rather than calling `model.generate`, gives those two numbers for
the cost of one log-softmax per step; NOTES measured the loop within ~15% of `generate` at batch 1,024
and equal up to 256 on the organism.

How it works:
1. Prompts (token ids, BOS included) are left-padded; position ids count real tokens only, so a
   padded prompt sees exactly the positions it would see alone.
2. One prefill forward fills a `DynamicCache` and gives the first next-token logits; then one forward
   per new token (input [N, 1]) until `max_new_tokens` or until every sequence has produced EOS.
   A prompt asked for several times (a GRPO group) is prefilled once; its cache rows and first
   logits are then copied out to each of its samples.
3. Each step: logits / temperature, keep the top-k, keep the top-p nucleus, renormalise, sample with
   the caller's `torch.Generator` (top_k == 1 takes the argmax: greedy, no randomness consumed).
   Given per-row `seeds`, each group of rows sharing a seed draws one uniform per row and step from
   its own generator and samples by inverse CDF, so a group's tokens do not depend on the rest of the
   batch: the engine's seeds derive from (run seed, step, stage, prompt), and any split of a stage
   across Ray workers gives the in-process rollouts.
4. After a sequence's EOS its remaining positions hold the pad id and 0 logprob/entropy. Once at
   most half the working batch is unfinished (`compact_below`), finished rows leave the batch and the
   KV cache, so a long tail of long generations does not pay for the short ones.

The model runs in eval mode (no dropout) under `torch.inference_mode`; its previous train/eval mode is
restored afterwards, because the backend usually shares the trainer's module.

Weights: the in-process backend normally holds the *same* module as the trainer, so new weights are
already in place after the optimiser step and `update_weights(model)` only bumps `policy_version`.
Given a different module, it copies that module's state dict into its own. `generator_backend` gives
the asynchronous pipeline's generator a backend of its own: a child process (`ProcessBackend`) or, in
this process, an `HFBackend` over a copy of the module; the pipeline pushes it weights with `load_state`.

Results come back on the CPU (the store and the verifier read them there; the trainer moves what it
needs), whatever device the model runs on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from workbench.algorithms.logprobs import distinct_prompts, left_pad_ids
from workbench.errors import WorkbenchError
from workbench.rollout.base import BackendDefaults, GenerationBatch, ModelSpec, SamplingParams
from workbench.store.inflight import ProgressSink


def validate_sampling(sampling: SamplingParams) -> None:
    """Reject sampling parameters outside their ranges, naming the field."""
    if not sampling.temperature > 0:
        raise WorkbenchError(f"sampling.temperature must be > 0, got {sampling.temperature}")
    if not 0 < sampling.top_p <= 1:
        raise WorkbenchError(f"sampling.top_p must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise WorkbenchError(f"sampling.top_k must be >= 0 (0 disables it), got {sampling.top_k}")
    if sampling.max_new_tokens < 1:
        raise WorkbenchError(f"sampling.max_new_tokens must be >= 1, got {sampling.max_new_tokens}")


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device | str = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, P] input ids and attention mask with the prompts right-aligned (left padding)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise WorkbenchError("generate needs at least one prompt, and every prompt at least one token (BOS)")
    ids, mask = left_pad_ids(prompts, pad_token_id)
    return ids.to(device), mask.to(device)


def sampling_logprobs(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """Log-probabilities [N, V] of the sampling distribution: temperature, then top-k, then top-p.

    Filtered tokens get -inf. The same order as transformers' logits warpers, so that with a shared
    seed the distribution matches `generate`'s.
    """
    x = logits.float()
    if sampling.temperature != 1.0:
        x = x / sampling.temperature
    vocab = x.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = torch.topk(x, sampling.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -torch.inf)
    if sampling.top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= sampling.top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, -torch.inf)
    return torch.log_softmax(x, dim=-1)


def sample_tokens(logp: torch.Tensor, greedy: bool, generator: torch.Generator | None,
            uniform: torch.Tensor | None = None) -> torch.Tensor:
    if greedy:
        return logp.argmax(dim=-1)
    if uniform is not None:
        return inverse_cdf_sample(logp, uniform)
    return torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)


def inverse_cdf_sample(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token per row of `logp` [N, V] from one uniform draw per row ([N] in [0, 1)).

    The token is the first whose cumulative probability exceeds `u` times the row's total, so a
    token of probability 0 (filtered by top-k/top-p) is never taken. Each row depends only on its own
    logits and its own draw: the basis of per-group seeds (see `GroupStreams`)."""
    probs = logp.exp()
    cdf = probs.cumsum(dim=-1)
    target = (uniform.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    tok = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    over = tok >= logp.shape[-1]  # u * total rounded up to the total: take the last token with mass
    if bool(over.any()):
        vocab = torch.arange(logp.shape[-1], device=logp.device)
        last = torch.where(probs[over] > 0, vocab, -1).amax(dim=-1)
        tok[over] = last
    return tok


class GroupStreams:
    """One random stream per group of rows: rows sharing a seed draw, in row order, from one
    `torch.Generator` seeded with it, one uniform per row and per decoding step.

    A group's draws therefore depend only on its seed and its size, never on which other groups share
    the batch, the worker, or the batch's order: the same group sampled alone, in another batch or by
    another worker gets the same tokens (given the same logits). Draws come `CHUNK` steps at a time
    (one generator call per group per chunk, not per step)."""

    CHUNK = 32

    def __init__(self, seeds: Sequence[int], offset: int = 0) -> None:
        order: dict[int, list[int]] = {}
        for row, seed in enumerate(seeds):
            order.setdefault(int(seed), []).append(row)
        self.sizes = [len(rows) for rows in order.values()]
        self.generators = [torch.Generator().manual_seed(seed & (2**63 - 1)) for seed in order]
        flat = [row for rows in order.values() for row in rows]
        self.inverse = None if flat == list(range(len(flat))) else torch.argsort(torch.tensor(flat))
        self.table: torch.Tensor | None = None
        self.start = 0
        self.offset = offset
        for chunk in range(0, offset - offset % self.CHUNK, self.CHUNK):  # the draws a cut-off segment made
            self.draw(chunk - offset)

    def draw(self, step: int) -> torch.Tensor:
        """[N] uniforms in [0, 1) for decoding step `step` (0, 1, ... in order, counted from `offset`),
        in row order."""
        step += self.offset
        if self.table is None or step >= self.start + self.CHUNK:
            self.start = step - step % self.CHUNK
            parts = [torch.rand((k, self.CHUNK), generator=g).T for k, g in zip(self.sizes, self.generators)]
            table = torch.cat(parts, dim=1)
            self.table = table if self.inverse is None else table[:, self.inverse]
        return self.table[step - self.start]


def generator_for(device: torch.device, generator: torch.Generator | None) -> torch.Generator | None:
    """A generator usable on `device`: the caller's own when it lives there, else one on `device`
    seeded from the caller's (so a CPU generator still makes CUDA sampling reproducible)."""
    if generator is None or generator.device.type == device.type:
        return generator
    seeded = torch.Generator(device=device)
    seeded.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    return seeded


def _eos_ids(tokenizer, model) -> list[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = getattr(tokenizer, "eos_token_id", None)
    if ids is None:
        raise WorkbenchError("the tokenizer and the model's generation config define no EOS token")
    return [int(i) for i in ([ids] if isinstance(ids, int) else ids)]


class HFBackend(BackendDefaults):
    """RolloutBackend over an in-process transformers causal LM (see the module docstring).

    `eos_token_ids` / `pad_token_id` default to the model's generation config and the tokenizer;
    `compact_below` is the unfinished share of the working batch at which finished rows are dropped.
    """

    def __init__(self, model: torch.nn.Module, tokenizer, device: str | torch.device = "cpu", *,
                 eos_token_ids: Sequence[int] | None = None, pad_token_id: int | None = None,
                 compact_below: float = 0.5) -> None:
        self.model = model
        # Finished rows leave the working batch and its KV cache once the unfinished share falls to
        # this or below (0 disables; 1 compacts as soon as any row finishes).
        self.compact_below = compact_below
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.eos_token_ids = list(eos_token_ids) if eos_token_ids is not None else _eos_ids(tokenizer, model)
        pad = pad_token_id if pad_token_id is not None else getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else self.eos_token_ids[0]
        self.policy_version = 0
        # where the decoding loop reports its progress while it goes (`workbench.store.inflight`: the
        # Live page's rollouts in flight); None reports nothing and costs nothing
        self.progress: ProgressSink | None = None
        self._check_device()

    def _check_device(self) -> None:
        param = next(self.model.parameters(), None)
        if param is not None and param.device.type != self.device.type:
            raise WorkbenchError(f"the model is on {param.device} but the rollout backend was asked for "
                                 f"{self.device}; move the model first (model.to('{self.device}'))")

    interruptible = True

    @classmethod
    def in_worker(cls, spec: ModelSpec, state: Mapping[str, torch.Tensor], device: str | torch.device, *,
                  eos_token_ids: Sequence[int], pad_token_id: int) -> "HFBackend":
        """The backend of another process (the generator process, a Ray worker): the trainer's module
        rebuilt from `spec` with the weights `state`, without a tokenizer."""
        return cls(spec.build(state, device), None, device, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)

    def update_weights(self, model: torch.nn.Module) -> None:
        """Take new weights: nothing to copy when `model` is the backend's own module; bump policy_version."""
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())
        self.policy_version += 1

    def load_state(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        self.model.load_state_dict(state)
        self.policy_version = version

    def generator_backend(self, kind: str, *, threads: int) -> BackendDefaults:
        """"process": a child process holding the generator's weights (this side keeps no copy; each
        push goes into the child's shared buffers). "thread": an `HFBackend` over a copy of the module,
        for a thread of this process (torch's thread count is per calling thread: it sets its own)."""
        if kind == "process":
            from workbench.rollout.process_backend import ProcessBackend

            gen: BackendDefaults = ProcessBackend(self.model, device=self.device, eos_token_ids=self.eos_token_ids,
                                                  pad_token_id=self.pad_token_id, threads=threads)
        elif kind == "thread":
            import copy

            # the copy keeps the requires_grad flags: turning them off changes the CPU kernels'
            # rounding (measured), and eta = 0 must give the synchronous run's log-probs exactly
            gen = HFBackend(copy.deepcopy(self.model), self.tokenizer, self.device, eos_token_ids=self.eos_token_ids,
                            pad_token_id=self.pad_token_id, compact_below=self.compact_below)
            gen.progress = self.progress  # the generator thread's batches are the run's rollouts in flight
        else:
            raise WorkbenchError(f"pipeline.generator: {kind!r} is not allowed (process or thread)")
        gen.policy_version = self.policy_version
        return gen

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None,
                 interrupt: Callable[[], bool] | None = None, offset: int = 0) -> GenerationBatch:
        """Sample one continuation per prompt; see GenerationBatch for the layout.

        `seeds` (one per prompt) samples each group of rows sharing a seed from its own stream
        (`GroupStreams`); without it the whole batch draws from `generator`. `interrupt`, asked before
        every decoding step after the first, stops the batch early when it says so (new weights for a
        partial rollout): unfinished rows come back with `cut` set. `offset` continues the seeds'
        streams where an interrupted segment of that many tokens left them."""
        validate_sampling(sampling)
        if seeds is not None and len(seeds) != len(prompts):
            raise WorkbenchError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one per prompt)")
        start = time.perf_counter()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                streams = GroupStreams(seeds, offset) if seeds is not None else None
                tokens, logprobs, entropy, lengths, finished, cut = self._loop(prompts, sampling, generator, streams,
                                                                               interrupt)
        finally:
            self.model.train(was_training)
        return GenerationBatch(tokens=tokens, logprobs=logprobs, entropy=entropy, lengths=lengths,
                               finished=finished, gen_time_s=time.perf_counter() - start, cut=cut)

    def _forward(self, ids, mask, pos, cache) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                         use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

    def _loop(self, prompts, sampling: SamplingParams, generator, streams: GroupStreams | None = None,
              interrupt: Callable[[], bool] | None = None):
        """The KV-cache decoding loop: prefill the prompts, then `decode`."""
        return self.decode(self._prefill(prompts), sampling, generator, streams, interrupt)

    def _prefill(self, prompts: Sequence[Sequence[int]]) -> "DecodeState":
        from transformers import DynamicCache

        dev = self.device
        uniques, where = distinct_prompts(prompts)
        shared = len(uniques) < len(prompts)
        ids, mask = left_pad(uniques if shared else prompts, self.pad_token_id, dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=getattr(self.model, "config", None))
        logits = self._forward(ids, mask, pos, cache)
        if shared:  # each distinct prompt was prefilled once: copy it out per sample
            index = torch.tensor(where, dtype=torch.long, device=dev)
            cache.batch_select_indices(index)
            logits, mask, pos = logits[index], mask[index], pos[index]
        return DecodeState(cache=cache, logits=logits, mask=mask, next_pos=pos[:, -1] + 1)

    def decode(self, state: "DecodeState", sampling: SamplingParams, generator: torch.Generator | None = None,
               streams: GroupStreams | None = None, interrupt: Callable[[], bool] | None = None):
        """Decode from `state` (a cache someone filled and each row's next-token logits) until
        `max_new_tokens` (or each row's `limits`) or EOS; CPU tensors (tokens, logprobs, entropy, lengths,
        finished, cut) trimmed to the longest generation. Call it under `torch.inference_mode` with the
        model in eval mode (as `generate` does).

        `rows` maps each row of the working batch to its output row: when compaction drops finished
        sequences from the working batch (and the cache), the outputs keep their places.
        """
        dev = self.device
        generator = generator_for(dev, generator)
        cache, logits, mask, next_pos = state.cache, state.logits, state.mask, state.next_pos
        n, t_max = logits.shape[0], sampling.max_new_tokens
        limits = state.limits.to(dev) if state.limits is not None else torch.full((n,), t_max, device=dev)
        t_max = min(t_max, int(limits.max())) if n else t_max
        forced = state.forced.to(dev) if state.forced is not None else None
        tokens = torch.full((n, t_max), self.pad_token_id, dtype=torch.long, device=dev)
        logprobs = torch.zeros((n, t_max), dtype=torch.float32, device=dev)
        entropy = torch.zeros((n, t_max), dtype=torch.float32, device=dev)
        finished = torch.zeros(n, dtype=torch.bool, device=dev)  # ended with EOS
        stopped = torch.zeros(n, dtype=torch.bool, device=dev)  # EOS, or its own limit reached
        lengths = torch.zeros(n, dtype=torch.long, device=dev)
        eos = torch.tensor(self.eos_token_ids, dtype=torch.long, device=dev)
        rows = torch.arange(n, device=dev)
        greedy = sampling.top_k == 1
        steps = 0
        cut = None
        sink = self.progress
        if sink is not None:
            sink.begin(n, t_max)
        for t in range(t_max):
            logp = sampling_logprobs(logits, sampling)
            uniform = streams.draw(t)[rows.cpu()] if streams is not None and not greedy else None
            tok = sample_tokens(logp, greedy, generator, uniform)
            if t == 0 and forced is not None:  # a token chosen by the caller (a speculative residual draw)
                tok = torch.where(forced >= 0, forced, tok)
            alive = ~stopped[rows]
            live_rows = rows[alive]
            tokens[live_rows, t] = tok[alive]
            logprobs[live_rows, t] = logp[alive].gather(-1, tok[alive].unsqueeze(-1)).squeeze(-1)
            entropy[live_rows, t] = torch.special.entr(logp[alive].exp()).sum(-1)
            lengths[live_rows] += 1
            finished[live_rows] |= torch.isin(tok[alive], eos)
            stopped[live_rows] = finished[live_rows] | (lengths[live_rows] >= limits[live_rows])
            steps = t + 1
            still = ~stopped[rows]
            n_still = int(still.sum())
            if t + 1 == t_max or n_still == 0:
                break
            if interrupt is not None and interrupt():
                cut = ~finished.cpu()
                break
            if sink is not None:  # the batch goes on: its progress so far, when a write is due
                sink.tick(t, tokens, lengths, stopped)
            if n_still <= self.compact_below * rows.numel():
                keep = still.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                rows, mask, next_pos, tok = rows[keep], mask[keep], next_pos[keep], tok[keep]
            mask = torch.cat([mask, mask.new_ones((rows.numel(), 1))], dim=1)
            logits = self._forward(tok.unsqueeze(-1), mask, next_pos.unsqueeze(-1), cache)
            next_pos = next_pos + 1
        if sink is not None:
            sink.end(steps - 1, tokens, lengths, stopped)
        return (tokens[:, :steps].cpu(), logprobs[:, :steps].cpu(), entropy[:, :steps].cpu(),
                lengths.cpu(), finished.cpu(), cut)


@dataclass
class DecodeState:
    """A batch ready for its next decoding step: `HFBackend.decode` goes on from here. The speculative
    shape builds one from its verification pass (the drafts' accepted prefixes already in the cache)."""

    cache: object
    """The rows' key/value cache (a transformers `DynamicCache`), one batch row per row."""
    logits: torch.Tensor
    """[N, V] each row's next-token logits."""
    mask: torch.Tensor
    """[N, W] attention mask over the cache's W columns (0: padding, or a cached column the row drops)."""
    next_pos: torch.Tensor
    """[N] the position id of each row's next token."""
    forced: torch.Tensor | None = None
    """[N] a token each row takes at the first step instead of sampling one (-1: sample); its stored
    log-probability and entropy are read from `logits` as for a sampled token."""
    limits: torch.Tensor | None = None
    """[N] how many tokens each row may generate (default: `max_new_tokens` for every row)."""


@dataclass
class BareGeneration:
    """What `bare_generate` returns: new tokens only (pad after EOS), as `model.generate` made them."""

    tokens: torch.Tensor
    """[N, T] int64 generated ids (prompt columns removed)."""
    gen_time_s: float


def bare_generate(model: torch.nn.Module, tokenizer, prompts: Sequence[Sequence[int]], sampling: SamplingParams,
                  *, device: str | torch.device = "cpu") -> BareGeneration:
    """Plain `model.generate` on the same left-padded prompts and sampling settings, timed.

    The baseline for the engine's `rollout_vs_bare_ratio`: it returns no logprobs or entropy, which is
    exactly the work the workbench's own loop adds. top_k == 1 runs greedy decoding.
    """
    validate_sampling(sampling)
    eos = _eos_ids(tokenizer, model)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = eos[0] if pad is None else int(pad)
    ids, mask = left_pad(prompts, pad, device)
    greedy = sampling.top_k == 1
    kwargs = dict(do_sample=False) if greedy else dict(
        do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_new_tokens,
                                 eos_token_id=eos, pad_token_id=pad, **kwargs)
    finally:
        model.train(was_training)
    return BareGeneration(tokens=out[:, ids.shape[1]:].cpu(), gen_time_s=time.perf_counter() - start)
