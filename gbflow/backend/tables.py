"""``table_counts``: counts and sums per id into a table, on the host or the GPU."""
from __future__ import annotations

import numpy as np


def table_counts(xp, ids, size: int, weights=None):
    """``bincount(ids, weights, minlength=size)`` of ids in [0, size), in ``xp`` (NumPy or CuPy):
    (size,) int64 counts, or float64 sums of ``weights`` ((k,) float64, integer-valued in every
    caller, so any order of addition gives the same sums while they stay below 2**53).

    On the GPU by atomic adds into the table (``cuda_kernels.table_counts``), not CuPy's
    bincount: with CuPy's default CUB accelerator that reserved 3-10 GiB of temporary storage
    for 16M ids (measured on an H100), the largest allocation of a 10M x 28 training. Ids
    outside [0, size) are not counted on the GPU; NumPy's table would grow: callers never pass
    them."""
    if xp is np:
        return np.bincount(ids, weights=weights, minlength=size)
    from . import cuda_kernels
    return cuda_kernels.table_counts(ids, size, weights)


def entry_rows(xp, indptr, nnz: int):
    """(nnz,) int32 (int64 from 2**31 rows) the row of each entry of a CSR with row starts
    ``indptr`` ((n_rows + 1,) in ``xp``): a running sum of a table of row starts, linear (a
    binary search of every entry took twice as long; CuPy's repeat takes no device array of
    counts before v14)."""
    n_rows = int(indptr.shape[0]) - 1
    starts = table_counts(xp, indptr[1:-1], nnz + 1)[:nnz]
    return xp.cumsum(starts, dtype=xp.int32 if n_rows < 2**31 else xp.int64)
