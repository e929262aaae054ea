"""Exact sums of float values in two-word fixed point: the same total for any split of the values.

Every value becomes an integer high word on a grid fine enough for the global total (a power of
two from the global count and the binary exponent of a bound on |value|, ``scales``: the same on
the host and, from a bound still on the device, there) and an integer low word as fine again as
the residual allows; both are summed as int64 (the ``fixed_point_words`` kernel, on the values'
device), the words of every part and process added through the collective, and converted to
float once, correctly rounded. The result is the sum correctly rounded up to an error of about
n * 2**-63 of the bound, whatever the order.
"""
from __future__ import annotations

import math

import numpy as np

_SUM_BITS = 62  # neither word's sum may pass 2**62
_MAX_EXPONENT = 1000  # scales stay finite for the tiniest bounds


def _ceil_log2(count: int) -> int:
    return max(int(count) - 1, 0).bit_length()


def scales(bound: float, count: int) -> tuple[float, float]:
    """(scale, low_scale) of ``count`` values of magnitude at most ``bound``: powers of two such
    that neither word's sum can pass 2**62 (|residual| <= 0.5 after the high word). From the
    bound's binary exponent (bound < 2**e), so that ``device_scale`` gives the same scale."""
    e = math.frexp(float(bound))[1] if math.isfinite(bound) else 0
    return (2.0 ** min(_SUM_BITS - _ceil_log2(count) - e, _MAX_EXPONENT),
            2.0 ** (_SUM_BITS - _ceil_log2(count)))


def device_scale(xp, bound, count: int):
    """``scales(bound, count)[0]`` of a 0-d float64 bound on the device, computed there (no
    wait): the same power of two, frexp being exact."""
    _, e = xp.frexp(bound)
    exponent = xp.minimum(_SUM_BITS - _ceil_log2(count) - e.astype(xp.int64), _MAX_EXPONENT)
    return xp.ldexp(xp.float64(1.0), exponent.astype(xp.int32))


def _exponent(power_of_two: float) -> int:
    return math.frexp(power_of_two)[1] - 1


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


def words(backend, columns: list[list], counts: list[int], bounds: list) -> tuple[list, list]:
    """Each column's parts' two-word fixed-point sums, on the device (nothing waits).

    columns: per sum, this process's parts: float arrays on the backend's device (possibly none).
    counts: per sum, the number of values over every process. bounds: per sum, an upper bound of
    |value| that every process knows (a host float), or a 0-d device array of it (one process:
    the scale is then computed on the device). Returns (per column, per non-empty part, (2,)
    int64 words on the device; per column, the scale (host float or 0-d device array) and the
    low scale)."""
    out, grids = [], []
    for column, count, bound in zip(columns, counts, bounds):
        if isinstance(bound, float):
            scale, low_scale = scales(bound, count)
        else:
            scale, low_scale = device_scale(backend.xp, bound, count), scales(1.0, count)[1]
        grids.append((scale, low_scale))
        out.append([backend.kernels.fixed_point_words(a, scale, low_scale) for a in column
                    if a.size])
    return out, grids


def totals(words: list[list], grids: list, bounds: list, collective) -> list[float]:
    """The global sums from ``words``' host copies (per column, per part), their grids and
    bounds (host values): one ``allreduce_sum``. A sum whose bound is not finite is that bound
    (NaN or infinity). Every process calls it with the same columns."""
    if not words:
        return []
    local = np.zeros((len(words), 2), dtype=np.int64)
    for j, column in enumerate(words):
        for w in column:
            local[j] += np.asarray(w, dtype=np.int64)
    summed = collective.allreduce_sum(local)
    return [total(h, lo, float(scale), float(low_scale)) if math.isfinite(bound) else bound
            for (h, lo), (scale, low_scale), bound in zip(summed, grids, bounds)]


def sums(backend, columns: list[list], counts: list[int], bounds: list, collective) -> list:
    """Exact global sums, one per column, with host bounds (see ``words``): one wait for the
    device and one ``allreduce_sum``."""
    column_words, grids = words(backend, columns, counts, bounds)
    flat = [w for column in column_words for w in column]
    fetched = iter(backend.to_host_all(flat))
    return totals([[next(fetched) for _ in column] for column in column_words], grids, bounds,
                  collective)
