"""What the rollout shapes share: the current policy's sampling distribution along given responses (one
teacher-forced pass), a shaped generation's result, and the chi-square helpers of the exactness checks.

Every distribution here is the *sampling* distribution (`workbench.rollout.hf.sampling_logprobs`: the
logits over the temperature, then top-k, then top-p, renormalised), so a draft's log-probability, the
current policy's and the tokens a backend samples are always compared under the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from workbench.errors import WorkbenchError
from workbench.rollout.base import GenerationBatch, SamplingParams
from workbench.rollout.hf import sampling_logprobs


def policy_rows(model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                sampling: SamplingParams, pad_token_id: int, *, max_logits: int = 2**26) -> list[torch.Tensor]:
    """For each (prompt, response), the [len(response), V] float32 log-probabilities of the sampling
    distribution the policy `model` gives each response position (row t: the distribution the t-th
    response token is drawn from), from teacher-forced forward passes over the batch, as many rows at
    a time as keep one pass's logits under `max_logits` floats (a 49k-token vocabulary: a few rows)."""
    out: list[torch.Tensor] = [torch.zeros((0, 0))] * len(prompts)
    live = [i for i, r in enumerate(responses) if len(r)]
    if not live:
        return out
    emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    vocab = int(emb.weight.shape[0]) if emb is not None else 1
    width = max(len(prompts[i]) + len(responses[i]) for i in live)
    chunk = max(1, max_logits // (width * vocab))
    for start in range(0, len(live), chunk):
        part = live[start:start + chunk]
        for i, rows in zip(part, _rows(model, [prompts[i] for i in part], [responses[i] for i in part], sampling,
                                        pad_token_id)):
            out[i] = rows
    return out


def _rows(model: torch.nn.Module, prompts: list, responses: list, sampling: SamplingParams,
          pad_token_id: int) -> list[torch.Tensor]:
    device = next(model.parameters()).device
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for k, x in enumerate(seqs):  # right padding: positions count from 0, as in generation
        ids[k, :len(x)] = torch.as_tensor(x)
        mask[k, :len(x)] = 1
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    finally:
        model.train(was_training)
    picks = [(len(p) - 1, len(r)) for p, r in zip(prompts, responses)]
    flat = torch.cat([logits[k, start:start + n] for k, (start, n) in enumerate(picks)])
    return list(sampling_logprobs(flat, sampling).float().cpu().split([n for _, n in picks]))


def eos_ids(backend: Any) -> set[int]:
    """The EOS ids a backend stops at (a Ray backend's are its local backend's)."""
    ids = getattr(backend, "eos_token_ids", None) or getattr(getattr(backend, "local", None), "eos_token_ids", None)
    if not ids:
        raise WorkbenchError("rollout shapes need the backend's EOS token ids (eos_token_ids)")
    return {int(i) for i in ids}


def entropy_of(logp: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row of log-probabilities (-inf entries count 0)."""
    return torch.special.entr(logp.exp()).sum(-1)


@dataclass
class Shaped:
    """A shaped generation: the batch as a backend returns it, the shape's per-row columns for the
    store (`SHAPE_COLUMNS`), and its figures for the step's metrics (`rollout/shape/...`)."""

    batch: GenerationBatch
    columns: dict[str, np.ndarray] | None
    """None: independent rows (the store's shape columns stay null)."""
    metrics: dict[str, float] = field(default_factory=dict)
    version_end: np.ndarray | None = None
    """[N] the policy version each row ended under (partial rollouts); None: the version it started at."""
    segments: np.ndarray | None = None
    """[N] how many weight versions each row was generated under (partial rollouts); None: one each."""
    loss_mask: torch.Tensor | None = None
    """[N, T] bool: the tokens the model sampled (episodes: never a tool result's); None: every token."""
    episodes: list[Any] | None = None
    """The rows as `workbench.episodes.Episode`s (the episodes shape); None: single-turn rows."""
    finish_reasons: list[str] | None = None
    """Why each row ended, where more than stop / length can (episodes); None: from `batch.finished`."""
    branch: dict[str, np.ndarray] | None = None
    """ARPO branching (episodes): the branch decision per row (`workbench.engine.steplog.BRANCH_COLUMNS`, NaN:
    not a branch); None: no branching."""


class Shape(Protocol):
    """How a prompt's group is generated: the engine's one generate seam (`make_shape`). Independent
    sampling is a shape like the others, and so are multi-turn episodes."""

    name: str

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int], version: int, pad_token_id: int) -> Shaped:
        """One row per prompt (`keys`: each row's prompt index; rows sharing one form a group), sampled
        under the current policy `model` at `version`, each row's stream seeded by `seeds`."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What the shape carries between steps (checkpointed with the run)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def take_metrics(self) -> dict[str, float]:
        """The step's figures (`rollout/shape/...`), reset."""
        ...


SHAPE_COLUMNS = ("shape", "draft_mode", "reused_tokens", "draft_tokens", "draft_rejected_at", "parent_idx",
                 "branch_at")
"""The rollouts' shape columns (see `workbench.store.schema`): the shape's name; speculative: the mode
its draft was verified under (`SHAPE_TEXT`: "exact", or "lenient": not a sample of the current policy;
None: no draft), tokens reused from the draft, the draft's length and the position of its first rejected
token (null: none rejected); tree: the row it branched from (here a slot of the stage's group; the store keeps that row's
`idx`) and the response position of the branch (null: a root or a plainly sampled row)."""


class ShapeMetrics:
    """A shape's figures summed over the stages of a step until the engine takes them (`take_metrics`)."""

    KEEP_LAST = ("rollout/shape/eta",)

    def note(self, metrics: dict[str, float]) -> None:
        acc = self.__dict__.setdefault("_acc", {})
        for k, v in metrics.items():
            acc[k] = v if k in self.KEEP_LAST else acc.get(k, 0) + v

    def take_metrics(self) -> dict[str, float]:
        """The step's figures (and reset); `rollout/shape/accept_rate`: reused / offered draft tokens."""
        m, self._acc = dict(self.__dict__.get("_acc", {})), {}
        if "rollout/shape/draft_tokens" in m:
            m["rollout/shape/accept_rate"] = m["rollout/shape/reused_tokens"] / max(m["rollout/shape/draft_tokens"], 1)
        return m


SHAPE_TEXT = ("shape", "draft_mode")
"""The shape columns that hold a name (None: null); the others are integers (-1: null)."""


def empty_columns(n: int, shape: str) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {"shape": np.asarray([shape] * n, dtype=object),
                                   "draft_mode": np.full(n, None, dtype=object)}
    for name in SHAPE_COLUMNS:
        if name not in SHAPE_TEXT:
            cols[name] = np.full(n, -1, dtype=np.int64)  # -1: null in the store
    return cols


def pad_batch(rows: list[tuple[list[int], list[float], list[float], bool]], pad_token_id: int,
              gen_time_s: float) -> GenerationBatch:
    """A GenerationBatch from per-row (tokens, log-probs, entropies, finished)."""
    n, width = len(rows), max((len(r[0]) for r in rows), default=0)
    tokens = torch.full((n, width), pad_token_id, dtype=torch.long)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    entropy = torch.zeros((n, width), dtype=torch.float32)
    for i, (tok, lp, ent, _) in enumerate(rows):
        tokens[i, :len(tok)] = torch.as_tensor(tok, dtype=torch.long)
        logprobs[i, :len(tok)] = torch.as_tensor(lp, dtype=torch.float32)
        entropy[i, :len(tok)] = torch.as_tensor(ent, dtype=torch.float32)
    return GenerationBatch(tokens=tokens, logprobs=logprobs, entropy=entropy,
                           lengths=torch.tensor([len(r[0]) for r in rows], dtype=torch.long),
                           finished=torch.tensor([r[3] for r in rows], dtype=torch.bool), gen_time_s=gen_time_s)


def row_of(batch: GenerationBatch, i: int) -> tuple[list[int], list[float], list[float], bool]:
    n = int(batch.lengths[i])
    return (batch.tokens[i, :n].tolist(), batch.logprobs[i, :n].tolist(), batch.entropy[i, :n].tolist(),
            bool(batch.finished[i]))


# -- the exactness checks' statistics (no scipy: torch's regularised incomplete gamma) -------------------

def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square with `df` degrees of freedom."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(x / 2, dtype=torch.float64)))


def chi2_homogeneity(a: dict, b: dict, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Chi-square test that two samples (counts per category) come from one distribution: categories
    whose pooled expected count falls below `min_expected` in either sample are merged into one.
    Returns (statistic, degrees of freedom, p-value)."""
    na, nb = sum(a.values()), sum(b.values())
    cats = sorted(set(a) | set(b), key=str)
    pooled = {c: a.get(c, 0) + b.get(c, 0) for c in cats}
    total = na + nb
    big = [c for c in cats if pooled[c] * min(na, nb) / total >= min_expected]
    small = [c for c in cats if c not in big]
    table = [(a.get(c, 0), b.get(c, 0)) for c in big]
    if small:
        table.append((sum(a.get(c, 0) for c in small), sum(b.get(c, 0) for c in small)))
    stat = 0.0
    for ca, cb in table:
        col = ca + cb
        for obs, n in ((ca, na), (cb, nb)):
            exp = col * n / total
            if exp > 0:
                stat += (obs - exp) ** 2 / exp
    df = max(len(table) - 1, 1)
    return stat, df, chi2_sf(stat, df)


def chi2_power(p0: np.ndarray, p1: np.ndarray, n: int, df: int, alpha: float, draws: int = 200_000,
               seed: int = 0) -> float:
    """Power of a chi-square test of two samples of `n` each at level `alpha` against the alternative
    that one comes from `p1` and the other from `p0`: the noncentral chi-square with noncentrality
    n/2 * sum (p1 - p0)^2 / p_bar (two equal samples), by Monte Carlo."""
    pbar = (p0 + p1) / 2
    keep = pbar > 0
    nonc = n / 2 * float((((p1 - p0) ** 2)[keep] / pbar[keep]).sum())
    lo, hi = 0.0, 1000.0  # the critical value, by bisection on the survival function
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, df) > alpha else (lo, mid)
    rng = np.random.default_rng(seed)
    return float((rng.noncentral_chisquare(df, max(nonc, 1e-12), draws) > hi).mean())
