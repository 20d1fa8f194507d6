"""Bootstrap intervals over seeds for the allocator comparison (issue #17).

A comparison has, per allocator, one evaluation curve per seed: held-out pass@1 and pass@8 against
cumulative generated tokens. The question "does allocator A reach uniform's final pass@1 with fewer
tokens, and how sure is that?" is answered by resampling seeds:

1. Each seed's pass@1 curve is interpolated linearly onto a common token grid (0 to the shortest
   seed's final tokens, `GRID` points), so seeds that spent slightly different tokens per step are
   averaged at equal tokens, not at equal steps.
2. One bootstrap replicate draws, with replacement, as many seeds as there are for uniform and,
   independently, for A. Uniform's target is the mean final pass@1 of its drawn seeds; uniform's
   tokens to the target and A's are where the drawn seeds' mean curve first reaches it (linear between
   grid points); the replicate's saving is uniform's tokens over A's. When A's mean curve ends just
   short of the target (its run spent fewer tokens, or seed noise put its end below uniform's), the
   curve is extended along the straight line fitted to its last half (pass@1 curves on the organism
   rise nearly linearly in tokens), up to `EXTEND` times its final tokens; beyond that, or with a
   flat or falling trend, the replicate's saving is 0 (it did not get there).
3. The 90% interval is the 5th and 95th percentile of `REPLICATES` replicates (percentile bootstrap).
   A saving counts as real when the interval's low end is above 1.0.

With 3-5 seeds the interval is wide and itself uncertain (a percentile bootstrap of few seeds
under-covers); it is an honest statement of seed-to-seed spread, not a guarantee.
"""

from __future__ import annotations

import zlib

from typing import Any, Sequence

import numpy as np

GRID = 200
REPLICATES = 2000
LEVEL = 0.90
EXTEND = 1.5


def _grid_curves(curves: Sequence[Sequence[dict[str, Any]]], key: str = "pass1") -> tuple[np.ndarray, np.ndarray]:
    """(grid [G], values [seeds, G]): each seed's `key` interpolated at common token counts."""
    end = min(float(c[-1]["tokens"]) for c in curves)
    grid = np.linspace(0.0, end, GRID)
    vals = np.stack([np.interp(grid, [float(p["tokens"]) for p in c], [float(p[key]) for p in c]) for c in curves])
    return grid, vals


def first_crossing(grid: np.ndarray, values: np.ndarray, target: float) -> float | None:
    """Tokens at which `values` (on `grid`) first reaches `target`, linear between grid points."""
    above = np.nonzero(values >= target - 1e-9)[0]  # a mean may differ from its parts in the last bit
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0 or values[i] == values[i - 1]:
        return float(grid[i])
    frac = (target - values[i - 1]) / (values[i] - values[i - 1])
    return float(grid[i - 1] + frac * (grid[i] - grid[i - 1]))


def reach(grid: np.ndarray, values: np.ndarray, target: float, extend: float = EXTEND) -> tuple[float | None, bool]:
    """(tokens to reach `target`, whether that needed the linear extension), None when out of reach."""
    got = first_crossing(grid, values, target)
    if got is not None or extend <= 1.0:
        return got, False
    half = len(grid) // 2
    slope, icpt = np.polyfit(grid[half:], values[half:], 1)
    if slope <= 0:
        return None, False
    at = max(float(grid[-1]), (target - icpt) / slope)  # a trend already past the target: the run's end
    return (at, True) if at <= extend * grid[-1] else (None, False)


def _interval(samples: np.ndarray) -> list[float]:
    lo, hi = np.percentile(samples, [50 * (1 - LEVEL), 100 - 50 * (1 - LEVEL)])
    return [float(lo), float(hi)]


def bootstrap_saving(reference: Sequence[Sequence[dict[str, Any]]], other: Sequence[Sequence[dict[str, Any]]],
                     replicates: int = REPLICATES, seed: int = 0) -> dict[str, Any]:
    """Token saving of `other` over `reference` (lists of per-seed curves) with its 90% interval.

    Returns `saving` (all seeds, no resampling; `saving_extended` when that took the linear
    extension), `saving_ci90` [low, high], `reached_frac` (share of replicates in which `other` got
    to the target), `extended_frac` (share that needed the extension), `extrapolated` (the all-seeds
    curve needed the extension, or more than half the replicates did) and `real` (low end above 1.0 and
    not extrapolated)."""
    rng = np.random.default_rng(seed)
    rgrid, rvals = _grid_curves(reference)
    ogrid, ovals = _grid_curves(other)
    rfinal = np.array([float(c[-1]["pass1"]) for c in reference])

    def saving(ri: np.ndarray, oi: np.ndarray) -> float:
        target = float(rfinal[ri].mean())
        ref, _ = reach(rgrid, rvals[ri].mean(axis=0), target)
        got, extended = reach(ogrid, ovals[oi].mean(axis=0), target)
        if got is None or ref is None:
            return 0.0, False
        return (ref / got if got > 0 else float("inf")), extended

    point, point_ext = saving(np.arange(len(reference)), np.arange(len(other)))
    draws = [saving(rng.integers(0, len(reference), len(reference)), rng.integers(0, len(other), len(other)))
             for _ in range(replicates)]
    boot = np.array([d[0] for d in draws])
    ci = _interval(np.minimum(boot, 1e9))
    extended_frac = float(np.mean([d[1] for d in draws]))
    # a saving counts only when the curves themselves reach the target: an interval built mostly on the
    # extension past an allocator's last evaluation is extrapolation, not measurement
    measured = point > 0 and not point_ext and extended_frac <= 0.5
    return {"saving": point, "saving_extended": point_ext, "saving_ci90": ci,
            "reached_frac": float((boot > 0).mean()), "extended_frac": extended_frac,
            "real": bool(ci[0] > 1.0 and measured), "extrapolated": not measured}


T90 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812}
"""Student's t quantile for a two-sided 90% interval, by degrees of freedom (1.645 beyond)."""


def prediction_interval(values: Sequence[float]) -> list[float]:
    """Where one more run of the same kind lands, 90% of the time (Student's t prediction interval:
    mean +- t * s * sqrt(1 + 1/n)), from n >= 2 runs; the interval of a mean (`bootstrap_mean`) is
    narrower by sqrt(n + 1) and misses single runs, its own included."""
    n = len(values)
    mean, sd = float(np.mean(values)), float(np.std(values, ddof=1))
    half = T90.get(n - 1, 1.645) * sd * (1 + 1 / n) ** 0.5
    return [mean - half, mean + half]


def bootstrap_mean(values: Sequence[float], replicates: int = REPLICATES, seed: int = 0) -> list[float]:
    """90% percentile-bootstrap interval of the mean of `values` (one per seed)."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    return _interval(v[rng.integers(0, len(v), (replicates, len(v)))].mean(axis=1))


def bootstrap_difference(values: Sequence[float], reference: Sequence[float], replicates: int = REPLICATES,
                         seed: int = 0) -> list[float]:
    """90% interval of mean(values) - mean(reference), the two sets of seeds resampled independently."""
    v, r = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    rng = np.random.default_rng(seed)
    return _interval(v[rng.integers(0, len(v), (replicates, len(v)))].mean(axis=1)
                     - r[rng.integers(0, len(r), (replicates, len(r)))].mean(axis=1))


def with_intervals(result: dict[str, Any], runs: dict[str, list[dict[str, Any]]], reference: str,
                   replicates: int = REPLICATES) -> dict[str, Any]:
    """Add the bootstrap figures to each allocator row of a comparison `result` (in place; returned):
    `saving_ci90`, `saving_real`, `reached_frac`, `final_pass1_ci90`, `final_pass8_ci90`, `seeds`, the
    run's own held-out gain (`gain_pass1`, final minus first evaluation, and its interval), the final
    pass@1 against the reference's (`final_vs_uniform`, its interval), and to the result
    `best_saving_ci90` (the interval of `best_allocator`, None when there is none) and `uniform_learns`:
    whether the reference's gain interval lies above 0. When it does not, the reference's curve never
    rose out of seed noise and a saving measured against its final value says nothing."""
    ref = [r["curve"] for r in runs[reference]]
    ref_finals = [c[-1]["pass1"] for c in ref]
    for row in result["allocators"]:
        rs = runs[row["allocator"]]
        # the resampling stream follows the allocator's name, not its row, so that adding an allocator to a
        # comparison leaves every other row's intervals as they were
        i = zlib.crc32(row["allocator"].encode())
        finals = [r["curve"][-1] for r in rs]
        row["seeds"] = len(rs)
        gains = [r["curve"][-1]["pass1"] - r["curve"][0]["pass1"] for r in rs]
        row["gain_pass1"], row["gain_pass1_ci90"] = float(np.mean(gains)), bootstrap_mean(gains, replicates, seed=i)
        row["final_vs_uniform"] = float(np.mean([p["pass1"] for p in finals]) - np.mean(ref_finals))
        row["final_vs_uniform_ci90"] = bootstrap_difference([p["pass1"] for p in finals], ref_finals, replicates,
                                                            seed=i)
        row["final_pass1_ci90"] = bootstrap_mean([p["pass1"] for p in finals], replicates, seed=i)
        row["final_pass8_ci90"] = bootstrap_mean([p["pass8"] for p in finals], replicates, seed=i)
        row["minutes_ci90"] = bootstrap_mean([r["minutes"] for r in rs], replicates, seed=i)
        b = bootstrap_saving(ref, [r["curve"] for r in rs], replicates, seed=i)
        row["saving_ci90"], row["saving_real"], row["reached_frac"] = b["saving_ci90"], b["real"], b["reached_frac"]
        row["saving_bootstrap_point"], row["extended_frac"] = b["saving"], b["extended_frac"]
        row["saving_extrapolated"] = b["extrapolated"]
    best = next((r for r in result["allocators"] if r["allocator"] == result.get("best_allocator")), None)
    result["best_saving_ci90"] = best["saving_ci90"] if best else None
    ref_row = next(r for r in result["allocators"] if r["allocator"] == reference)
    result["uniform_gain_pass1"], result["uniform_gain_ci90"] = ref_row["gain_pass1"], ref_row["gain_pass1_ci90"]
    result["uniform_learns"] = bool(ref_row["gain_pass1_ci90"][0] > 0)
    # the allocator that ends furthest above uniform at the same per-step budget (the answer to read when
    # uniform did not learn), with its interval; None when no allocator's interval lies above 0
    ahead = [r for r in result["allocators"] if r["allocator"] != reference and r["final_vs_uniform_ci90"][0] > 0]
    top = max(ahead, key=lambda r: r["final_vs_uniform"], default=None)
    result["best_final_vs_uniform"] = ({"allocator": top["allocator"], "diff": top["final_vs_uniform"],
                                        "ci90": top["final_vs_uniform_ci90"]} if top else None)
    return result
