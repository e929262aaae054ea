"""``direct_cuts``: the same cuts for data small enough to tally every value at once."""
from __future__ import annotations

import numpy as np

from ..backend.segments import sort_segments
from ..backend.tables import entry_rows, table_counts
from ..csr import CSR
from .blocks import _n_features
from .keys import FINE_SHIFT, ordered_keys
from .selection import _Targets, cut_arrays
from .summary import _host_summary, _runs, _search_segments, _tally, _union

# One process whose parts hold at most this many values (missing ones and a CSR's stored entries
# counted) takes ``direct_cuts``: its keys and sort order stay some 100 MB. On a 60,000 x 2,005
# one-hot CSR the three passes took 0.20 s of a 0.8 s training on two cores, one sort of every
# (feature, key) id as int64 0.08 s, grouping by feature and sorting uint32 keys within each
# feature 0.03 s.
DIRECT_VALUES = 1 << 22


def n_values(parts: list) -> int:
    """The values the parts hold (a CSR's stored entries), as ``DIRECT_VALUES`` counts them."""
    return sum(int(p.nnz) if isinstance(p, CSR) else int(p.shape[0]) * int(p.shape[1])
               for p in parts)


def _present_values(xp, part, weight):
    """(feature ids, uint32 keys, float64 weights or None) of a part's present values, (k,)
    each in ``xp``: a CSR's stored entries in entry order, a dense matrix's feature by feature."""
    if isinstance(part, CSR):
        values, feature = part.data, part.indices
        weights = None if weight is None else weight[entry_rows(xp, part.indptr, part.nnz)]
    else:
        n_rows, n_features = part.shape
        values = xp.ascontiguousarray(part.T).reshape(-1)
        feature = xp.repeat(xp.arange(n_features, dtype=xp.int32), n_rows)
        weights = None if weight is None else xp.tile(weight, n_features)
    present = ~xp.isnan(values)
    return (feature[present], ordered_keys(xp, values[present]),
            None if weights is None else weights[present].astype(xp.float64))


def _feature_order(xp, feature, n_features: int):
    """A stable order of (k,) feature ids that groups them by feature: radix sorts of 16-bit ids
    (NumPy's stable sort of wider integers is a merge sort, ten times slower)."""
    if n_features <= 1 << 16:
        return xp.argsort(feature.astype(xp.uint16), kind="stable")
    order = xp.argsort((feature & 0xFFFF).astype(xp.uint16), kind="stable")
    return order[xp.argsort((feature[order] >> 16).astype(xp.uint16), kind="stable")]


def direct_cuts(xp, parts: list, fixed: list, n_value_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``choose_cuts``' result without the passes: every present value tallied at once, then the
    value at each target rank (or every distinct value of a feature with at most
    ``n_value_bins``) found in the whole tally.

    The values are grouped by feature (a stable radix sort of feature ids) and their uint32 keys
    sorted within each feature (``backend.segments.sort_segments``), which yields the fine ids
    (feature << 32 | key) in order without sorting them as int64.

    parts: as ``compute_cuts``' (float32 dense or ``csr.CSR`` in ``xp``, one process). fixed:
    matching integer-valued float64 weights or None each. Returns host (cut_values,
    cut_offsets), the integers the passes give: both are the exact weighted quantiles."""
    n_features = _n_features(parts[0])
    features, keys, weights = [], [], []
    for part, w in zip(parts, fixed):
        f, k, wt = _present_values(xp, part, w)
        features.append(f)
        keys.append(k)
        weights.append(wt)
    feature = xp.concatenate(features) if features else xp.zeros(0, xp.int32)
    if len(feature) == 0:
        return cut_arrays(np.zeros(0, np.int64), n_features)
    if len(parts) == 1 and not isinstance(parts[0], CSR):
        # one dense part's values come feature by feature already (a stable sort and its
        # gathers cost 23 ms of 100,000 x 28 values' 120 on two cores)
        key, weight = keys[0], weights[0]
    else:
        order = _feature_order(xp, feature, n_features)
        feature, key = feature[order], xp.concatenate(keys)[order]
        weight = None if fixed[0] is None else xp.concatenate(weights)[order]
        del order
    del features, keys, weights
    ptr = xp.zeros(n_features + 1, dtype=xp.int64)
    xp.cumsum(table_counts(xp, feature, n_features), out=ptr[1:])
    key, weight = sort_segments(xp, ptr, key, weight)
    ids = feature.astype(xp.int64)
    ids <<= FINE_SHIFT
    ids |= key
    del feature, key
    fine = _host_summary(xp, [_tally(xp, ids, weight, ordered=True)], FINE_SHIFT, n_features)
    del ids, weight
    counts = np.diff(fine.bounds)
    chosen = _runs(fine.bounds, np.flatnonzero(counts <= n_value_bins), skip_first=True)
    targets = _Targets.of(fine.totals, np.flatnonzero(counts > n_value_bins), n_value_bins)
    if len(targets.feature):
        entry, below = _search_segments(fine, fine.bounds[targets.feature], targets.rank,
                                        lambda: fine.bounds[targets.feature + 1])
        chosen = _union(chosen, entry[below > 0])
    return cut_arrays(fine.ids[chosen], n_features)
