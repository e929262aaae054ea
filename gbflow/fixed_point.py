"""Fixed point: float values -> int64 on a power-of-two grid, and exact (order-independent) sums.

The scale is a power of two chosen from a global bound on |value| (the loss's own bound, or the
global maximum) and the global row count, both of which every process gets exactly (max and
integer sum), so every shard and worker quantises with the same scale and every histogram sum is
an exact integer: no float addition order can change a model. The conversion of gradients itself
is the ``quantise_gradients`` kernel of each backend.

"Global" means over every process of a ``gbflow.collective.Collective`` (``LOCAL`` in one
process).
"""
from __future__ import annotations

import math

import numpy as np

from . import _dtypes
from .collective import LOCAL


def local_max_abs(xp, parts: list) -> float:
    """max |value| over all arrays of ``parts`` on this process, 0.0 when they hold no value."""
    return max((float(xp.abs(p).max()) for p in parts if p.size), default=0.0)


def global_count(parts: list, collective=LOCAL) -> int:
    """Number of values in ``parts`` summed over every process."""
    n = sum(int(p.size) for p in parts)
    return int(collective.allreduce_sum(np.array([n], dtype=np.int64))[0])


def fixed_point_scale(max_abs: float, n_rows: int, limit: float = _dtypes.FIXED_SUM_LIMIT) -> float:
    """Power-of-two factor such that n_rows values of magnitude <= max_abs sum below ``limit``
    (2**62 for gradients; the sketch passes 2**52 for weights summed in float64)."""
    if not (max_abs > 0) or n_rows == 0:
        return 1.0
    ratio = limit / (n_rows * max_abs)
    if ratio >= 2.0 ** 1001:  # (also infinite: values below about 1e-290) the cap below
        return 2.0 ** 1000
    exponent = math.floor(math.log2(ratio))
    return 2.0 ** min(exponent, 1000)


def to_fixed(xp, values, scale: float):
    """values (any float dtype, any shape) -> int64 round(values * scale), same shape and
    device."""
    return xp.rint(values.astype(xp.float64) * scale).astype(_dtypes.FIXED)


def exact_sum(xp, parts: list, max_abs: float | None = None, collective=LOCAL) -> float:
    """Sum of all values of all ``parts`` (float arrays) on every process of ``collective``,
    independent of how the values are split into parts and processes.

    Each value is rounded to a fixed-point grid fine enough for the total (relative error about
    2**-62 of the largest value times the count), then added as integers. The grid comes from the
    global count and the global max |value| (``max_abs`` when given, else reduced from ``parts``).
    Every process must call this at the same point: it runs three reductions (count, max, sum).
    """
    n = global_count(parts, collective)
    if max_abs is None:
        max_abs = float(collective.allreduce_max(local_max_abs(xp, parts)))
    if n == 0:
        return 0.0
    scale = fixed_point_scale(max_abs, n)
    # Each part's int64 sum, and this process's total, stay below 2**62 (the scale guarantees it
    # for any subset of the n values), so the integers below are exact.
    total = sum(int(to_fixed(xp, p, scale).sum()) for p in parts)
    total = int(collective.allreduce_sum(np.array([total], dtype=np.int64))[0])
    return total / scale
