"""Mergeable, exact weighted quantile summaries of every feature, and the cut points chosen from them.

Why exact and not a lossy sketch: gbflow's promise is the same model from the same data however it
is split into partitions or workers, and a lossy summary depends on the merge order. Here every
summary is a table of integer weights that merges by adding the weights of equal ids, so the cuts
are the exact weighted quantiles of the float32 data, independent of row order and partitioning.

How, in three passes over the data (a radix select on the float32 bit patterns):

1. ``coarse_summary``: per feature, the total weight in each bucket given by the top 16 bits of
   the order-preserving uint32 key of each value. ``candidate_buckets`` then picks the buckets
   that hold a target quantile rank (or, for a feature with few occupied buckets, all of them, so
   low-cardinality features get one bin per distinct value).
2. ``middle_summary``: inside candidate buckets, the total weight per next 8 bits of the key.
   ``candidate_sub_buckets`` picks the sub-buckets that hold a target rank (or all of them).
   While it fits, ``MiddleTable`` gives the same summary through one dense table that every
   part adds into and processes sum in place (no gather and host merge).
3. ``fine_summary``: the exact distinct values, with their weights, inside candidate sub-buckets
   (at most 256 distinct floats each, so this summary stays small even on continuous data).
4. ``choose_cuts``: the exact value at each target rank becomes a cut.

Every summary is *sparse*: a ``Summary`` holds only the ids that carry weight, sorted, where an id
is ``feature << shift | top bits of the key`` (shift 16, 24 and 32 for the three passes, so a fine
id shifted right by 8 is its sub-bucket's id and by 16 its bucket's). Host memory is therefore
proportional to the occupied buckets, never to n_features * 65,536: 20,000-column sparse data
costs what its stored entries cost.

The selections do not test every entry of a summary (the middle one holds tens of millions of
sub-buckets on wide continuous data). They start from the target ranks, n_value_bins - 1 per
feature with more than n_value_bins entries, and find the entry holding each by a search in the
summary's running sum of weights (``_Targets``), then keep those entries and every entry of the
features with few: host work in proportion to the targets and one cumulative sum per summary,
vectorised over all features.

The passes read dense (n_rows, n_features) float32 matrices (NaN is missing) and ``csr.CSR``
matrices (absent entries and stored NaN are missing) in their own namespace ``xp`` (NumPy or
CuPy); only the summaries go to the host. A group of features with many values is tallied in a
dense per-group table (a bincount, compressed with flatnonzero before it leaves the device); a
group with few values per bucket (wide sparse data, small partitions) by sorting its ids. Both
give the same integers.

Weights are fixed-point integers (``fixed_point.fixed_point_scale`` with a 2**52 limit) whose totals
per feature stay below 2**53, so float64 bincounts (on NumPy and CuPy alike) add them exactly.
Sums over several features may pass 2**63; they are taken in uint64, whose wrap-around leaves
every difference of partial sums that lies inside one feature exact. Values of zero weight count
as absent (like rows repeated zero times). Missing values are not part of any summary; they get
their own bin.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import _dtypes
from .backend import to_host
from .csr import CSR

RADIX_BITS = 16
N_BUCKETS = 1 << RADIX_BITS
SUB_BITS = 8
N_SUB = 1 << SUB_BITS
# Bits below the feature id in the ids of the three summaries (the top bits of the uint32 key).
COARSE_SHIFT = RADIX_BITS
MIDDLE_SHIFT = RADIX_BITS + SUB_BITS
FINE_SHIFT = 32

# Values per block of rows in the summary passes: the temporaries (keys, bucket ids, masks) stay a
# few MB and are reused, instead of several arrays the size of the data being allocated, touched
# and returned to the operating system on every pass.
BLOCK_VALUES = 1 << 20


def ordered_keys(xp, X):
    """uint32 keys whose unsigned order is the float order of X (float32, any shape; -0.0 taken
    as +0.0). NaN entries get meaningless keys; callers mask them out."""
    bits = (X + _dtypes.FEATURE(0.0)).view(xp.uint32)  # -0.0 + 0.0 == +0.0
    # Negative floats: flip every bit; others: flip the sign bit. The arithmetic shift of the
    # sign gives all ones for negatives, zero otherwise.
    flip = (bits.view(xp.int32) >> 31).view(xp.uint32) | xp.uint32(0x80000000)
    return bits ^ flip


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


# ---------------------------------------------------------------------------------------------
# Sparse integer tables


@dataclasses.dataclass
class Summary:
    """Total weight per id, for the ids that carry weight only. Host arrays.

    ids: (m,) int64, sorted and unique: ``feature << shift | the key's top `shift` bits``
    (shift 16: coarse buckets, 24: sub-buckets, 32: the exact key). weight: (m,) int64, > 0.
    n_features: the matrix's width (features without values have no ids).
    """

    ids: np.ndarray
    weight: np.ndarray
    shift: int
    n_features: int
    # targets located in this summary, for the next selection (see ``_Targets.located``)
    _located: dict = dataclasses.field(default_factory=dict, init=False, repr=False,
                                       compare=False)

    @property
    def feature(self) -> np.ndarray:
        """(m,) int64: each entry's feature."""
        return self.ids >> self.shift

    @property
    def key(self) -> np.ndarray:
        """(m,) uint32: each entry's key bits below the feature id (the whole key for shift 32)."""
        return (self.ids & ((1 << self.shift) - 1)).astype(np.uint32)

    @functools.cached_property
    def bounds(self) -> np.ndarray:
        """(n_features + 1,) int64: feature f's entries are bounds[f] .. bounds[f + 1] - 1."""
        return _feature_bounds(self.ids, self.shift, self.n_features)

    @functools.cached_property
    def cumulative(self) -> np.ndarray:
        """(m + 1,) uint64: the running sum of the weights before each entry (0 first, the sum of
        all last). It may wrap past 2**64 over many features, but the difference of two of its
        values inside one feature is below 2**53 and exact (uint64 arithmetic is modular)."""
        cumulative = np.zeros(len(self.ids) + 1, dtype=np.uint64)
        # the same bits as uint64 (weights are positive): a cast inside cumsum would take a
        # buffered loop many times slower
        np.cumsum(np.asarray(self.weight, dtype=np.int64).view(np.uint64), out=cumulative[1:])
        return cumulative

    @functools.cached_property
    def totals(self) -> np.ndarray:
        """(n_features,) int64: each feature's total weight."""
        cumulative = self.cumulative
        return (cumulative[self.bounds[1:]] - cumulative[self.bounds[:-1]]).astype(np.int64)

    @functools.cached_property
    def ascending(self) -> bool:
        """Whether ``cumulative`` did not wrap (all the weight, over every feature, is well below
        2**64): it is then strictly ascending, and one ``np.searchsorted`` finds any rank."""
        return float(self.totals.sum(dtype=np.float64)) < ONE_SEARCH_LIMIT


def _feature_bounds(ids: np.ndarray, shift: int, n_features: int) -> np.ndarray:
    """Where each feature's run starts in sorted ``ids``; (n_features + 1,) int64."""
    starts = np.arange(n_features + 1, dtype=np.int64) << shift
    return np.searchsorted(ids, starts).astype(np.int64)


# Below this total weight (over all features) a summary's running sum cannot wrap, and ranks are
# found by one search in it; above, by a binary search per segment (tests lower it to check both).
ONE_SEARCH_LIMIT = 2.0**63


def _search_segments(summary: Summary, lo: np.ndarray, rank: np.ndarray, hi):
    """In each segment ``lo .. hi - 1`` of a summary's entries, the entry that holds ``rank``.

    lo: (q,) int64 starts of non-empty segments. rank: (q,) uint64, 1 <= rank <= the segment's
    weight. hi: a function giving the (q,) int64 ends, called only when needed. Returns (q,)
    int64 positions p with ``S(p) < rank <= S(p + 1)``, where S(p) = cumulative[p] -
    cumulative[lo] is the segment's weight before entry p, and (q,) uint64 S(p). Host arrays.

    Weights are positive, so while the running sum ``cumulative`` does not wrap it is strictly
    ascending and p + 1 is where cumulative[lo] + rank sorts into it: one search for all
    queries. Otherwise a binary search per query inside its segment, all queries a step at a
    time (q * log2(longest segment) work)."""
    cumulative = summary.cumulative
    base = cumulative[lo]
    if summary.ascending:
        position = np.searchsorted(cumulative, base + rank) - 1
        return position, cumulative[position] - base
    lo = lo.astype(np.int64, copy=True)
    hi = hi() - 1  # the answer lies in lo .. hi
    for _ in range(int(np.max(hi - lo, initial=0)).bit_length()):
        mid = (lo + hi) >> 1
        right = cumulative[mid + 1] - base < rank
        np.copyto(lo, mid + 1, where=right)
        np.copyto(hi, mid, where=~right)
    return lo, cumulative[lo] - base


def _runs(bounds: np.ndarray, features: np.ndarray, skip_first: bool = False) -> np.ndarray:
    """(k,) int64 sorted positions of all entries of ``features`` (sorted int64) in a summary
    with feature ``bounds``; without each feature's first entry if ``skip_first``. Host arrays;
    work in proportion to the entries returned."""
    starts = bounds[features] + (1 if skip_first else 0)
    lengths = np.maximum(bounds[features + 1] - starts, 0)
    shift = starts - (np.cumsum(lengths) - lengths)  # first position minus first output index
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(shift, lengths)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted unique union of two sorted int64 position arrays (duplicates allowed in each)."""
    both = np.sort(np.concatenate([a, b]), kind="stable")  # two sorted runs: a linear merge
    if len(both) == 0:
        return both
    return both[np.concatenate([[True], both[1:] != both[:-1]])]


def _tally(xp, ids, weights, ordered: bool = False):
    """Total weight per distinct id, in ``xp``: (sorted unique ids int64, totals int64 > 0).

    ids: (k,) int64 (already sorted if ``ordered``). weights: (k,) integer-valued float64 or
    int64, or None for unit weights. Totals are differences of a uint64 running sum (exact, see
    ``Summary.cumulative``)."""
    if len(ids) == 0:
        return ids.astype(xp.int64), xp.zeros(0, dtype=xp.int64)
    weighted = False
    if ordered:
        ordered = ids
    elif weights is None:
        ordered = xp.sort(ids)
    else:
        order = xp.argsort(ids)
        ordered = ids[order]
        weights = weights[order]
        del order
    last = xp.empty(len(ordered), dtype=bool)  # last entry of each run of equal ids
    last[:-1] = ordered[1:] != ordered[:-1]
    last[-1] = True
    ends = xp.flatnonzero(last)
    del last
    if weights is None:
        cumulative = ends + 1
    else:
        weighted = True
        cumulative = xp.cumsum(weights.astype(xp.uint64))[ends]
        weights = None  # drops the permuted copy (the caller may still hold its own)
    totals = xp.empty(len(ends), dtype=cumulative.dtype)
    totals[:1] = cumulative[:1]
    totals[1:] = cumulative[1:] - cumulative[:-1]
    totals = totals.astype(xp.int64)
    unique = ordered[ends]
    if weighted:  # values of zero weight count as absent
        carries = totals > 0
        unique, totals = unique[carries], totals[carries]
    return unique, totals


class _Accumulator:
    """Sorted tallies of one group of features, block by block, on the device.

    Pending block tallies are merged into the running one once they are as large as it (or as a
    block): each id is re-sorted a logarithmic number of times, and memory stays about twice
    the running tally plus a block."""

    def __init__(self, xp, block_values: int):
        self.xp, self.block_values = xp, block_values
        self.parts: list = []  # (ids, totals); parts[0] is the running tally once merged
        self.pending = 0

    def add(self, ids, weights, ordered: bool = False) -> None:
        """Tally (k,) int64 ids with (k,) weights (or None); ``ordered``: ids are sorted."""
        unique, totals = _tally(self.xp, ids, weights, ordered)
        if len(unique):
            self.parts.append((unique, totals))
            self.pending += len(unique)
        if len(self.parts) > 1 and self.pending >= max(self.block_values, len(self.parts[0][0])):
            self._merge()

    def _merge(self) -> None:
        xp = self.xp
        if len(self.parts) > 1:
            self.parts = [_tally(xp, xp.concatenate([p[0] for p in self.parts]),
                                 xp.concatenate([p[1] for p in self.parts]))]
        self.pending = 0

    def result(self):
        """(ids, totals): sorted unique int64 ids and their int64 totals, on the device."""
        self._merge()
        if not self.parts:
            return self.xp.zeros(0, dtype=self.xp.int64), self.xp.zeros(0, dtype=self.xp.int64)
        return self.parts[0]


def _host_summary(xp, pieces: list, shift: int, n_features: int) -> Summary:
    """One Summary (host) from device tallies of disjoint feature groups, in feature order."""
    pieces = [p for p in pieces if len(p[0])]
    if not pieces:
        return Summary(np.zeros(0, np.int64), np.zeros(0, np.int64), shift, n_features)
    ids = to_host(xp.concatenate([p[0] for p in pieces])).astype(np.int64, copy=False)
    weight = to_host(xp.concatenate([p[1] for p in pieces])).astype(np.int64, copy=False)
    return Summary(ids, weight, shift, n_features)


def merge(summaries: list) -> Summary:
    """Merge summaries of the same pass (exact: weights of equal ids add up; any order)."""
    summaries = list(summaries)
    first = summaries[0]
    if any(s.n_features != first.n_features or s.shift != first.shift for s in summaries):
        raise ValueError("cannot merge sketch summaries of different widths or passes: "
                         f"{sorted({(s.n_features, s.shift) for s in summaries})}")
    if len(summaries) == 1:
        return first
    ids, weight = _tally(np, np.concatenate([s.ids for s in summaries]),
                         np.concatenate([s.weight for s in summaries]))
    return Summary(ids, weight, first.shift, first.n_features)


# ---------------------------------------------------------------------------------------------
# Reading the data: groups of features, blocks of values


@dataclasses.dataclass
class _Block:
    """Some values of one group of features, in ``xp``.

    xp: the namespace. values: float32, (rows, features) for a dense matrix or (entries,) for a
    CSR. feature: integer feature ids (int64 (1, features) dense, a CSR's int32 column ids),
    broadcastable to values. weight: integer-valued float64 weights broadcastable to values, or
    None. Keys and the missing-value mask are computed when first asked for (the passes after
    the first often need no mask)."""

    xp: object
    values: object
    feature: object
    weight: object

    @functools.cached_property
    def keys(self):
        """uint32 ordered keys, values' shape (meaningless for NaN)."""
        return ordered_keys(self.xp, self.values)

    @functools.cached_property
    def present(self):
        """bool, values' shape: False for missing values (NaN)."""
        return ~self.xp.isnan(self.values)

    def weights(self, xp, selected):
        """(k,) float64 weights of the selected values, or None."""
        if self.weight is None:
            return None
        return xp.broadcast_to(self.weight, self.keys.shape)[selected]

    def all_fine_ids(self, xp):
        """int64, values' shape: feature << 32 | key (meaningless for NaN). Built in place: one
        array of the block's size, not three (shifted features, widened keys, their union)."""
        ids = self.keys.astype(xp.int64)
        high = self.feature.astype(xp.int64)  # (1, features) for a dense block, (entries,) CSR
        high <<= FINE_SHIFT
        ids |= high
        return ids

    def fine_ids(self, xp, ordered: bool = False):
        """(k,) int64 fine ids (feature << 32 | key) of the present values, and their weights;
        sorted if ``ordered`` (searching sorted ids in a large table touches memory in order,
        and a sorted selection of them is tallied without sorting again)."""
        ids = self.all_fine_ids(xp)[self.present]
        weights = self.weights(xp, self.present)
        if ordered:
            if weights is None:
                ids.sort()
            else:
                order = xp.argsort(ids)
                ids, weights = ids[order], weights[order]
        return ids, weights

    def local_buckets(self, xp, f0: int):
        """Keys' shape, intp: (feature - f0) * 65,536 + top 16 key bits (a dense table index)."""
        offset = self.feature.astype(xp.intp)  # a CSR's int32 column ids would overflow
        offset -= f0
        offset *= N_BUCKETS
        index = (self.keys >> RADIX_BITS).astype(xp.intp)
        index += offset
        return index


@dataclasses.dataclass
class _Group:
    """Features f0 .. f1 - 1 of one matrix: n_values values (missing ones included), read
    block by block by ``blocks()``."""

    f0: int
    f1: int
    n_values: int
    blocks: object
    block_values: int  # values per block (a CSR's blocks are smaller than dense ones)

    def id_range(self, ids: np.ndarray, shift: int) -> tuple[int, int]:
        """The slice of sorted host ``ids`` (with ``shift``) that belongs to this group."""
        lo, hi = np.searchsorted(ids, [self.f0 << shift, self.f1 << shift])
        return int(lo), int(hi)

    def dense_table(self, table_size: int) -> bool:
        """Whether to tally into a dense table of ``table_size`` (plus a 65,536-per-feature
        lookup table): only while both stay a few blocks large, and the group has enough values
        to pay for clearing and scanning them; else its ids are sorted instead."""
        lookup = (self.f1 - self.f0) * N_BUCKETS
        return max(lookup, table_size) <= 4 * self.block_values and \
            16 * self.n_values >= lookup


def _nan_may_match(buckets: np.ndarray) -> bool:
    """Whether a NaN's key could fall in one of these coarse buckets (sorted coarse ids).

    NaN keys lie above +inf's and below -inf's, in the 128 buckets at either end of the key
    range, which no finite value shares (and ``ordered_keys``' addition quiets NaN, which moves
    them further out than an infinity's bucket). Unless such a bucket is a candidate, the slot
    lookup alone rejects NaN and the passes skip testing for it."""
    low = buckets & (N_BUCKETS - 1)
    return bool(np.any((low >= N_BUCKETS - 128) | (low < 128)))


def _entry_rows(xp, matrix: CSR):
    """(nnz,) int32 (int64 past 2**31 rows): the row of each entry, by a scan of row starts
    (linear; CuPy's repeat takes no device array of counts before v14)."""
    starts = xp.bincount(matrix.indptr[1:-1], minlength=matrix.nnz + 1)[: matrix.nnz]
    return xp.cumsum(starts, dtype=xp.int32 if matrix.n_rows < 2**31 else xp.int64)


# Stored entries per block of a CSR (at most): its ids are tallied by sorting, which keeps some
# ten entry-sized temporaries (ids, sort order, positions, weights, masks) alive at once against
# two or three per value in a dense table, so its blocks are smaller than dense ones: some 60
# bytes an entry, about 130 MB for a block, and still millions of entries per device call.
CSR_BLOCK_ENTRIES = 1 << 21


def _groups(xp, X, w_fixed, block_values: int):
    """The feature groups of X (dense (n_rows, n_features) float32, or a CSR), in feature order.

    Dense: groups of features whose 65,536-bucket tables stay about two blocks large, read in
    blocks of rows of about ``block_values`` values. CSR: one group of all columns (its entries
    are not ordered by column), read in blocks of whole rows of about ``block_values`` entries
    (at most ``CSR_BLOCK_ENTRIES``), in time proportional to the stored entries."""
    if isinstance(X, CSR):
        n_rows, nnz = X.n_rows, X.nnz
        if nnz == 0 or n_rows == 0 or X.n_cols == 0:
            return
        block_values = min(block_values, CSR_BLOCK_ENTRIES)
        # Rows that hold every block_values-th entry start the blocks (a device search; only
        # the few block boundaries come to the host).
        marks = xp.arange(block_values, nnz, block_values, dtype=xp.int64)
        rows = to_host(xp.searchsorted(X.indptr, marks, side="right") - 1)
        bounds = np.unique(np.concatenate([[0], rows, [n_rows]])).tolist()

        def csr_blocks():
            for r0, r1 in zip(bounds[:-1], bounds[1:]):
                part = X.rows(r0, r1)
                w = None if w_fixed is None else w_fixed[r0:r1][_entry_rows(xp, part)]
                # int32 column ids (widened only where ids are built): 4 bytes an entry, not 12
                yield _Block(xp, part.data, part.indices, w)

        yield _Group(0, int(X.n_cols), nnz, csr_blocks, block_values)
        return
    n_rows, n_features = X.shape
    group = max(1, min(n_features, 2 * block_values // N_BUCKETS))
    step = max(1, block_values // group)
    for f0 in range(0, n_features, group):
        f1 = min(n_features, f0 + group)

        def dense_blocks(f0=f0, f1=f1):
            feature = xp.arange(f0, f1, dtype=xp.int64)[None, :]
            for start in range(0, n_rows, step):
                block = X[start : start + step, f0:f1]
                w = None if w_fixed is None else w_fixed[start : start + step, None]
                yield _Block(xp, block, feature, w)

        yield _Group(f0, f1, n_rows * (f1 - f0), dense_blocks, block_values)


def _n_features(X) -> int:
    return int(X.n_cols) if isinstance(X, CSR) else int(X.shape[1])


def _bincount(xp, ids, weights, size: int):
    """(size,) int64 total weight per id (weights: integer-valued float64 or None)."""
    if weights is None:
        return xp.bincount(ids, minlength=size).astype(xp.int64, copy=False)
    return xp.rint(xp.bincount(ids, weights=weights, minlength=size)).astype(xp.int64)


def _find(xp, sorted_ids, ids):
    """Where each of ``ids`` is in non-empty ``sorted_ids`` (int64, in ``xp``): (position,
    found), ids' shape; position is a valid index but meaningless where not found."""
    position = xp.searchsorted(sorted_ids, ids)
    xp.minimum(position, len(sorted_ids) - 1, out=position)
    return position, sorted_ids[position] == ids


def _slot_table(xp, local_buckets, group: _Group):
    """((f1 - f0) * 65,536,) int32 dense lookup: each candidate bucket of the group -> its
    position in ``local_buckets`` (the group's sorted coarse ids), -1 elsewhere."""
    table = xp.full((group.f1 - group.f0) * N_BUCKETS, -1, dtype=xp.int32)
    table[local_buckets - (group.f0 << COARSE_SHIFT)] = xp.arange(len(local_buckets),
                                                                   dtype=xp.int32)
    return table


def _sub_bucket(xp, keys):
    return ((keys >> (RADIX_BITS - SUB_BITS)) & xp.uint32(N_SUB - 1)).astype(xp.intp)


# ---------------------------------------------------------------------------------------------
# The three passes (device work, host summaries)


def coarse_summary(xp, X, w_fixed, block_values: int = BLOCK_VALUES) -> Summary:
    """Pass 1: total weight per feature and top 16 key bits, as a host ``Summary`` (shift 16).

    X: (n_rows, n_features) float32 (NaN missing) or a ``csr.CSR``, in ``xp``. w_fixed:
    (n_rows,) integer-valued float64 or None. block_values: values per block (the GPU takes
    far larger blocks than the CPU)."""
    pieces = []
    for group in _groups(xp, X, w_fixed, block_values):
        size = (group.f1 - group.f0) * N_BUCKETS
        if group.dense_table(size):
            table = xp.zeros(size, dtype=xp.int64)
            for b in group.blocks():
                table += _bincount(xp, b.local_buckets(xp, group.f0)[b.present],
                                   b.weights(xp, b.present), size)
            occupied = xp.flatnonzero(table)
            pieces.append((occupied + (group.f0 << COARSE_SHIFT), table[occupied]))
        else:
            acc = _Accumulator(xp, group.block_values)
            for b in group.blocks():
                ids, w = b.fine_ids(xp)
                ids >>= FINE_SHIFT - COARSE_SHIFT  # the coarse ids, in place
                acc.add(ids, w)
                del b, ids, w  # freed before the next block's temporaries are made
            pieces.append(acc.result())
    return _host_summary(xp, pieces, COARSE_SHIFT, _n_features(X))


@dataclasses.dataclass
class _Targets:
    """Target ranks of some features, and where the summaries place them. Host arrays, (q,) each.

    feature: int64. rank: uint64, ``total * i // n_value_bins + 1`` for i = 1 .. n_value_bins - 1
    (total: the feature's weight), ascending within a feature. entry: int64 position, in the
    summary last searched, of the entry that holds the rank. below: uint64, the feature's weight
    before that entry. Targets are sorted by feature and rank, so ``entry`` is non-decreasing.
    """

    feature: np.ndarray
    rank: np.ndarray
    entry: np.ndarray | None = None
    below: np.ndarray | None = None

    @classmethod
    def of(cls, totals: np.ndarray, features: np.ndarray, n_value_bins: int) -> "_Targets":
        """The targets of ``features`` (sorted int64, each with totals[f] > 0)."""
        n = n_value_bins
        total = totals[features]
        quotient, remainder = np.divmod(total, n)
        i = np.arange(1, n, dtype=np.int64)  # none for a single value bin
        # total * i // n + 1, exactly: total * i itself may pass int64, remainder * i does not
        rank = quotient[:, None] * i + remainder[:, None] * i // n + 1
        return cls(feature=np.repeat(features, len(i)), rank=rank.ravel().astype(np.uint64))

    def in_coarse(self, coarse: Summary) -> "_Targets":
        """The coarse bucket of each target: searched among its feature's buckets."""
        bounds = coarse.bounds
        entry, below = _search_segments(coarse, bounds[self.feature], self.rank,
                                        lambda: bounds[self.feature + 1])
        return dataclasses.replace(self, entry=entry, below=below)

    def in_middle(self, coarse: Summary, middle: Summary) -> "_Targets":
        """From coarse buckets (``in_coarse``) to sub-buckets: searched among the sub-buckets of
        the target's bucket, all of which are in ``middle`` (the bucket holds a target, so it is
        a candidate)."""
        bucket = coarse.ids[self.entry] << SUB_BITS
        entry, below = _search_segments(middle, np.searchsorted(middle.ids, bucket),
                                        self.rank - self.below,
                                        lambda: np.searchsorted(middle.ids, bucket + N_SUB))
        return dataclasses.replace(self, entry=entry, below=self.below + below)

    def in_fine(self, slots: Slots, middle: Summary, fine: Summary) -> "_Targets":
        """From sub-buckets (``in_middle``) to values: searched among the values of the target's
        sub-bucket (a candidate, so all its values are in ``fine``). A sub-bucket whose slot
        mask keeps fewer than 8 bits spans 2**(8 - kept bits) consecutive full-width ones."""
        sub = middle.ids[self.entry]
        first = sub << (FINE_SHIFT - MIDDLE_SHIFT)  # the lowest fine id of the sub-bucket

        def ends():
            mask = slots.mask[np.searchsorted(slots.bucket, sub >> SUB_BITS)]
            width = ((~mask & (N_SUB - 1)) + 1) << (FINE_SHIFT - MIDDLE_SHIFT)
            return np.searchsorted(fine.ids, first + width)

        entry, below = _search_segments(fine, np.searchsorted(fine.ids, first),
                                        self.rank - self.below, ends)
        return dataclasses.replace(self, entry=entry, below=self.below + below)

    @staticmethod
    def located(features: np.ndarray, n_value_bins: int, coarse: Summary,
                middle: Summary | None = None) -> "_Targets":
        """The targets of ``features`` located in ``coarse`` (and then ``middle``, if given).

        The selections of the three passes locate the same targets (on continuous data, of the
        same features): each summary remembers its latest, and a later selection starts from
        it when the features and summaries are the same."""
        last = middle if middle is not None else coarse
        key = (n_value_bins, features.tobytes())
        kept = last._located.get(key)
        if kept is not None and kept[0] is coarse:
            return kept[1]
        if middle is None:
            targets = _Targets.of(coarse.totals, features, n_value_bins).in_coarse(coarse)
        else:
            targets = _Targets.located(features, n_value_bins, coarse).in_middle(coarse, middle)
        last._located.clear()  # one set of targets per summary is enough
        last._located[key] = (coarse, targets)
        return targets


def _selection(summary: Summary, everything: np.ndarray, entries: np.ndarray) -> np.ndarray:
    """Sorted unique positions in ``summary``: every entry of the features flagged in
    ``everything`` ((n_features,) bool) and ``entries`` (sorted int64 positions)."""
    return _union(_runs(summary.bounds, np.flatnonzero(everything)), entries)


def candidate_buckets(coarse: Summary, n_value_bins: int) -> np.ndarray:
    """Pass 1 selection: sorted int64 coarse ids (feature << 16 | bucket) to look into.

    Those holding a target rank, or, for a feature with at most ``n_value_bins`` occupied
    buckets (maybe few distinct values), all of them. coarse: the merged pass-1 summary. Host
    work in proportion to the targets and the buckets kept, not to the occupied buckets."""
    counts = np.diff(coarse.bounds)
    targets = _Targets.located(np.flatnonzero(counts > n_value_bins), n_value_bins, coarse)
    return coarse.ids[_selection(coarse, counts <= n_value_bins, targets.entry)]


@dataclasses.dataclass
class Slots:
    """The candidate buckets, numbered, and how finely pass 2 splits each. Host arrays.

    bucket: (n_slots,) int64 sorted coarse ids (feature << 16 | top 16 key bits) of slot s.
    mask: (n_slots,) int64, which of the next 8 key bits tell the bucket's sub-buckets apart:
    0xFF gives 256 sub-buckets, 0xF0 16, 0 one (all the bucket's values go to pass 3). A
    sub-bucket's id is ``bucket << 8 | (key >> 8 & 0xFF & mask)``.
    """

    bucket: np.ndarray
    mask: np.ndarray

    @functools.cached_property
    def dropped_bits(self) -> np.ndarray:
        """(n_slots,) int64: how many low bits of the 8 the mask drops (0 for 0xFF, 8 for 0)."""
        return np.log2((~self.mask & (N_SUB - 1)) + 1).astype(np.int64)

    @functools.cached_property
    def table_offsets(self) -> np.ndarray:
        """(n_slots + 1,) int64: where each slot's sub-buckets start in a ``MiddleTable``."""
        return np.concatenate([[0], np.cumsum(N_SUB >> self.dropped_bits)]).astype(np.int64)

    @property
    def table_size(self) -> int:
        """Sub-buckets over all slots: the entries of a ``MiddleTable``."""
        return int(self.table_offsets[-1])

    def sub_ids(self, xp, fine_ids, position):
        """The sub-bucket id (int64) of each fine id (feature << 32 | key) whose bucket is slot
        ``position`` (positions of absent buckets give ids of no candidate sub-bucket)."""
        keep = xp.asarray(self.mask)[position] | -N_SUB  # the bucket's bits and the mask's
        return (fine_ids >> (FINE_SHIFT - MIDDLE_SHIFT)) & keep


# Pass 2 splits a candidate bucket into sub-buckets of about this many values (at most 256 of
# them). Fewer sub-buckets mean fewer host ids in pass 2 but more values kept (and sorted) in pass
# 3; with about 8, pass 3 keeps about 8 values per target rank, and a bucket of fewer values than
# that skips pass 2 (one sub-bucket).
VALUES_PER_SUB_BUCKET = 8


def bucket_slots(candidates: np.ndarray, coarse: Summary | None = None,
                 n_rows: int | None = None) -> Slots:
    """The slots of the candidate buckets (sorted int64 coarse ids).

    coarse (the merged pass-1 summary): split each bucket into about sqrt(its values)
    sub-buckets, which about minimises pass 2's ids (one per sub-bucket) plus pass 3's (the
    values of the sub-buckets that hold a target), instead of 256 (coarse None). n_rows: the
    global row count, to estimate a bucket's values from its weight share (None: weights are
    counts). Only the work depends on this choice, never the cuts."""
    bucket = np.asarray(candidates, dtype=np.int64)
    if coarse is None:
        return Slots(bucket=bucket, mask=np.full(len(bucket), N_SUB - 1, dtype=np.int64))
    values = coarse.weight[np.searchsorted(coarse.ids, bucket)].astype(np.float64)
    if n_rows is not None:
        values *= n_rows / coarse.totals[bucket >> RADIX_BITS]
    bits = np.clip(np.ceil(np.log2(np.maximum(values / VALUES_PER_SUB_BUCKET, 1.0))), 0,
                   SUB_BITS).astype(np.int64)
    return Slots(bucket=bucket, mask=(N_SUB - 1) & ~((1 << (SUB_BITS - bits)) - 1))


def middle_summary(xp, X, w_fixed, slots: Slots, block_values: int = BLOCK_VALUES) -> Summary:
    """Pass 2: total weight per sub-bucket (top 24 key bits) inside candidate buckets, as a host
    ``Summary`` (shift 24). slots: ``bucket_slots`` of the merged pass-1 selection."""
    return _host_summary(xp, list(_middle_tallies(xp, X, w_fixed, slots, block_values)),
                         MIDDLE_SHIFT, _n_features(X))


def _middle_tallies(xp, X, w_fixed, slots: Slots, block_values: int):
    """Pass 2's device tallies, one per feature group of X that holds candidate buckets, in
    feature order: (sorted unique int64 middle ids, int64 totals > 0)."""
    buckets = slots.bucket
    device_buckets, device_masks = xp.asarray(buckets), xp.asarray(slots.mask)
    for group in _groups(xp, X, w_fixed, block_values):
        lo, hi = group.id_range(buckets, COARSE_SHIFT)
        if lo == hi:
            continue
        local, masks = device_buckets[lo:hi], device_masks[lo:hi]
        size = (hi - lo) * N_SUB
        if group.dense_table(size):
            slot_of = _slot_table(xp, local, group)
            may_be_nan = _nan_may_match(buckets[lo:hi])
            table = xp.zeros(size, dtype=xp.int64)
            for b in group.blocks():
                slot = slot_of[b.local_buckets(xp, group.f0)]
                selected = b.present & (slot >= 0) if may_be_nan else slot >= 0
                ids = slot.astype(xp.intp) * N_SUB + _sub_bucket(xp, b.keys)
                table += _bincount(xp, ids[selected], b.weights(xp, selected), size)
            # Counted at full resolution (no per-value mask); the coarser sub-buckets of some
            # buckets are unions of consecutive ones: merged here, on the occupied ids only.
            occupied = xp.flatnonzero(table)
            slot = occupied // N_SUB
            ids = (local[slot] << SUB_BITS) | (occupied % N_SUB & masks[slot])
            yield _tally(xp, ids, table[occupied], ordered=True)
        else:
            acc = _Accumulator(xp, group.block_values)
            for b in group.blocks():
                ids, w = b.fine_ids(xp, ordered=True)
                del b
                ids >>= FINE_SHIFT - MIDDLE_SHIFT  # full-resolution sub-bucket ids, in place
                position, inside = _find(xp, local, ids >> SUB_BITS)
                ids, position = ids[inside], position[inside]
                ids &= masks[position] | -N_SUB  # as ``Slots.sub_ids``; still sorted
                acc.add(ids, None if w is None else w[inside], ordered=True)
                del ids, w, position, inside
            yield acc.result()


# Pass 2's weights of all parts and processes go in one dense table while it has at most this many
# entries (128 MiB); beyond it (very wide data), each process's sparse summary is gathered instead.
MIDDLE_TABLE_ENTRIES = 1 << 24


class MiddleTable:
    """Pass 2's weights over every sub-bucket the slots can hold, in id order: one dense int64
    array in ``xp`` that parts add into and processes sum in place, one reduction of a shape every
    process knows, where sparse summaries would be gathered, sent to every process and merged on
    the host (on two GPUs, 0.25 s of 0.6 for 10M x 28 per GPU). The result is the merged
    ``Summary`` the sparse path gives, integer for integer.

    counts: (``slots.table_size``,) int64; slot s's sub-buckets are ``counts[offsets[s]:
    offsets[s + 1]]``, one per value of the slot's mask bits, in key order.
    """

    def __init__(self, xp, slots: Slots, n_features: int):
        self.xp, self.n_features = xp, n_features
        self.counts = xp.zeros(slots.table_size, dtype=xp.int64)
        self._buckets = xp.asarray(slots.bucket)
        self._offsets = xp.asarray(slots.table_offsets[:-1])
        self._shifts = xp.asarray(slots.dropped_bits)
        self._slots = slots

    @staticmethod
    def fits(slots: Slots) -> bool:
        """Whether the table of these slots is small enough (the same answer on every process:
        slots come from the merged pass-1 summary)."""
        return slots.table_size <= MIDDLE_TABLE_ENTRIES

    def add(self, X, w_fixed, block_values: int = BLOCK_VALUES) -> None:
        """Add pass 2's weights of one part (a dense float32 matrix or a CSR in ``xp``, with its
        integer-valued float64 weights or None) to ``counts``."""
        for ids, totals in _middle_tallies(self.xp, X, w_fixed, self._slots, block_values):
            slot = self.xp.searchsorted(self._buckets, ids >> SUB_BITS)
            # one tally's ids are unique, so are their positions: a plain indexed add
            self.counts[self._offsets[slot] + ((ids & (N_SUB - 1)) >> self._shifts[slot])] \
                += totals

    def summary(self) -> Summary:
        """The occupied sub-buckets of ``counts`` as a host ``Summary`` (shift 24)."""
        xp = self.xp
        occupied = xp.flatnonzero(self.counts)
        slot = xp.searchsorted(self._offsets, occupied, side="right") - 1
        ids = (self._buckets[slot] << SUB_BITS) | \
            ((occupied - self._offsets[slot]) << self._shifts[slot])
        return _host_summary(xp, [(ids, self.counts[occupied])], MIDDLE_SHIFT, self.n_features)


def candidate_sub_buckets(coarse: Summary, slots: Slots, middle: Summary,
                          n_value_bins: int) -> np.ndarray:
    """Pass 2 selection: sorted int64 middle ids (feature << 24 | top 24 key bits) whose exact
    values are needed.

    Those holding a target rank, or, for a feature with at most ``n_value_bins`` occupied
    sub-buckets (in its candidate buckets), all of them. Merged summaries; host arrays, work in
    proportion to the targets and the sub-buckets kept."""
    counts = np.diff(middle.bounds)
    targets = _Targets.located(np.flatnonzero(counts > n_value_bins), n_value_bins, coarse,
                               middle)
    return middle.ids[_selection(middle, counts <= n_value_bins, targets.entry)]


def fine_summary(xp, X, w_fixed, slots: Slots, sub_candidates: np.ndarray,
                 block_values: int = BLOCK_VALUES) -> Summary:
    """Pass 3: the distinct values of X in candidate sub-buckets with their total weights, as a
    host ``Summary`` (shift 32: ids are feature << 32 | the value's ordered key)."""
    buckets = slots.bucket
    subs = np.asarray(sub_candidates, dtype=np.int64)
    device_buckets, device_subs = xp.asarray(buckets), xp.asarray(subs)
    device_masks = xp.asarray(slots.mask)
    pieces = []
    for group in _groups(xp, X, w_fixed, block_values):
        s_lo, s_hi = group.id_range(subs, MIDDLE_SHIFT)
        if s_lo == s_hi:
            continue
        wanted_subs = device_subs[s_lo:s_hi]
        lo, hi = group.id_range(buckets, COARSE_SHIFT)
        local, masks = device_buckets[lo:hi], device_masks[lo:hi]
        size = (hi - lo) * N_SUB
        acc = _Accumulator(xp, group.block_values)
        if group.dense_table(size):
            slot_of = _slot_table(xp, local, group)
            may_be_nan = _nan_may_match(buckets[lo:hi])
            wanted = xp.zeros(size, dtype=bool)
            wanted[xp.searchsorted(local, wanted_subs >> SUB_BITS) * N_SUB
                   + (wanted_subs & (N_SUB - 1))] = True
            # at full resolution: each of the 256 sub-buckets of a slot takes the mark of the
            # (coarser) sub-bucket it belongs to
            index = xp.arange(size, dtype=xp.int64)
            wanted = wanted[index - (index % N_SUB) + (index % N_SUB & masks[index // N_SUB])]
            for b in group.blocks():
                slot = slot_of[b.local_buckets(xp, group.f0)].astype(xp.intp)
                in_bucket = b.present & (slot >= 0) if may_be_nan else slot >= 0
                index = xp.where(in_bucket, slot * N_SUB + _sub_bucket(xp, b.keys), 0)
                selected = in_bucket & wanted[index]
                ids = b.all_fine_ids(xp)[selected]
                acc.add(ids, b.weights(xp, selected))
        else:
            local_slots = Slots(bucket=local, mask=masks)
            for b in group.blocks():
                ids, w = b.fine_ids(xp, ordered=True)
                del b
                # a value outside the candidate buckets gets the sub id of no candidate
                position, _ = _find(xp, local, ids >> (FINE_SHIFT - COARSE_SHIFT))
                _, inside = _find(xp, wanted_subs, local_slots.sub_ids(xp, ids, position))
                del position
                acc.add(ids[inside], None if w is None else w[inside], ordered=True)
                del ids, w, inside
        pieces.append(acc.result())
    return _host_summary(xp, pieces, FINE_SHIFT, _n_features(X))


def choose_cuts(coarse: Summary, candidates: np.ndarray, slots: Slots, middle: Summary,
                sub_candidates: np.ndarray, fine: Summary,
                n_value_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut points per feature from the merged summaries of the three passes.

    A feature whose distinct values number at most ``n_value_bins`` gets one bin per value;
    otherwise the exact value at each target rank W*i/n_value_bins starts a new bin. Returns
    cut_values (float32, all features concatenated, each ascending and unique) and
    cut_offsets ((n_features + 1,) int64). Host arrays; no loop over features.
    """
    n_features = coarse.n_features
    # Features whose every occupied bucket and sub-bucket was looked into: the fine summary
    # holds all their distinct values.
    everything = (np.diff(_feature_bounds(candidates, COARSE_SHIFT, n_features))
                  == np.diff(coarse.bounds)) & \
        (np.diff(_feature_bounds(sub_candidates, MIDDLE_SHIFT, n_features))
         == np.diff(middle.bounds))
    few = everything & (np.diff(fine.bounds) <= n_value_bins)
    # every distinct value of a few-valued feature, minus its lowest
    chosen = _runs(fine.bounds, np.flatnonzero(few), skip_first=True)
    # the value holding each target rank of the others, unless it is the minimum (no cut there)
    targets = _Targets.located(np.flatnonzero(~few & (coarse.totals > 0)), n_value_bins,
                               coarse, middle).in_fine(slots, middle, fine)
    chosen = _union(chosen, targets.entry[targets.below > 0])
    ids = fine.ids[chosen]
    values = keys_to_values((ids & 0xFFFFFFFF).astype(np.uint32)).astype(_dtypes.CUT)
    offsets = np.searchsorted(ids >> FINE_SHIFT, np.arange(n_features + 1)).astype(np.int64)
    return values, offsets
