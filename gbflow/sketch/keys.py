"""Ordered uint32 keys of float32 values and back, their bits in summary ids, integer weights."""
from __future__ import annotations

import numpy as np

from .. import _dtypes

RADIX_BITS = 16
N_BUCKETS = 1 << RADIX_BITS
SUB_BITS = 8
N_SUB = 1 << SUB_BITS
# Bits below the feature id in the ids of the three summaries (the top bits of the uint32 key).
COARSE_SHIFT = RADIX_BITS
MIDDLE_SHIFT = RADIX_BITS + SUB_BITS
FINE_SHIFT = 32


def ordered_keys(xp, X):
    """uint32 keys whose unsigned order is the float order of X (float32, any shape; -0.0 taken
    as +0.0). NaN entries get meaningless keys; callers mask them out."""
    bits = (X + _dtypes.FEATURE(0.0)).view(xp.uint32)  # -0.0 + 0.0 == +0.0; a new array
    # Negative floats: flip every bit; others: flip the sign bit. The arithmetic shift of the
    # sign gives all ones for negatives, zero otherwise. (In place: every temporary of a large
    # array is an allocation whose pages fault in again.)
    flip = bits.view(xp.int32) >> 31
    flip |= xp.int32(-(2**31))  # the sign bit
    bits ^= flip.view(xp.uint32)
    return bits


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

