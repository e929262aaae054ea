"""Mergeable, exact weighted quantile summaries of every feature, and the cut points chosen from them.

Why exact and not a lossy sketch: gbflow's promise is the same model from the same data however it
is split into partitions or workers, and a lossy summary depends on the merge order. Here every
summary is an integer table that merges by addition, so the cuts are the exact weighted quantiles
of the float32 data, independent of row order and partitioning.

How, in three passes over the data (a radix select on the float32 bit patterns):

1. ``coarse_summary``: per feature, the total weight in each of 65,536 buckets given by the top 16
   bits of the order-preserving uint32 key of each value. ``candidate_buckets`` then picks the
   buckets that hold a target quantile rank (or, for a feature with few occupied buckets, all of
   them, so low-cardinality features get one bin per distinct value); ``bucket_slots`` numbers
   them.
2. ``middle_summary``: inside candidate buckets, the total weight per next 8 bits of the key (a
   dense (slots, 256) table). ``candidate_sub_buckets`` picks the sub-buckets that hold a target.
3. ``fine_summary``: the exact distinct values, with their weights, inside candidate sub-buckets
   (at most 256 distinct floats each, so this summary stays small even on continuous data).
4. ``choose_cuts``: the exact value at each target rank becomes a cut.

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
from .backend import to_host

RADIX_BITS = 16
N_BUCKETS = 1 << RADIX_BITS


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


def _blocks(X, w_fixed, block_values):
    """(first feature, block of X, its weights): rows and, for wide data, groups of features, so
    that a block's summary table (features x 65,536 buckets) stays about the size of the block."""
    n_rows, n_features = X.shape
    group = max(1, min(n_features, 2 * block_values // N_BUCKETS))
    step = max(1, block_values // group)
    for f0 in range(0, n_features, group):
        for start in range(0, n_rows, step):
            w = None if w_fixed is None else w_fixed[start : start + step]
            yield f0, X[start : start + step, f0 : f0 + group], w


def coarse_summary(xp, X, w_fixed, block_values: int = BLOCK_VALUES):
    """Pass 1: (n_features, 65536) int64 total weight per feature and key bucket.

    X: (n_rows, n_features) float32. w_fixed: (n_rows,) integer-valued float64 or None.
    block_values: values per block of rows (the GPU takes far larger blocks than the CPU).
    """
    n_features = X.shape[1]
    counts = xp.zeros(n_features * N_BUCKETS, dtype=np.int64)
    for f0, block, w in _blocks(X, w_fixed, block_values):
        _, flat = _flat_bucket_ids(xp, block)
        present = ~xp.isnan(block)
        table = counts[f0 * N_BUCKETS : (f0 + block.shape[1]) * N_BUCKETS]
        if w is None:
            table += xp.bincount(flat[present], minlength=len(table))
        else:
            weights = xp.broadcast_to(w[:, None], block.shape)[present]
            table += xp.rint(xp.bincount(flat[present], weights=weights,
                                         minlength=len(table))).astype(np.int64)
    return counts.reshape(n_features, N_BUCKETS)


def _target_ranks(total: int, n_value_bins: int) -> np.ndarray:
    # Python integers: total * i may exceed int64 for large fixed-point totals.
    return np.array([total * i // n_value_bins + 1 for i in range(1, n_value_bins)], dtype=np.int64)


def candidate_buckets(coarse: np.ndarray, n_value_bins: int) -> np.ndarray:
    """Pass 1 selection: (n_features, 65536) bool, the buckets whose contents are looked into.

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


@dataclasses.dataclass
class Slots:
    """Rows of the pass-2 table: one per candidate bucket, numbered in (feature, bucket) order.

    of_bucket: (n_features * 65536,) int32, each candidate bucket's slot, -1 elsewhere.
    first: (n_features + 1,) int64, feature f's slots are first[f] .. first[f + 1] - 1. Host arrays.
    """

    of_bucket: np.ndarray
    first: np.ndarray


def bucket_slots(candidates: np.ndarray) -> Slots:
    """The slots of the candidate buckets ((n_features, 65536) bool)."""
    where = np.flatnonzero(candidates.reshape(-1))
    of_bucket = np.full(candidates.size, -1, dtype=np.int32)
    of_bucket[where] = np.arange(len(where), dtype=np.int32)
    first = np.concatenate([[0], np.cumsum(candidates.sum(axis=1))]).astype(np.int64)
    return Slots(of_bucket=of_bucket, first=first)


SUB_BITS = 8
N_SUB = 1 << SUB_BITS


def _sub_bucket(xp, keys):
    return ((keys >> (RADIX_BITS - SUB_BITS)) & xp.uint32(N_SUB - 1)).astype(xp.intp)


def middle_summary(xp, X, w_fixed, slots, block_values: int = BLOCK_VALUES):
    """Pass 2: (n_slots, 256) int64 total weight per candidate bucket and next 8 key bits.

    slots: ``bucket_slots`` of the merged pass-1 selection."""
    first = slots.first
    slots = xp.asarray(slots.of_bucket)
    counts = xp.zeros(int(first[-1]) * N_SUB, dtype=np.int64)
    for f0, block, w in _blocks(X, w_fixed, block_values):
        keys, flat = _flat_bucket_ids(xp, block)
        slot = slots[flat + f0 * N_BUCKETS]
        selected = ~xp.isnan(block) & (slot >= 0)
        lo, hi = int(first[f0]), int(first[f0 + block.shape[1]])
        ids = ((slot.astype(xp.intp) - lo) * N_SUB + _sub_bucket(xp, keys))[selected]
        table = counts[lo * N_SUB : hi * N_SUB]
        if w is None:
            table += xp.bincount(ids, minlength=len(table))
        else:
            weights = xp.broadcast_to(w[:, None], block.shape)[selected]
            table += xp.rint(xp.bincount(ids, weights=weights,
                                         minlength=len(table))).astype(np.int64)
    return counts.reshape(-1, N_SUB)


def candidate_sub_buckets(coarse: np.ndarray, slots: Slots, middle: np.ndarray,
                          n_value_bins: int) -> np.ndarray:
    """Pass 2 selection: (n_slots, 256) bool, the sub-buckets whose exact values are needed.

    Those holding a target rank, or, for a feature with few occupied sub-buckets, all of them."""
    selected = np.zeros(middle.shape, dtype=bool)
    for f in range(coarse.shape[0]):
        first, stop = slots.first[f], slots.first[f + 1]
        table = middle[first:stop]
        occupied = table > 0
        if occupied.sum() <= n_value_bins:
            selected[first:stop] = occupied
        total = int(coarse[f].sum())
        if total == 0 or n_value_bins <= 1:
            continue
        ranks = _target_ranks(total, n_value_bins)
        cumulative = np.cumsum(coarse[f])
        bucket = np.searchsorted(cumulative, ranks)
        within = ranks - (cumulative[bucket] - coarse[f, bucket])  # rank inside the bucket
        slot = slots.of_bucket[f * N_BUCKETS + bucket]
        # first sub-bucket whose cumulative weight reaches the rank, for every target at once
        sub = (np.cumsum(middle[slot], axis=1) < within[:, None]).sum(axis=1)
        selected[slot, sub] = True
    return selected


@dataclasses.dataclass
class FineSummary:
    """Exact distinct values inside candidate sub-buckets: sorted by (feature, key), unique.

    feature: (m,) int64, key: (m,) uint32 ordered keys, weight: (m,) int64. Host arrays.
    """

    feature: np.ndarray
    key: np.ndarray
    weight: np.ndarray


def fine_summary(xp, X, w_fixed, slots, sub_candidates,
                 block_values: int = BLOCK_VALUES) -> FineSummary:
    """Pass 3: the distinct values of X in candidate sub-buckets with their total weights."""
    slots = xp.asarray(slots.of_bucket)
    wanted = xp.asarray(sub_candidates).reshape(-1)
    keys_parts, weight_parts = [], []
    for f0, block, w in _blocks(X, w_fixed, block_values):
        keys, flat = _flat_bucket_ids(xp, block)
        feature_bits = (xp.arange(f0, f0 + block.shape[1], dtype=xp.uint64)
                        << xp.uint64(32))[None, :]
        slot = slots[flat + f0 * N_BUCKETS].astype(xp.intp)
        in_bucket = ~xp.isnan(block) & (slot >= 0)
        sub_index = xp.where(in_bucket, slot * N_SUB + _sub_bucket(xp, keys), 0)
        selected = in_bucket & wanted[sub_index] if len(wanted) else in_bucket & False
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
    unique = to_host(ordered[run_end])
    totals = to_host(run_total).astype(np.int64)
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


def _exclusive_cumsum_by_group(weights: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Weight before each entry within its run of equal ``group`` ids (entries sorted by group)."""
    within = np.cumsum(weights)
    first = np.searchsorted(group, group)  # index of the first entry of each entry's group
    return within - weights - (within[first] - weights[first])


def choose_cuts(coarse: np.ndarray, candidates: np.ndarray, slots: Slots,
                middle: np.ndarray, sub_candidates: np.ndarray, fine: FineSummary,
                n_value_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut points per feature from the merged summaries of the three passes.

    A feature whose distinct values number at most ``n_value_bins`` gets one bin per value;
    otherwise the exact value at each target rank W*i/n_value_bins starts a new bin. Returns
    cut_values (float32, all features concatenated, each ascending and unique) and
    cut_offsets ((n_features + 1,) int64).
    """
    n_features = coarse.shape[0]
    starts = np.searchsorted(fine.feature, np.arange(n_features + 1))
    # weight before each sub-bucket inside its bucket
    before_sub = np.cumsum(middle, axis=1) - middle
    per_feature = []
    for f in range(n_features):
        keys = fine.key[starts[f] : starts[f + 1]]
        weights = fine.weight[starts[f] : starts[f + 1]]
        total = int(coarse[f].sum())
        if total == 0:
            per_feature.append(np.empty(0, dtype=_dtypes.CUT))
            continue
        first, stop = slots.first[f], slots.first[f + 1]
        everything = not (coarse[f] > 0)[~candidates[f]].any() and \
            not (middle[first:stop] > 0)[~sub_candidates[first:stop]].any()
        if everything and len(keys) <= n_value_bins:
            per_feature.append(keys_to_values(keys[1:]))  # every distinct value, minus the lowest
            continue
        bucket = (keys >> np.uint32(RADIX_BITS)).astype(np.int64)
        sub = ((keys >> np.uint32(RADIX_BITS - SUB_BITS)) & np.uint32(N_SUB - 1)).astype(np.int64)
        before_bucket = np.cumsum(coarse[f]) - coarse[f]
        slot = slots.of_bucket[f * N_BUCKETS + bucket]
        group = (keys >> np.uint32(RADIX_BITS - SUB_BITS)).astype(np.int64)
        # exact global rank (weight up to and including each entry)
        cumulative = before_bucket[bucket] + before_sub[slot, sub] + \
            _exclusive_cumsum_by_group(weights, group) + weights
        entry = np.searchsorted(cumulative, _target_ranks(total, n_value_bins))
        entry = np.unique(entry)
        entry = entry[cumulative[entry] - weights[entry] > 0]  # a cut at the minimum is no cut
        per_feature.append(keys_to_values(keys[entry]))
    offsets = np.zeros(n_features + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in per_feature])
    values = np.concatenate(per_feature) if per_feature else np.empty(0, dtype=_dtypes.CUT)
    return values.astype(_dtypes.CUT), offsets
