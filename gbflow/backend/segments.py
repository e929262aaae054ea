"""``sort_segments``: keys sorted within segments, for callers that hold only an array namespace."""
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
