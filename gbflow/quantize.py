"""Raw float32 columns -> the binned matrix (the cuts come from ``sketch.compute_cuts``)."""
from __future__ import annotations

from .cuts import Cuts


def padded_width(n_features: int, itemsize: int) -> int:
    """Columns to allocate per binned row so that a row never straddles two 64-byte cache lines:
    the next power of two bytes below 64, a multiple of 64 bytes above."""
    row_bytes = n_features * itemsize
    padded = 64 * -(-row_bytes // 64) if row_bytes > 64 else 1 << max(0, row_bytes - 1).bit_length()
    return padded // itemsize


def quantize(backend, X, cuts: Cuts):
    """Bin ids of X: (n_rows, n_features) uint8/uint16 in X's namespace, a new array.

    X: (n_rows, n_features) float32 on the backend's device. The result is a view of a wider,
    zero-padded array (see ``padded_width``): tree growing reads rows in scattered order, and a row
    inside one cache line costs one memory access instead of two.
    """
    xp = backend.xp
    n_rows, n_features = X.shape
    storage = xp.zeros((n_rows, padded_width(n_features, cuts.bin_dtype.itemsize)),
                       dtype=cuts.bin_dtype)
    out = storage[:, :n_features]
    return backend.kernels.bin_features(X, xp.asarray(cuts.values), xp.asarray(cuts.offsets), out)
