"""Kernels for callers that hold only an array namespace: segment sorts and sums, rank pairs."""
from __future__ import annotations

import numpy as np


def sort_segments(xp, ptr, keys, weights=None):
    """``numpy_kernels.sort_segments`` in ``xp``: the numba kernel on the host (one thread a
    segment), one radix sort of (segment, key) on the GPU. ptr: (S + 1,) int64 in ``xp``;
    keys: (n,) uint32, weights: (n,) float64 or None, both sorted in place and returned."""
    if xp is np:
        from . import cpu_kernels
        return cpu_kernels.sort_segments(ptr, keys, weights)
    from . import cuda_kernels
    return cuda_kernels.sort_segments(ptr, keys, weights)


def segment_sums(xp, starts, values):
    """``numpy_kernels.segment_sums`` in ``xp``: (S, k) float64 sums of the rows of each
    segment of ``values`` ((n, k) float64), added in row order (the same bits on every
    backend). starts: (S + 1,) int64 in ``xp``."""
    out = xp.empty((len(starts) - 1, values.shape[1]), dtype=xp.float64)
    if xp is np:
        from . import cpu_kernels
        return cpu_kernels.segment_sums(values, starts, out)
    from . import cuda_kernels
    return cuda_kernels.segment_sums(values, starts, out)


def lambda_pairs(xp, *args):
    """``numpy_kernels.lambda_pairs`` (its arguments) in ``xp``: numba on the host, CUDA on the
    GPU. Returns (own, top)."""
    if xp is np:
        from . import cpu_kernels
        return cpu_kernels.lambda_pairs(*args)
    from . import cuda_kernels
    return cuda_kernels.lambda_pairs(*args)


def pair_order_counts(xp, values, starts, query_of):
    """``numpy_kernels.pair_order_counts`` in ``xp`` (numba on the host, CUDA on the GPU):
    (n,) int64, a new array."""
    out = xp.empty(len(values), dtype=xp.int64)
    if xp is np:
        from . import cpu_kernels
        return cpu_kernels.pair_order_counts(values, starts, query_of, out)
    from . import cuda_kernels
    return cuda_kernels.pair_order_counts(values, starts, query_of, out)
