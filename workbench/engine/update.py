"""The policy update of one training step (`policy_update`): `updates_per_step` optimiser steps over
the rows the allocator let into the update, in micro-batches that never mix sampling temperatures,
each group's prompt computed once (`grouped_logprobs`). Rows whose group carries no signal are skipped
in the forward/backward pass (without a KL term) while their tokens stay in the normaliser, so the
update equals the full-batch one (see `workbench/engine/loop.py`, points 2 and 7)."""

from __future__ import annotations

import numpy as np
import torch

from workbench.algorithms import GroupedBatch, get_policy_loss, group_sequences, grouped_logprobs
from workbench.algorithms.correction import correct
from workbench.algorithms.losses import loss_normaliser
from workbench.engine.setup import Setup
from workbench.engine.steplog import Rollouts
from workbench.faults import fault_point


def policy_update(s: Setup, r: Rollouts, adv: np.ndarray, used: np.ndarray, signal: np.ndarray,
                  rng: np.random.Generator, *, stale: np.ndarray | None = None,
                  row_weight: np.ndarray | None = None) -> dict[str, float]:
    """`updates_per_step` optimiser steps on the used rows; returns `train/` metrics.

    `stale` [N] marks rows generated under an older policy than the trainer's (the asynchronous
    pipeline): their loss gets `pipeline.correction` (`workbench.algorithms.correction`), and each
    row's mean importance weight is written into `row_weight` [N]. With `logging.token_logprobs` the
    trainer's log-probabilities of the sampled tokens go into `r.trainer_logprobs` (rows not in a
    forward pass: NaN)."""
    a, dev = s.cfg.algorithm, s.device
    loss_fn = get_policy_loss(a.loss)
    used_rows = np.flatnonzero(used)
    if a.updates_per_step > 1:
        used_rows = rng.permutation(used_rows)
    train_rows = used_rows if a.kl_coef > 0 else used_rows[signal[used_rows]]
    mask_all = r.mask().float()
    old = r.logprobs.clone()  # behaviour logprobs; on-policy rows are replaced below
    if a.updates_per_step > 1:
        old_onp = _logprobs(s, r, train_rows[~r.off_policy[train_rows]], grad=False)
        for i, row in enumerate(train_rows[~r.off_policy[train_rows]]):
            old[row] = old_onp[i]
    train_set = set(train_rows.tolist())
    totals: dict[str, float] = {}
    weights = 0.0
    pc = s.cfg.pipeline
    is_max = 1.0
    trainer_lp = torch.full_like(r.logprobs, float("nan")) if s.cfg.logging.token_logprobs else None
    for chunk in np.array_split(used_rows, a.updates_per_step):
        norm = loss_normaliser(mask_all[chunk], a.aggregation, s.cfg.sampling.max_new_tokens)
        rows_in = [int(i) for i in chunk if int(i) in train_set]
        loss_total = 0.0
        for micro in _micro_batches(rows_in, r.temperature, a.micro_batch_size):
            batch, t = _pack(s, r, micro)
            batch = batch.to(dev)
            logp, _ = grouped_logprobs(s.model, batch, pad_token_id=s.pad_id, temperature=t)
            width = logp.shape[1]
            if trainer_lp is not None:  # what the trainer makes of the sampled tokens, for the store
                trainer_lp[micro, :width] = logp.detach().float().cpu()
            onp = torch.as_tensor(~r.off_policy[micro], device=dev).unsqueeze(1)
            old_m = old[micro, :width].to(dev)
            if a.updates_per_step == 1:
                old_m = torch.where(onp, logp.detach(), old_m)
            adv_m = torch.as_tensor(adv[micro], dtype=torch.float32, device=dev)
            if stale is not None:
                behav = r.logprobs[micro, :width].to(dev)
                old_m, adv_m, cm, w_row = correct(
                    old_m, behav, adv_m, batch.response_mask, torch.as_tensor(stale[micro] & ~r.off_policy[micro],
                                                                              device=dev),
                    mode=pc.correction, level=pc.correction_level, cap=pc.is_cap)
                is_max = max(is_max, cm.pop("train/is_weight_max"))
                if row_weight is not None:
                    row_weight[micro] = w_row.cpu().double().numpy()
            ref = None
            if s.ref_model is not None:
                with torch.no_grad():
                    ref, _ = grouped_logprobs(s.ref_model, batch, pad_token_id=s.pad_id, temperature=t)
            loss, m = loss_fn(logp, old_m, adv_m, batch.response_mask, clip_low=a.clip_low, clip_high=a.clip_high,
                              aggregation=a.aggregation, ref_logprobs=ref, kl_coef=a.kl_coef,
                              max_tokens=s.cfg.sampling.max_new_tokens, normalizer=norm)
            loss.backward()
            loss_total += float(loss.detach())
            w = float(batch.response_mask.sum())
            weights += w
            if stale is not None:
                m = {**m, **cm}
            for k, v in m.items():
                totals[k] = totals.get(k, 0.0) + v * w
        clip = s.cfg.optim.grad_clip if s.cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(s.model.parameters(), clip))
        fault_point("update")
        s.optimizer.step()
        s.scheduler.step()
        s.optimizer.zero_grad(set_to_none=True)
        totals["train/loss_sum"] = totals.get("train/loss_sum", 0.0) + loss_total
        totals["train/grad_norm_sum"] = totals.get("train/grad_norm_sum", 0.0) + grad_norm
    r.trainer_logprobs = trainer_lp
    out = {k: v / weights for k, v in totals.items() if not k.endswith("_sum")} if weights else {}
    out["train/loss"] = totals.get("train/loss_sum", 0.0) / a.updates_per_step
    out["train/grad_norm"] = totals.get("train/grad_norm_sum", 0.0) / a.updates_per_step
    out["train/lr"] = s.scheduler.get_last_lr()[0]
    out["train/sequences"] = float(len(train_rows))
    out["train/optimizer_steps"] = float(a.updates_per_step)
    if stale is not None:
        out["train/is_weight_max"] = is_max
    return out


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
    batch = group_sequences([s.train_tok[int(r.prompt[i])] for i in rows], r.tokens[rows, :width],
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
