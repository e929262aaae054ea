"""Ordered uint32 keys (``backend.common``'s) back to values, their bits in summary ids, weights."""
from __future__ import annotations

import numpy as np

from ..backend.common import ordered_keys  # noqa: F401  (its home: the kernels use it too)

RADIX_BITS = 16
N_BUCKETS = 1 << RADIX_BITS
SUB_BITS = 8
N_SUB = 1 << SUB_BITS
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

