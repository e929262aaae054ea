"""Mergeable, exact weighted quantile summaries of every feature, and the cut points chosen from them.

Why exact and not a lossy sketch: gbflow's promise is the same model from the same data however it
is split into partitions or workers, and a lossy summary depends on the merge order. Here every
summary is an integer table that merges by addition (or, for the last, small one, by
concatenation), so the cuts are the exact weighted quantiles of the float32 data, independent of
row order and partitioning.

How, in three passes over the data (a radix select on the float32 bit patterns, 16 + 8 bits and
then the exact values):

1. ``coarse_summary``: per feature, the total weight in each of 65,536 buckets given by the top 16
   bits of the order-preserving uint32 key of each value.
2. ``candidate_buckets``: the buckets that hold a target quantile rank (or, for a feature with few
   occupied buckets, all of them, so low-cardinality features get one bin per distinct value).
3. ``middle_summary``: inside the candidate buckets only, the total weight in each of 256
   sub-buckets given by the next 8 bits of the key (``candidate_slots`` numbers the candidate
   buckets, so the table has one row of 256 per candidate bucket).
4. ``candidate_subbuckets``: the sub-buckets that hold a target rank (all occupied ones for a
   feature with few).
5. ``fine_summary``: the exact distinct values, with their weights, inside candidate sub-buckets.
6. ``choose_cuts``: the exact value at each target rank becomes a cut.

Why the middle pass: with 255 target ranks and 16-bit buckets, the candidate buckets of a
continuous feature hold a large share of its values (about 23% on Gaussian data), and the fine
summary of them, sorted and merged, cost about 4x the data's memory and had to travel between Dask
workers. The sub-buckets hold about 1/256 of that; the fine summary becomes a few thousand entries
per feature, whatever the data size.

Weights are fixed-point integers (``gradients.fixed_point_scale`` with a 2**52 limit) whose
totals stay below 2**53, so float64
bincounts (on NumPy and CuPy alike) add them exactly. Missing values (NaN) are not part of any
summary; they get their own bin.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import _dtypes

RADIX_BITS = 16
N_BUCKETS = 1 << RADIX_BITS
SUB_BITS = 8  # the middle pass's bits, below the top RADIX_BITS
N_SUB = 1 << SUB_BITS


def ordered_keys(xp, X):
    """uint32 keys whose unsigned order is the float order of X (float32; -0.0 taken as +0.0).

    X: (n_rows, n_features) float32. NaN entries get meaningless keys; callers mask them out.
    """
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


def _flat_bucket_ids(xp, X):
    keys = ordered_keys(xp, X)
    offsets = xp.arange(X.shape[1], dtype=xp.intp) * N_BUCKETS
    return keys, (keys >> RADIX_BITS).astype(xp.intp) + offsets[None, :]


# Values per block of rows in the summary passes: the temporaries (keys, bucket ids, masks) stay a
# few MB and are reused, instead of several arrays the size of the data being allocated, touched
# and returned to the operating system on every pass.
BLOCK_VALUES = 1 << 20


def _row_blocks(X, w_fixed):
    step = max(1, BLOCK_VALUES // max(1, X.shape[1]))
    for start in range(0, X.shape[0], step):
        yield X[start : start + step], None if w_fixed is None else w_fixed[start : start + step]


def coarse_summary(xp, X, w_fixed):
    """Pass 1: (n_features, 65536) int64 total weight per feature and key bucket.

    X: (n_rows, n_features) float32. w_fixed: (n_rows,) integer-valued float64 or None.
    """
    n_features = X.shape[1]
    counts = xp.zeros(n_features * N_BUCKETS, dtype=np.int64)
    for block, w in _row_blocks(X, w_fixed):
        _, flat = _flat_bucket_ids(xp, block)
        present = ~xp.isnan(block)
        if w is None:
            counts += xp.bincount(flat[present], minlength=n_features * N_BUCKETS)
        else:
            weights = xp.broadcast_to(w[:, None], block.shape)[present]
            counts += xp.rint(xp.bincount(flat[present], weights=weights,
                                          minlength=n_features * N_BUCKETS)).astype(np.int64)
    return counts.reshape(n_features, N_BUCKETS)


def _target_ranks(total: int, n_value_bins: int) -> np.ndarray:
    # Python integers: total * i may exceed int64 for large fixed-point totals.
    return np.array([total * i // n_value_bins + 1 for i in range(1, n_value_bins)], dtype=np.int64)


def candidate_buckets(coarse: np.ndarray, n_value_bins: int) -> np.ndarray:
    """Pass 2 selection: (n_features, 65536) bool, the buckets whose exact values are needed.

    coarse: merged pass-1 summary (host array). n_value_bins: most value bins a feature may get.
    """
    candidates = np.zeros(coarse.shape, dtype=bool)
    for f in range(coarse.shape[0]):
        occupied = coarse[f] > 0
        if occupied.sum() <= n_value_bins:
            candidates[f] = occupied  # maybe few distinct values: look at all of them
        total = int(coarse[f].sum())
        if total > 0 and n_value_bins > 1:
            cumulative = np.cumsum(coarse[f])
            candidates[f, np.searchsorted(cumulative, _target_ranks(total, n_value_bins))] = True
    return candidates


def candidate_slots(candidates: np.ndarray) -> tuple[np.ndarray, int]:
    """Number the candidate buckets: ((n_features * 65536,) int64 slot of each flat (feature,
    bucket), -1 for the others; the number of slots). Slots follow feature, then bucket order."""
    flat = candidates.reshape(-1)
    slots = np.full(flat.shape, -1, dtype=np.int64)
    slots[flat] = np.arange(int(flat.sum()), dtype=np.int64)
    return slots, int(flat.sum())


def _sub_bucket(xp, keys):
    return ((keys >> np.uint32(RADIX_BITS - SUB_BITS)) & np.uint32(N_SUB - 1)).astype(xp.intp)


def middle_summary(xp, X, w_fixed, slots, n_slots: int):
    """Pass 2: (n_slots, 256) int64 total weight per candidate bucket and next-8-bit sub-bucket.

    X, w_fixed as ``coarse_summary``; slots, n_slots from ``candidate_slots``.
    """
    slots = xp.asarray(slots)
    counts = xp.zeros(n_slots * N_SUB, dtype=np.int64)
    for block, w in _row_blocks(X, w_fixed):
        keys, flat = _flat_bucket_ids(xp, block)
        slot = slots[flat]
        selected = ~xp.isnan(block) & (slot >= 0)
        index = slot[selected] * N_SUB + _sub_bucket(xp, keys[selected])
        if w is None:
            counts += xp.bincount(index, minlength=n_slots * N_SUB)
        else:
            weights = xp.broadcast_to(w[:, None], block.shape)[selected]
            counts += xp.rint(xp.bincount(index, weights=weights,
                                          minlength=n_slots * N_SUB)).astype(np.int64)
    return counts.reshape(n_slots, N_SUB)


def _feature_slots(candidates: np.ndarray) -> np.ndarray:
    """(n_features + 1,) first slot of each feature (slots are numbered feature by feature)."""
    return np.concatenate([[0], np.cumsum(candidates.sum(axis=1))]).astype(np.int64)


def candidate_subbuckets(coarse: np.ndarray, candidates: np.ndarray, middle: np.ndarray,
                         n_value_bins: int) -> np.ndarray:
    """Pass 3 selection: (n_slots, 256) bool, the sub-buckets whose exact values are needed.

    A feature whose occupied buckets are all candidates and whose occupied sub-buckets number at
    most ``n_value_bins`` may have few distinct values: all its sub-buckets are looked at.
    Otherwise the sub-buckets holding a target rank are.
    """
    selected = np.zeros(middle.shape, dtype=bool)
    first = _feature_slots(candidates)
    for f in range(coarse.shape[0]):
        sub = middle[first[f]: first[f + 1]]
        if not len(sub):
            continue
        occupied = coarse[f] > 0
        if not (occupied & ~candidates[f]).any() and (sub > 0).sum() <= n_value_bins:
            selected[first[f]: first[f + 1]] = sub > 0
        total = int(coarse[f].sum())
        if total > 0 and n_value_bins > 1:
            before = (np.cumsum(coarse[f]) - coarse[f])[np.flatnonzero(candidates[f])]
            cumulative = (before[:, None] + np.cumsum(sub, axis=1)).reshape(-1)
            hit = np.searchsorted(cumulative, _target_ranks(total, n_value_bins))
            selected[first[f]: first[f + 1]].reshape(-1)[hit] = True
    return selected


@dataclasses.dataclass
class FineSummary:
    """Exact distinct values inside candidate buckets: sorted by (feature, key), unique.

    feature: (m,) int64, key: (m,) uint32 ordered keys, weight: (m,) int64. Host arrays.
    """

    feature: np.ndarray
    key: np.ndarray
    weight: np.ndarray


def fine_summary(xp, X, w_fixed, slots, subcandidates) -> FineSummary:
    """Pass 3: the distinct values of X in candidate sub-buckets with their total weights.

    slots: from ``candidate_slots``; subcandidates: from ``candidate_subbuckets``.
    """
    if not subcandidates.size:  # no candidate bucket at all (every value missing)
        return _summarise(xp, xp.zeros(0, dtype=xp.uint64), None)
    slots = xp.asarray(slots)
    wanted = xp.asarray(subcandidates).reshape(-1)
    feature_bits = (xp.arange(X.shape[1], dtype=xp.uint64) << xp.uint64(32))[None, :]
    keys_parts, weight_parts = [], []
    for block, w in _row_blocks(X, w_fixed):
        keys, flat = _flat_bucket_ids(xp, block)
        slot = slots[flat]
        # slot -1 (not a candidate bucket) reads entry -1; the slot test discards it
        selected = ~xp.isnan(block) & (slot >= 0) & wanted[slot * N_SUB + _sub_bucket(xp, keys)]
        keys_parts.append((keys.astype(xp.uint64) | feature_bits)[selected])
        if w is not None:
            weight_parts.append(xp.broadcast_to(w[:, None], block.shape)[selected])
    combined = xp.concatenate(keys_parts) if keys_parts else xp.zeros(0, dtype=xp.uint64)
    weights = None if w_fixed is None else (
        xp.concatenate(weight_parts) if weight_parts else xp.zeros(0))
    return _summarise(xp, combined, weights)


def _summarise(xp, combined, weights) -> FineSummary:
    # Sort, then total each run of equal keys. Weight totals are integers below 2**53, so the
    # float64 cumulative sum is exact and run totals are differences of it.
    if weights is None:
        ordered = xp.sort(combined)
        run_weight = None
    else:
        order = xp.argsort(combined)
        ordered = combined[order]
        run_weight = xp.cumsum(weights[order])
    if len(ordered) == 0:
        return FineSummary(np.empty(0, np.int64), np.empty(0, np.uint32), np.empty(0, np.int64))
    run_end = xp.flatnonzero(xp.concatenate([ordered[1:] != ordered[:-1], xp.ones(1, bool)]))
    if run_weight is None:
        run_total = xp.diff(run_end, prepend=-1)
    else:
        cumulative = run_weight[run_end]
        run_total = xp.rint(xp.diff(cumulative, prepend=0.0))
    unique = np.asarray(ordered[run_end] if xp is np else ordered[run_end].get())
    totals = np.asarray(run_total if xp is np else run_total.get()).astype(np.int64)
    return FineSummary(feature=(unique >> np.uint64(32)).astype(np.int64),
                       key=(unique & np.uint64(0xFFFFFFFF)).astype(np.uint32), weight=totals)


def merge_fine(parts: list[FineSummary]) -> FineSummary:
    """Merge fine summaries of several partitions (exact; order of ``parts`` does not matter)."""
    if len(parts) == 1:
        return parts[0]
    combined = np.concatenate([(p.feature.astype(np.uint64) << np.uint64(32))
                               | p.key.astype(np.uint64) for p in parts])
    weights = np.concatenate([p.weight for p in parts]).astype(np.float64)
    return _summarise(np, combined, weights)


def choose_cuts(coarse: np.ndarray, candidates: np.ndarray, middle: np.ndarray,
                subcandidates: np.ndarray, fine: FineSummary,
                n_value_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut points per feature from the merged summaries.

    A feature whose distinct values number at most ``n_value_bins`` gets one bin per value;
    otherwise the exact value at each target rank W*i/n_value_bins starts a new bin. Returns
    cut_values (float32, all features concatenated, each ascending and unique) and
    cut_offsets ((n_features + 1,) int64).
    """
    n_features = coarse.shape[0]
    starts = np.searchsorted(fine.feature, np.arange(n_features + 1))
    first = _feature_slots(candidates)
    per_feature = []
    for f in range(n_features):
        keys = fine.key[starts[f] : starts[f + 1]]
        weights = fine.weight[starts[f] : starts[f + 1]]
        total = int(coarse[f].sum())
        if total == 0:
            per_feature.append(np.empty(0, dtype=_dtypes.CUT))
            continue
        occupied = coarse[f] > 0
        sub = middle[first[f]: first[f + 1]]
        if not (occupied & ~candidates[f]).any() and \
                not ((sub > 0) & ~subcandidates[first[f]: first[f + 1]]).any() and \
                len(keys) <= n_value_bins:
            per_feature.append(keys_to_values(keys[1:]))  # every distinct value, minus the lowest
            continue
        # Exact global rank at each entry: weight before its bucket, before its sub-bucket within
        # the bucket, and of the entries before it within the sub-bucket (keys are sorted).
        bucket = (keys >> np.uint32(RADIX_BITS)).astype(np.int64)
        part = ((keys >> np.uint32(RADIX_BITS - SUB_BITS)) & np.uint32(N_SUB - 1)).astype(np.int64)
        slot_of_bucket = np.cumsum(candidates[f]) - 1  # candidate buckets' slots, from first[f]
        before_sub = np.cumsum(sub, axis=1) - sub
        before = (np.cumsum(coarse[f]) - coarse[f])[bucket] + \
            before_sub[slot_of_bucket[bucket], part]
        group = bucket * N_SUB + part
        within = np.cumsum(weights)
        group_start = np.searchsorted(group, group)  # index of each entry's sub-bucket start
        within_group = within - (within[group_start] - weights[group_start])
        cumulative = before + within_group
        entry = np.searchsorted(cumulative, _target_ranks(total, n_value_bins))
        entry = np.unique(entry)
        entry = entry[cumulative[entry] - weights[entry] > 0]  # a cut at the minimum is no cut
        per_feature.append(keys_to_values(keys[entry]))
    offsets = np.zeros(n_features + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in per_feature])
    values = np.concatenate(per_feature) if per_feature else np.empty(0, dtype=_dtypes.CUT)
    return values.astype(_dtypes.CUT), offsets
