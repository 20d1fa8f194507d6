"""Tolerances for results that float32 arithmetic computes two ways (another batch shape, another
matmul blocking, a sum split into parts, another machine's kernels).

Two float32 computations of the same quantity agree only up to rounding: a sum of n terms taken in
another order can differ by up to n * eps * sum|x_i| (eps = 2**-23 = 1.19e-7), and in practice by
about sqrt(n) * eps * (the terms' magnitude). A tolerance tighter than that passes on one machine and
fails on the next (CI found one: 1.2e-7 against an atol of 1e-8). Every float32 comparison in the
suite takes its tolerance from here, with the number of terms summed and the magnitude they have;
8x headroom over the sqrt(n) estimate still catches any real fault, which moves values by far more
(a wrong mask, position or normaliser changes them at the 1e-2 level or beyond).
"""

from __future__ import annotations

import math

import torch

EPS32 = float(torch.finfo(torch.float32).eps)
HEADROOM = 8.0


def f32_atol(scale: float, terms: int) -> float:
    """Absolute tolerance for float32 results of magnitude up to `scale` that each sum `terms` values."""
    return HEADROOM * math.sqrt(max(int(terms), 1)) * EPS32 * max(float(scale), 1e-30)


def assert_f32_close(got: torch.Tensor, want: torch.Tensor, *, terms: int, scale: float | None = None) -> None:
    """`got` equals `want` up to float32 rounding of `terms`-term sums of magnitude `scale` (default:
    the largest |want|, at least 1: log-probs and entropies come from logits of order 1 and above)."""
    got, want = got.detach(), want.detach().to(got.dtype)
    if scale is None:
        scale = max(float(want.abs().max()) if want.numel() else 0.0, 1.0)
    torch.testing.assert_close(got, want, rtol=0.0, atol=f32_atol(scale, terms))
