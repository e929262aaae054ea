"""``compute_cuts``: the three passes over every part and process, and the reductions between."""
from __future__ import annotations

import numpy as np

from .. import _dtypes, fixed_point
from ..backend import kernels_for
from ..collective import LOCAL
from ..csr import CSR
from ..cuts import Cuts
from . import direct
from .blocks import BLOCK_VALUES, kept_blocks
from .direct import direct_cuts, n_values
from .keys import fixed_weights
from .passes import MiddleTable, coarse_summary, fine_summary, middle_summary
from .selection import bucket_slots, candidate_buckets, candidate_sub_buckets, choose_cuts
from .summary import merge


def compute_cuts(xp, parts: list, weights: list | None, max_bin: int,
                 collective=LOCAL, block_values: int = BLOCK_VALUES, *,
                 n_rows: int | None = None, max_weight: float | None = None,
                 kernels=None) -> Cuts:
    """Exact weighted quantile cuts over all ``parts`` of every process of ``collective``.

    parts: non-empty list, each a (n_i, n_features) float32 array (NaN = missing) or a
    ``csr.CSR`` (absent entries and stored NaN = missing), in the ``xp`` namespace or in host
    memory (then read a block at a time: data larger than the device) (n_i may be 0);
    a CSR part costs time in proportion to its stored entries. weights: matching list of (n_i,)
    float arrays, or None for unit weights; a row's weight applies to each of its values.
    block_values: values per block in the summary passes. n_rows, max_weight: the row count and
    the largest weight over every process, when the caller has them already (each saves a
    reduction; every process must pass them alike). kernels: the backend's kernels for ``xp``
    (None: ``backend.kernels_for(xp)``). The result does not depend on how rows
    are split into parts or processes, nor on their order, nor on whether a part is dense or CSR.
    One process with at most ``direct.DIRECT_VALUES`` values skips the passes: tallying all its
    values at once gives the same cuts (``direct.direct_cuts``).
    Reductions (every process calls them in the same order): row count and max weight (unless
    given), then per pass
    the sparse summary (gathered, then merged by adding the weights of equal ids), except for
    the middle pass while its dense table fits (``passes.MiddleTable``): that table is summed
    (``allreduce_sum`` of an int64 array in ``xp``).
    """
    if max_bin < 2:
        raise ValueError(f"max_bin must be at least 2, got {max_bin}")
    for p in parts:  # the sketch reads float32 bit patterns: another width gives wrong keys
        dtype = p.data.dtype if isinstance(p, CSR) else p.dtype
        if dtype != np.float32:
            raise TypeError(f"compute_cuts: parts must hold float32 values, got {dtype}")
    n_value_bins = max_bin - 1  # bin 0 is reserved for missing values
    if n_rows is None:
        n_rows = int(collective.allreduce_sum(
            np.array([sum(int(p.shape[0]) for p in parts)], dtype=np.int64))[0])
    scale = 1.0
    if weights is not None:
        if max_weight is None:
            max_weight = collective.allreduce_max(max(
                (float(w.max()) for w in weights if len(w)), default=0.0))
        scale = fixed_point.fixed_point_scale(max_weight, n_rows, _dtypes.SKETCH_SUM_LIMIT)
    fixed = [None] * len(parts) if weights is None else \
        [fixed_weights(xp, w, scale) for w in weights]
    if collective.size == 1 and n_values(parts) <= direct.DIRECT_VALUES:
        values, offsets = direct_cuts(xp, [_in(xp, p) for p in parts], fixed, n_value_bins)
        return Cuts(values=values, offsets=offsets, max_bin=max_bin)

    def merged(summaries):
        # local parts first (one message per process), then every process's: exact in any order
        return merge(collective.allgather(merge(summaries)))

    kernels = kernels or kernels_for(xp)
    kept = [kept_blocks(p) for p in parts]  # small parts' blocks serve all three passes
    coarse = merged([coarse_summary(xp, p, w, block_values, k, kernels)
                     for p, w, k in zip(parts, fixed, kept)])
    candidates = candidate_buckets(coarse, n_value_bins)
    slots = bucket_slots(candidates, coarse, None if weights is None else n_rows)
    if MiddleTable.fits(slots):  # one in-place sum of a dense table, no host merge
        table = MiddleTable(xp, slots, coarse.n_features, kernels)
        for p, w, k in zip(parts, fixed, kept):
            table.add(p, w, block_values, k)
        table.counts = collective.allreduce_sum(table.counts)
        middle = table.summary()
        del table
    else:
        middle = merged([middle_summary(xp, p, w, slots, block_values, k, kernels)
                         for p, w, k in zip(parts, fixed, kept)])
    sub_candidates = candidate_sub_buckets(coarse, slots, middle, n_value_bins)
    fine = merged([fine_summary(xp, p, w, slots, sub_candidates, block_values, k, kernels)
                   for p, w, k in zip(parts, fixed, kept)])
    del kept
    values, offsets = choose_cuts(coarse, candidates, slots, middle, sub_candidates, fine,
                                  n_value_bins)
    return Cuts(values=values, offsets=offsets, max_bin=max_bin)


def _in(xp, part):
    """A dense part or ``CSR`` in the ``xp`` namespace (a copy when it is in host memory)."""
    if isinstance(part, CSR):
        return CSR(indptr=xp.asarray(part.indptr), indices=xp.asarray(part.indices),
                   data=xp.asarray(part.data), n_cols=part.n_cols)
    return xp.asarray(part)
