"""Target ranks, candidate buckets and sub-buckets, their slots, and the cuts (choose_cuts)."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import _dtypes
from .keys import (
    COARSE_SHIFT,
    FINE_SHIFT,
    MIDDLE_SHIFT,
    N_SUB,
    RADIX_BITS,
    SUB_BITS,
    keys_to_values,
)
from .summary import Summary, _feature_bounds, _runs, _search_segments, _union


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
    return cut_arrays(fine.ids[chosen], n_features)


def cut_arrays(ids: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(cut_values float32, cut_offsets (n_features + 1,) int64) of the chosen fine ids (sorted
    int64, feature << 32 | the value's key)."""
    values = keys_to_values((ids & 0xFFFFFFFF).astype(np.uint32)).astype(_dtypes.CUT)
    offsets = np.searchsorted(ids >> FINE_SHIFT, np.arange(n_features + 1)).astype(np.int64)
    return values, offsets

