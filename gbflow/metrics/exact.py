"""Exact sums of float values in two-word fixed point: the same total for any split of the values.

Every value becomes an integer high word on a grid fine enough for the global total (a power of
two from the global count and a bound on |value|: ``fixed_point.fixed_point_scale``) and an
integer low word 2**30 or more times finer; both are summed as int64 (the ``fixed_point_words``
kernel, on the values' device), the words of every part and process added through the collective,
and converted to float once, correctly rounded. The result is the sum correctly rounded up to an
error of about n * 2**-63 of the bound, whatever the order.
"""
from __future__ import annotations

import math

import numpy as np

from .. import fixed_point


def _exponent(power_of_two: float) -> int:
    return math.frexp(power_of_two)[1] - 1


def scales(bound: float, count: int) -> tuple[float, float]:
    """(scale, low_scale) of ``count`` values of magnitude at most ``bound``: powers of two such
    that neither word's sum can pass 2**62 (|residual| <= 0.5 after the high word)."""
    return (fixed_point.fixed_point_scale(float(bound), int(count)),
            fixed_point.fixed_point_scale(0.5, int(count)))


def total(high: int, low: int, scale: float, low_scale: float) -> float:
    """The float of high / scale + low / (scale * low_scale), correctly rounded: the words are
    ((high << low_bits) + low) units of 2**-(scale_bits + low_bits), exactly; float(int) rounds
    correctly and ldexp by a power of two is exact (barring underflow)."""
    scale_bits, low_bits = _exponent(scale), _exponent(low_scale)
    return math.ldexp(float((int(high) << low_bits) + int(low)), -(scale_bits + low_bits))


def local_max_abs(xp, column: list):
    """A 0-d float64 device array: the largest |value| of this process's parts (0 for none; NaN
    if any value is NaN)."""
    maxima = [xp.abs(a).max() for a in column if a.size]
    return xp.stack(maxima).max().astype(xp.float64) if maxima else \
        xp.zeros((), dtype=xp.float64)


def sums(backend, columns: list[list], counts: list[int], bounds: list, collective,
         fetch: list = ()) -> tuple[list, list]:
    """Exact global sums, one per column, with one wait for the device and one
    ``allreduce_sum``.

    columns: per sum, this process's parts: float arrays on the backend's device (possibly none).
    counts: per sum, the number of values over every process. bounds: per sum, an upper bound of
    |value| that every process knows (a sum whose bound is not finite is that bound, or NaN).
    Every process must call this with the same counts and bounds. fetch: other device arrays
    the caller needs on the host, fetched in the same copy as the words. Returns (the sums, host
    copies of ``fetch``).
    """
    words, grids = [], []
    for column, count, bound in zip(columns, counts, bounds):
        scale, low_scale = scales(bound if math.isfinite(bound) else 1.0, count)
        grids.append((scale, low_scale))
        words += [backend.kernels.fixed_point_words(a, scale, low_scale) for a in column
                  if a.size]
    fetched = backend.to_host_all(words + list(fetch))
    extra = fetched[len(words):]
    if not columns:
        return [], extra
    local = np.zeros((len(columns), 2), dtype=np.int64)
    at = 0
    for j, column in enumerate(columns):
        for a in column:
            if a.size:
                local[j] += np.asarray(fetched[at], dtype=np.int64)
                at += 1
    summed = collective.allreduce_sum(local)
    return [total(h, lo, *grid) if math.isfinite(bound) else bound
            for (h, lo), grid, bound in zip(summed, grids, bounds)], extra
