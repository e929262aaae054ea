"""Ordered uint32 keys (``backend.common``'s) back to values, their bits in summary ids, weights."""
from __future__ import annotations

import numpy as np

from ..backend.common import ordered_keys  # noqa: F401  (its home: the kernels use it too)
from ..backend.sketch_tallies import BUCKET_BITS as RADIX_BITS  # the kernels' layout
from ..backend.sketch_tallies import N_BUCKETS, N_SUB, SUB_BITS  # noqa: F401

# Bits below the feature id in the ids of the three summaries (the top bits of the uint32 key).
COARSE_SHIFT = RADIX_BITS
MIDDLE_SHIFT = RADIX_BITS + SUB_BITS
FINE_SHIFT = 32


def keys_to_values(keys: np.ndarray) -> np.ndarray:
    """Inverse of ``ordered_keys``: uint32 keys -> float32 values."""
    keys = np.asarray(keys, dtype=np.uint32)
    positive = (keys >> 31).astype(bool)
    bits = np.where(positive, keys & np.uint32(0x7FFFFFFF), ~keys)
    return bits.astype(np.uint32).view(np.float32)


def fixed_weights(xp, weight, scale: float):
    """Integer-valued float64 sketch weights (n_rows,), or None for unit weights."""
    if weight is None:
        return None
    return xp.rint(weight.astype(xp.float64) * scale)

