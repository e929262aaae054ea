"""Sparse integer summaries (Summary, merge): sorted tallies, their accumulator, rank searches."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..backend import to_host


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
    # targets located in this summary, for the next selection (``selection._Targets.located``)
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
    # (few temporaries: each is as long as the ids, and a fresh allocation's pages fault in
    # again; 2.8M unweighted ids on two cores: 15-130 ms with six of them, 8-60 with three)
    last = xp.empty(len(ordered), dtype=bool)  # last entry of each run of equal ids
    xp.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    last[-1] = True
    ends = xp.flatnonzero(last)
    del last
    if weights is None:  # a run's count: the distance between the ends of consecutive runs
        totals = xp.empty(len(ends), dtype=xp.int64)
        totals[:1] = ends[:1] + 1
        xp.subtract(ends[1:], ends[:-1], out=totals[1:])
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

