"""Float gradients -> int64 fixed point, and exact (order-independent) sums of float values.

The scale is a power of two chosen from the global maximum |value| and the global row count, both of
which reduce exactly (max and integer sum), so every shard and worker quantises with the same scale
and every histogram sum is an exact integer: no float addition order can change a model.
"""
from __future__ import annotations

import math

from . import _dtypes


def fixed_point_scale(max_abs: float, n_rows: int, limit: float = _dtypes.FIXED_SUM_LIMIT) -> float:
    """Power-of-two factor such that n_rows values of magnitude <= max_abs sum below ``limit``
    (2**62 for gradients; the sketch passes 2**52 for weights summed in float64)."""
    if not (max_abs > 0) or n_rows == 0:
        return 1.0
    exponent = math.floor(math.log2(limit / (n_rows * max_abs)))
    return 2.0 ** min(exponent, 1000)


def to_fixed(xp, values, scale: float):
    """values (any float dtype, any shape) -> int64 round(values * scale), same shape, same device."""
    return xp.rint(values.astype(xp.float64) * scale).astype(_dtypes.FIXED)


def quantise_gradients(xp, grad, hess, scale_g: float, scale_h: float):
    """(n_rows,) float32 gradient and hessian -> (n_rows, 2) int64 [g, h] in fixed point (new array)."""
    gh = xp.empty((grad.shape[0], 2), dtype=_dtypes.FIXED)
    gh[:, 0] = to_fixed(xp, grad, scale_g)
    gh[:, 1] = to_fixed(xp, hess, scale_h)
    return gh


def exact_sum(xp, parts: list, max_abs: float | None = None) -> float:
    """Sum of all values of all ``parts`` (float arrays), independent of how they are split.

    Each value is rounded to a fixed-point grid fine enough for the total (relative error about
    2**-62 of the largest value times the count), then added as integers. ``max_abs`` may be given
    when it is known globally (several workers); else it is taken from ``parts``.
    """
    n = sum(int(p.size) for p in parts)
    if n == 0:
        return 0.0
    if max_abs is None:
        max_abs = max(float(xp.abs(p).max()) if p.size else 0.0 for p in parts)
    scale = fixed_point_scale(max_abs, n)
    total = sum(int(to_fixed(xp, p, scale).sum()) for p in parts)
    return total / scale
