"""The policy update of one training step (`policy_update`): `updates_per_step` optimiser steps over
the rows the allocator let into the update, in micro-batches that never mix sampling temperatures,
each group's prompt computed once (`grouped_logprobs`). Rows whose group carries no signal are skipped
in the forward/backward pass (without a KL term) while their tokens stay in the normaliser, so the
update equals the full-batch one (see `workbench/engine/loop.py`, points 2 and 7)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from workbench.algorithms import (GroupedBatch, entropy_scaled_advantages, get_policy_loss, group_sequences,
                                  grouped_logprobs)
from workbench.algorithms.correction import correct
from workbench.algorithms.losses import loss_normaliser
from workbench.engine.setup import Setup
from workbench.engine.steplog import Rollouts
from workbench.faults import fault_point


@dataclass
class UpdateResult:
    """What the policy update returns: its metrics and what it computed per row."""

    metrics: dict[str, float]
    """`train/` metrics."""
    row_weight: np.ndarray | None = None
    """[N] each stale row's mean importance weight (NaN: not in a forward pass); None: no `stale` given."""
    trainer_logprobs: torch.Tensor | None = None
    """[N, T] the trainer's log-probabilities of the sampled tokens (NaN: not in a forward pass); None
    unless `logging.token_logprobs`."""


@dataclass
class _Sums:
    """Running sums of one update: metric totals weighted by response tokens, and the largest weight."""

    totals: dict[str, float] = field(default_factory=dict)
    weights: float = 0.0
    is_max: float = 1.0


def policy_update(s: Setup, r: Rollouts, adv: np.ndarray, used: np.ndarray, signal: np.ndarray,
                  rng: np.random.Generator, *, stale: np.ndarray | None = None) -> UpdateResult:
    """`updates_per_step` optimiser steps on the used rows. `adv` is one advantage per row [N], or one per
    token [N, T] (ARPO's hard attribution); `algorithm.entropy_advantage` scales either per token (AEPO).

    `stale` [N] marks rows generated under an older policy than the trainer's (the asynchronous
    pipeline): their loss gets `pipeline.correction` (`workbench.algorithms.correction`) and the result
    carries each row's mean importance weight. With `logging.token_logprobs` it carries the trainer's
    log-probabilities of the sampled tokens."""
    a = s.cfg.algorithm
    used_rows = np.flatnonzero(used)
    if a.updates_per_step > 1:
        used_rows = rng.permutation(used_rows)
    train_rows = used_rows if a.kl_coef > 0 else used_rows[signal[used_rows]]
    mask_all = r.train_mask().float()  # the tokens the loss sees (episodes: never a tool result's)
    old = r.logprobs.clone()  # behaviour logprobs; on-policy rows are replaced below
    if a.updates_per_step > 1:
        old_onp = _logprobs(s, r, train_rows[~r.off_policy[train_rows]], grad=False)
        for i, row in enumerate(train_rows[~r.off_policy[train_rows]]):
            old[row] = old_onp[i]
    train_set = set(train_rows.tolist())
    sums = _Sums()
    out = UpdateResult({}, np.full(r.n, np.nan) if stale is not None else None,
                       torch.full_like(r.logprobs, float("nan")) if s.cfg.logging.token_logprobs else None)
    for chunk in np.array_split(used_rows, a.updates_per_step):
        norm = loss_normaliser(mask_all[chunk], a.aggregation, s.cfg.sampling.max_new_tokens)
        rows_in = [int(i) for i in chunk if int(i) in train_set]
        loss_total = sum(_micro_step(s, r, micro, old, adv, stale, norm, sums, out)
                         for micro in _micro_batches(rows_in, r.temperature, a.micro_batch_size))
        clip = s.cfg.optim.grad_clip if s.cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(s.model.parameters(), clip))
        fault_point("update")
        s.optimizer.step()
        s.scheduler.step()
        s.optimizer.zero_grad(set_to_none=True)
        sums.totals["train/loss_sum"] = sums.totals.get("train/loss_sum", 0.0) + loss_total
        sums.totals["train/grad_norm_sum"] = sums.totals.get("train/grad_norm_sum", 0.0) + grad_norm
    totals = sums.totals
    m = {k: v / sums.weights for k, v in totals.items() if not k.endswith("_sum")} if sums.weights else {}
    m["train/loss"] = totals.get("train/loss_sum", 0.0) / a.updates_per_step
    m["train/grad_norm"] = totals.get("train/grad_norm_sum", 0.0) / a.updates_per_step
    m["train/sequences"] = float(len(train_rows))
    if stale is not None:
        m["train/is_weight_max"] = sums.is_max
    out.metrics = m
    return out


def _micro_step(s: Setup, r: Rollouts, micro: list[int], old: torch.Tensor, adv: np.ndarray,
                stale: np.ndarray | None, norm: torch.Tensor | float, sums: _Sums, out: UpdateResult) -> float:
    """Forward and backward of one micro-batch (gradients accumulate); its loss. Adds its metrics to
    `sums` and its rows' importance weights and trainer log-probs to `out`."""
    a, pc, dev = s.cfg.algorithm, s.cfg.pipeline, s.device
    batch, t = _pack(s, r, micro)
    batch = batch.to(dev)
    logp, ent = grouped_logprobs(s.model, batch, pad_token_id=s.pad_id, temperature=t,
                                 with_entropy=a.entropy_advantage > 0)
    width = logp.shape[1]
    # What the loss sees: the response's tokens the model sampled. Tool-result tokens of an episode stay
    # in the attention (`batch.response_mask`) but out of the loss, its normaliser and its metrics.
    loss_mask = batch.response_mask if r.loss_mask is None else \
        batch.response_mask * r.train_mask()[micro, :width].to(dev, batch.response_mask.dtype)
    if out.trainer_logprobs is not None:  # what the trainer makes of the sampled tokens, for the store
        out.trainer_logprobs[micro, :width] = logp.detach().float().cpu()
    onp = torch.as_tensor(~r.off_policy[micro], device=dev).unsqueeze(1)
    old_m = old[micro, :width].to(dev)
    if a.updates_per_step == 1:
        old_m = torch.where(onp, logp.detach(), old_m)
    adv_m = torch.as_tensor(adv[micro] if adv.ndim == 1 else adv[micro, :width], dtype=torch.float32, device=dev)
    cm: dict[str, float] = {}
    if stale is not None:
        behav = r.logprobs[micro, :width].to(dev)
        old_m, adv_m, cm, w_row = correct(
            old_m, behav, adv_m, loss_mask, torch.as_tensor(stale[micro] & ~r.off_policy[micro], device=dev),
            mode=pc.correction, level=pc.correction_level, cap=pc.is_cap)
        sums.is_max = max(sums.is_max, cm.pop("train/is_weight_max"))
        out.row_weight[micro] = w_row.cpu().double().numpy()
    if a.entropy_advantage > 0:  # AEPO: per token, by the trainer's entropy standardised over the micro-batch
        adv_m = entropy_scaled_advantages(adv_m, ent, loss_mask, a.entropy_advantage)
    ref = None
    if s.ref_model is not None:
        with torch.no_grad():
            ref, _ = grouped_logprobs(s.ref_model, batch, pad_token_id=s.pad_id, temperature=t)
    loss, m = get_policy_loss(a.loss)(logp, old_m, adv_m, loss_mask, clip_low=a.clip_low,
                                      clip_high=a.clip_high, aggregation=a.aggregation, ref_logprobs=ref,
                                      kl_coef=a.kl_coef, max_tokens=s.cfg.sampling.max_new_tokens, normalizer=norm)
    loss.backward()
    w = float(loss_mask.sum())
    sums.weights += w
    for k, v in {**m, **cm}.items():
        sums.totals[k] = sums.totals.get(k, 0.0) + v * w
    return float(loss.detach())


def weights_finite(model: torch.nn.Module) -> bool:
    """Every parameter finite (a non-finite loss or gradient makes an optimiser step write NaN into all
    of them): one reduction per tensor, and one read of the answer (on a GPU, one synchronisation per
    step rather than one per tensor)."""
    with torch.no_grad():
        return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


def _micro_batches(rows: list[int], temps: np.ndarray, size: int) -> list[list[int]]:
    """Split rows into micro-batches of at most `size` (0: one), never mixing temperatures."""
    out: list[list[int]] = []
    for t in sorted({float(temps[i]) for i in rows}):
        same = [i for i in rows if float(temps[i]) == t]
        step = size or len(same)
        out += [same[i:i + step] for i in range(0, len(same), step)]
    return out


def _pack(s: Setup, r: Rollouts, rows: list[int]) -> tuple[GroupedBatch, float]:
    """The rows' prompts (each distinct one once) and responses, and their sampling temperature."""
    lengths = r.lengths[rows]
    width = int(lengths.max()) if len(rows) else 0
    batch = group_sequences([s.prompts.train_tok[int(r.prompt[i])] for i in rows], r.tokens[rows, :width],
                            lengths, s.pad_id)
    return batch, float(r.temperature[rows[0]])


def _logprobs(s: Setup, r: Rollouts, rows: np.ndarray, grad: bool) -> torch.Tensor:
    """[len(rows), T] logprobs of the current policy (no grad), in `rows` order."""
    out = torch.zeros((len(rows), r.tokens.shape[1]))
    order = {int(row): i for i, row in enumerate(rows)}
    for micro in _micro_batches([int(i) for i in rows], r.temperature, s.cfg.algorithm.micro_batch_size):
        batch, t = _pack(s, r, micro)
        with torch.set_grad_enabled(grad):
            logp, _ = grouped_logprobs(s.model, batch.to(s.device), pad_token_id=s.pad_id, temperature=t)
        for j, row in enumerate(micro):
            out[order[row], :logp.shape[1]] = logp[j].detach().cpu()
    return out
