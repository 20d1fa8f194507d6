"""Off-policy correction for rollouts generated under an older policy (the asynchronous pipeline).

A stale row was sampled by the behaviour policy pi_behav (the generator's weights, its per-token
log-probabilities stored with the row), while the update starts from the proximal policy pi_prox (the
trainer's weights at the start of the update). `correct` returns, for a micro-batch, the log-probs the
PPO ratio is anchored to and per-token advantages carrying the importance weight, so that any
registered policy loss that takes per-token advantages applies the correction unchanged:

- "bypass": the ratio pi / pi_behav against the generator's own log-probabilities, no weight (verl's
  bypass mode, PipelineRL's anchor). The clip then also bounds how far from the behaviour policy the
  update moves.
- "decoupled" (Hilton et al. 2022, as AReaL uses it): the ratio pi / pi_prox, times the truncated
  behaviour weight w = min(pi_prox / pi_behav, is_cap), per token or once per sequence (the product
  of the sequence's token ratios). Because w > 0, w * max(-A r, -A clip(r)) = max(-(wA) r, -(wA)
  clip(r)): the weight folds into the advantage exactly.
- "none": the ratio against pi_prox and no weight (an ablation: the stale data treated as fresh).

Rows that are not stale (generated under the weights the trainer holds) keep the synchronous loop's
anchor, pi_prox, and weight 1, so a pipeline at staleness 0 is the synchronous loop exactly.

Diagnostics (`train/...`, over the stale rows' tokens; 1 and 0 when there are none): the weight's
mean and max, the share truncated by `is_cap`, the k3 estimate of KL(behaviour || proximal), and the
effective sample size of the weights as a share of the tokens (Kish: (sum w)^2 / (n sum w^2)).
"""

from __future__ import annotations

import torch

from workbench.algorithms.losses import kl_k3


def behaviour_weights(prox: torch.Tensor, behav: torch.Tensor, mask: torch.Tensor, *, level: str,
                      cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The raw weight pi_prox / pi_behav per token [N, T] ("token") or per sequence broadcast over
    its tokens ("sequence"), and the same truncated at `cap`. Positions outside `mask` hold 1."""
    m = mask.bool()
    log_ratio = torch.where(m, prox - behav, torch.zeros_like(prox))
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(prox)
    raw = torch.where(m, torch.exp(log_ratio), torch.ones_like(prox))
    return raw, raw.clamp(max=cap)


def correct(prox: torch.Tensor, behav: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, stale: torch.Tensor,
            *, mode: str, level: str = "token", cap: float = 2.0
            ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], torch.Tensor]:
    """Anchor log-probs [N, T], per-token advantages [N, T], diagnostics, and each row's mean weight [N].

    `prox` and `behav` are [N, T] log-probabilities of the sampled tokens under the proximal and the
    behaviour policy, `adv` [N] per-sequence or [N, T] per-token advantages, `stale` [N] bool the rows to
    correct."""
    stale_t = stale.bool().unsqueeze(1).expand_as(prox)
    raw, w = behaviour_weights(prox.detach(), behav, mask, level=level, cap=cap)
    if mode != "decoupled":
        w = torch.ones_like(w)
    w = torch.where(stale_t, w, torch.ones_like(w))
    anchor = torch.where(stale_t, behav, prox) if mode == "bypass" else prox
    adv_tok = (adv.unsqueeze(1) if adv.ndim == 1 else adv).to(prox.dtype) * w
    m = mask.bool()
    sel = m & stale_t
    n = int(sel.sum())
    lengths = m.sum(-1).clamp(min=1)
    row_weight = (w * m).sum(-1) / lengths
    if n == 0:
        return anchor, adv_tok, {"train/is_weight_mean": 1.0, "train/is_weight_max": 1.0,
                                 "train/is_truncated_frac": 0.0, "train/kl_behav_k3": 0.0,
                                 "train/ess_frac": 1.0, "train/stale_tokens": 0.0}, row_weight
    ws = w[sel]
    metrics = {
        "train/is_weight_mean": float(ws.mean()),
        "train/is_weight_max": float(ws.max()),
        "train/is_truncated_frac": float((raw[sel] > cap).float().mean()) if mode == "decoupled" else 0.0,
        # KL(behaviour || proximal) from behaviour samples: k3 of log(pi_prox / pi_behav)
        "train/kl_behav_k3": float(kl_k3(behav[sel], prox.detach()[sel]).mean()),
        "train/ess_frac": float(ws.sum() ** 2 / (n * (ws ** 2).sum())),
        "train/stale_tokens": float(n),
    }
    return anchor, adv_tok, metrics, row_weight
