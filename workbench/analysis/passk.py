"""pass@k: the unbiased estimator and curves over training with bootstrap confidence intervals.

For a prompt with n samples of which c are correct, the unbiased estimate of the probability that at
least one of k samples is correct is (Chen et al. 2021, "Evaluating Large Language Models Trained on
Code")

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

The product form never forms a binomial coefficient, so it stays exact to float precision for any n
(C(1000, 500) overflows a float; the product does not). It is 1 when n - c < k.

Evaluation rows come from the store's `evals` table: one row per (run_id, step, prompt_id) with
`samples` (n) and `correct` (c), plus `level` (difficulty level, possibly null).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import polars as pl

_CHUNK = 4_000_000
"""Elements of the [rows, max c] work array built at once."""


def pass_at_k(n, c, k):
    """Unbiased pass@k for arrays (or scalars) of sample counts `n`, correct counts `c` and `k`.

    Broadcasts like numpy. Requires 0 <= c <= n and 1 <= k <= n (a ValueError otherwise). Returns a
    float for scalar inputs, else a float64 array.
    """
    n_a, c_a, k_a = np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k))
    scalar = n_a.ndim == 0
    n_a, c_a, k_a = (x.astype(np.int64).ravel() for x in (n_a, c_a, k_a))
    if n_a.size and (np.any(c_a < 0) or np.any(c_a > n_a)):
        raise ValueError("pass_at_k needs 0 <= c <= n for every row")
    if n_a.size and (np.any(k_a < 1) or np.any(k_a > n_a)):
        raise ValueError("pass_at_k needs 1 <= k <= n for every row (k > samples has no unbiased estimate)")
    out = np.ones(n_a.size, dtype=np.float64)
    todo = np.flatnonzero((n_a - c_a >= k_a) & (c_a > 0))
    out[(c_a == 0)] = 0.0
    if todo.size:
        width = max(int(c_a[todo].max()), 1)
        step = max(_CHUNK // width, 1)
        for s in range(0, todo.size, step):
            rows = todo[s:s + step]
            out[rows] = _product_form(n_a[rows], c_a[rows], k_a[rows], width)
    return float(out[0]) if scalar else out.reshape(np.broadcast(np.asarray(n), np.asarray(c), np.asarray(k)).shape)


def _product_form(n: np.ndarray, c: np.ndarray, k: np.ndarray, width: int) -> np.ndarray:
    """1 - prod_{j < c} (1 - k / (n - j)) for rows with n - c >= k, summed in log space."""
    j = np.arange(width)[None, :]
    i = (n[:, None] - j).astype(np.float64)
    active = j < c[:, None]
    terms = np.where(active, np.log1p(-k[:, None] / np.where(active, i, 1.0 + k[:, None])), 0.0)
    return -np.expm1(terms.sum(axis=1))


def with_pass_at_k(evals: pl.DataFrame, ks: Iterable[int]) -> pl.DataFrame:
    """`evals` with one column `pass@k` per k (null where samples < k)."""
    n = evals["samples"].to_numpy()
    c = evals["correct"].to_numpy()
    cols = []
    for k in ks:
        valid = n >= k
        vals = np.full(len(n), np.nan)
        if valid.any():
            vals[valid] = pass_at_k(n[valid], c[valid], k)
        cols.append(pl.Series(f"pass@{k}", vals).fill_nan(None))
    return evals.with_columns(cols)


def bootstrap_mean_ci(values: np.ndarray, *, n_boot: int = 1000, ci: float = 0.95,
                      rng: np.random.Generator | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (resampled with replacement)."""
    if values.size == 0:
        return float("nan"), float("nan")
    rng = rng if rng is not None else np.random.default_rng(0)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    means = values[idx].mean(axis=1)
    alpha = (1.0 - ci) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def pass_at_k_curve(
    evals: pl.DataFrame,
    ks: Sequence[int] = (1,),
    *,
    by: Sequence[str] = ("run_id", "step"),
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """Mean pass@k over prompts per group (default per run and step), with a bootstrap CI over prompts.

    Returns columns `*by, k, pass_at_k, ci_low, ci_high, prompts` sorted by `by` then k. Prompts with
    fewer samples than k are left out of that k's mean (`prompts` counts those used). Add "level" to
    `by` for curves per difficulty level. The bootstrap resamples prompts, the unit the estimate
    generalises over; `seed` makes the intervals reproducible.
    """
    by = list(by)
    rng = np.random.default_rng(seed)
    rows = []
    for k in ks:
        scored = with_pass_at_k(evals, [k]).drop_nulls(f"pass@{k}")
        for key, group in scored.group_by(by, maintain_order=True):
            vals = group[f"pass@{k}"].to_numpy()
            lo, hi = bootstrap_mean_ci(vals, n_boot=n_boot, ci=ci, rng=rng)
            rows.append({**dict(zip(by, key)), "k": k, "pass_at_k": float(vals.mean()), "ci_low": lo,
                         "ci_high": hi, "prompts": len(vals)})
    schema = {col: evals.schema[col] for col in by} | {"k": pl.Int64, "pass_at_k": pl.Float64,
                                                        "ci_low": pl.Float64, "ci_high": pl.Float64,
                                                        "prompts": pl.Int64}
    return pl.DataFrame(rows, schema=schema).sort([*by, "k"])


def pass_at_k_by_k(evals: pl.DataFrame, *, by: Sequence[str] = ("run_id", "step")) -> pl.DataFrame:
    """Mean pass@k for every k from 1 to the smallest sample count of each group (no intervals).

    The shape for "pass@k against k" plots: columns `*by, k, pass_at_k, prompts`.
    """
    by = list(by)
    parts = []
    for _, group in evals.group_by(by, maintain_order=True):
        k_max = int(group["samples"].min())
        for k in range(1, k_max + 1):
            vals = pass_at_k(group["samples"].to_numpy(), group["correct"].to_numpy(), k)
            parts.append({**{col: group[col][0] for col in by}, "k": k, "pass_at_k": float(np.mean(vals)),
                          "prompts": group.height})
    schema = {col: evals.schema[col] for col in by} | {"k": pl.Int64, "pass_at_k": pl.Float64, "prompts": pl.Int64}
    return pl.DataFrame(parts, schema=schema).sort([*by, "k"])


def sharpening_vs_gain(evals: pl.DataFrame, k: int, *, step_from: int | None = None,
                       step_to: int | None = None, by: Sequence[str] = ("run_id",)) -> pl.DataFrame:
    """Did training sharpen the policy or extend what it can solve? Compares two evaluated steps.

    Sharpening (Yue et al. 2025, "Does RL Really Incentivize Reasoning Capacity..."): pass@1 rises
    while pass@k at large k stays flat or falls: probability mass moves onto answers the model could
    already reach. Capability gain: prompts with no correct sample at `step_from` get one at `step_to`
    (`newly_solved`), beyond the ones that lost all their correct samples (`lost`).

    Per group of `by` (default per run; add "level" to split by difficulty) the steps default to the
    group's first and last evaluated step; only prompts evaluated at both count. Columns `*by,
    step_from, step_to, prompts, pass1_from, pass1_to, passk_from, passk_to, newly_solved, lost`.
    Prompts with fewer than k samples at either step are left out of the pass@k means.
    """
    by = list(by)
    rows = []
    for key, group in evals.group_by(by, maintain_order=True):
        a = step_from if step_from is not None else group["step"].min()
        b = step_to if step_to is not None else group["step"].max()
        pair = (group.filter(pl.col("step") == a).select("prompt_id", "samples", "correct")
                .join(group.filter(pl.col("step") == b).select("prompt_id", "samples", "correct"),
                      on="prompt_id", suffix="_to"))
        if pair.is_empty():
            continue
        n0, c0 = pair["samples"].to_numpy(), pair["correct"].to_numpy()
        n1, c1 = pair["samples_to"].to_numpy(), pair["correct_to"].to_numpy()
        ok = (n0 >= k) & (n1 >= k)
        rows.append({**dict(zip(by, key)), "step_from": int(a), "step_to": int(b), "prompts": pair.height,
                     "pass1_from": float(np.mean(c0 / n0)), "pass1_to": float(np.mean(c1 / n1)),
                     "passk_from": float(np.mean(pass_at_k(n0[ok], c0[ok], k))) if ok.any() else None,
                     "passk_to": float(np.mean(pass_at_k(n1[ok], c1[ok], k))) if ok.any() else None,
                     "newly_solved": int(((c0 == 0) & (c1 > 0)).sum()), "lost": int(((c0 > 0) & (c1 == 0)).sum())})
    schema = {col: evals.schema[col] for col in by} | {
        "step_from": pl.Int64, "step_to": pl.Int64, "prompts": pl.Int64, "pass1_from": pl.Float64,
        "pass1_to": pl.Float64, "passk_from": pl.Float64, "passk_to": pl.Float64, "newly_solved": pl.Int64,
        "lost": pl.Int64}
    return pl.DataFrame(rows, schema=schema)
