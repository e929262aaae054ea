"""Fast CPU kernels (numba, multi-threaded): same names, signatures and results as numpy_kernels.

Threads split rows (histograms, binning, prediction) or nodes (partition, split search). Each thread
accumulates integers into its own histogram, and the per-thread histograms are added at the end,
so the result does not depend on the number of threads. Floating-point split gains are computed
with the same operations in the same order as the NumPy twin (no fastmath), so they agree exactly.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .. import _dtypes

# error_model="numpy": a float division by zero gives inf like NumPy instead of raising.
_JIT = dict(cache=True, nogil=True, error_model="numpy")
# Rows per block in the fused partition/histogram pass (a block's rows stay in L1 between steps).
_BLOCK = 256


@njit(parallel=True, **_JIT)
def _bin_features(X, cut_values, cut_offsets, out):
    n_rows, n_features = X.shape
    for i in prange(n_rows):
        for f in range(n_features):
            x = X[i, f]
            if x != x:
                out[i, f] = 0
                continue
            lo = cut_offsets[f]
            n = cut_offsets[f + 1] - lo
            if n == 0:
                out[i, f] = 1
                continue
            # Branch-free upper bound: the loop count depends only on n, so the CPU predicts it.
            base = lo
            while n > 1:
                half = n >> 1
                base += half if cut_values[base + half] <= x else 0
                n -= half
            out[i, f] = base - lo + (2 if cut_values[base] <= x else 1)


def bin_features(X, cut_values, cut_offsets, out):
    """See numpy_kernels.bin_features."""
    _bin_features(X, cut_values, cut_offsets, out)
    return out


@njit(inline="always", **_JIT)
def _add_row(acc, bins, gh, r):
    # One row's gradient pair into every feature's bin of a (n_features, n_bins, 2) histogram.
    g = gh[r, 0]
    h = gh[r, 1]
    for f in range(bins.shape[1]):
        b = bins[r, f]
        acc[f, b, 0] += g
        acc[f, b, 1] += h


@njit(parallel=True, **_JIT)
def _build_histograms(bins, gh, row_index, seg_start, seg_count, hist, n_threads):
    n_features = bins.shape[1]
    n_bins = hist.shape[2]
    local = np.zeros((n_threads, n_features, n_bins, 2), dtype=np.int64)
    for k in range(seg_start.shape[0]):
        count = seg_count[k]
        if count == 0:
            continue
        chunk = (count + n_threads - 1) // n_threads
        for t in prange(n_threads):
            lo = seg_start[k] + t * chunk
            hi = min(seg_start[k] + count, lo + chunk)
            acc = local[t]
            acc[:] = 0
            for p in range(lo, hi):
                _add_row(acc, bins, gh, row_index[p])
        for t in range(n_threads):
            hist[k] += local[t]


def build_histograms(bins, gh, row_index, seg_start, seg_count, n_bins):
    """See numpy_kernels.build_histograms."""
    hist = np.zeros((len(seg_start), bins.shape[1], n_bins, 2), dtype=_dtypes.FIXED)
    _build_histograms(bins, gh, row_index, np.asarray(seg_start, dtype=np.int64),
                      np.asarray(seg_count, dtype=np.int64), hist, numba.get_num_threads())
    return hist


@njit(**_JIT)
def _score(G, H, reg_lambda, reg_alpha):
    if G > reg_alpha:
        t = G - reg_alpha
    elif G < -reg_alpha:
        t = G + reg_alpha
    else:
        t = 0.0
    return t * t / (H + reg_lambda)


@njit(parallel=True, **_JIT)
def _evaluate_splits(hist, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h, reg_lambda,
                     reg_alpha, min_child_weight, gain, feature, bin_threshold, default_left,
                     left_sum):
    n_nodes, n_features, n_bins, _ = hist.shape
    for k in prange(n_nodes):
        tot_g = np.int64(0)
        tot_h = np.int64(0)
        for b in range(n_bins):
            tot_g += hist[k, 0, b, 0]
            tot_h += hist[k, 0, b, 1]
        GP = np.float64(tot_g) * inv_scale_g
        HP = np.float64(tot_h) * inv_scale_h
        parent = _score(GP, HP, reg_lambda, reg_alpha)
        best = -np.inf
        best_f = -1
        best_t = 0
        best_d = False
        best_lg = np.int64(0)
        best_lh = np.int64(0)
        for f in range(n_features):
            if not feature_allowed[f]:
                continue
            miss_g = hist[k, f, 0, 0]
            miss_h = hist[k, f, 0, 1]
            cum_g = np.int64(0)
            cum_h = np.int64(0)
            for t in range(1, n_value_bins[f]):
                cum_g += hist[k, f, t, 0]
                cum_h += hist[k, f, t, 1]
                for d in range(2):  # 0: missing goes left, 1: missing goes right
                    lg = cum_g + miss_g if d == 0 else cum_g
                    lh = cum_h + miss_h if d == 0 else cum_h
                    GL = np.float64(lg) * inv_scale_g
                    HL = np.float64(lh) * inv_scale_h
                    GR = np.float64(tot_g - lg) * inv_scale_g
                    HR = np.float64(tot_h - lh) * inv_scale_h
                    if HL < min_child_weight or HR < min_child_weight:
                        continue
                    if not (HL + reg_lambda > 0) or not (HR + reg_lambda > 0):
                        continue
                    g = (_score(GL, HL, reg_lambda, reg_alpha)
                         + _score(GR, HR, reg_lambda, reg_alpha)) - parent
                    if g > best:
                        best = g
                        best_f = f
                        best_t = t
                        best_d = d == 0
                        best_lg = lg
                        best_lh = lh
        gain[k] = best
        feature[k] = best_f
        bin_threshold[k] = best_t
        default_left[k] = best_d
        left_sum[k, 0] = best_lg
        left_sum[k, 1] = best_lh


def evaluate_splits(hist, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h, reg_lambda,
                    reg_alpha, min_child_weight):
    """See numpy_kernels.evaluate_splits."""
    n_nodes = hist.shape[0]
    gain = np.empty(n_nodes, dtype=np.float64)
    feature = np.empty(n_nodes, dtype=_dtypes.NODE)
    bin_threshold = np.empty(n_nodes, dtype=np.int32)
    default_left = np.empty(n_nodes, dtype=np.bool_)
    left_sum = np.empty((n_nodes, 2), dtype=_dtypes.FIXED)
    _evaluate_splits(hist, np.asarray(n_value_bins, dtype=np.int32),
                     np.asarray(feature_allowed, dtype=np.bool_), float(inv_scale_g),
                     float(inv_scale_h), float(reg_lambda), float(reg_alpha),
                     float(min_child_weight), gain, feature, bin_threshold, default_left, left_sum)
    return gain, feature, bin_threshold, default_left, left_sum


@njit(parallel=True, **_JIT)
def _partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                             bin_threshold,
                             default_left, small_is_left, hist, left_count, n_threads):
    n_features = bins.shape[1]
    n_bins = hist.shape[2]
    local = np.zeros((n_threads, n_features, n_bins, 2), dtype=np.int64)
    n_left_of = np.zeros(n_threads, dtype=np.int64)
    for k in range(seg_start.shape[0]):
        lo = seg_start[k]
        count = seg_count[k]
        if count == 0:
            continue
        f = feature[k]
        thr = bin_threshold[k]
        dl = default_left[k]
        build_left = small_is_left[k]
        goes_left = np.empty(count, dtype=np.bool_)
        chunk = (count + n_threads - 1) // n_threads
        # Pass 1, per block of rows: decide each row's side (branch-free), collect the rows of the
        # child being built, then add those rows to the histogram while they are still in cache.
        for t in prange(n_threads):
            a = lo + t * chunk
            b = min(lo + count, a + chunk)
            acc = local[t]
            acc[:] = 0
            block = np.empty(_BLOCK, dtype=row_index.dtype)
            n_left = 0
            for block_start in range(a, b, _BLOCK):
                block_end = min(b, block_start + _BLOCK)
                n_block = 0
                for p in range(block_start, block_end):
                    r = row_index[p]
                    bb = bins_by_feature[f, r]
                    go = (bb == 0 and dl) or (bb != 0 and bb <= thr)
                    goes_left[p - lo] = go
                    n_left += go
                    block[n_block] = r
                    n_block += go == build_left
                for j in range(n_block):
                    _add_row(acc, bins, gh, block[j])
            n_left_of[t] = n_left
        total_left = 0
        for t in range(n_threads):
            total_left += n_left_of[t]
        # Pass 2: stable, branch-free scatter into a scratch copy, then back into the segment.
        moved = np.empty(count, dtype=row_index.dtype)
        for t in prange(n_threads):
            a = lo + t * chunk
            b = min(lo + count, a + chunk)
            left_before = 0
            for u in range(t):
                left_before += n_left_of[u]
            left_pos = left_before
            right_pos = total_left + (a - lo) - left_before
            for p in range(a, b):
                go = goes_left[p - lo]
                moved[left_pos if go else right_pos] = row_index[p]
                left_pos += go
                right_pos += 1 - go
        row_index[lo : lo + count] = moved
        for t in range(n_threads):
            hist[k] += local[t]
        left_count[k] = total_left


def partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                            bin_threshold, default_left, small_is_left, n_bins):
    """See numpy_kernels.partition_and_histogram."""
    k = len(seg_start)
    hist = np.zeros((k, bins.shape[1], n_bins, 2), dtype=_dtypes.FIXED)
    left_count = np.zeros(k, dtype=np.int64)
    _partition_and_histogram(bins, bins_by_feature, gh, row_index, np.asarray(seg_start, dtype=np.int64),
                             np.asarray(seg_count, dtype=np.int64),
                             np.asarray(feature, dtype=np.int64),
                             np.asarray(bin_threshold, dtype=np.int64),
                             np.asarray(default_left, dtype=np.bool_),
                             np.asarray(small_is_left, dtype=np.bool_), hist, left_count,
                             numba.get_num_threads())
    return left_count, hist


@njit(parallel=True, **_JIT)
def _add_leaf_values(margin, row_index, seg_start, seg_count, values):
    for k in prange(seg_start.shape[0]):
        v = values[k]
        for p in range(seg_start[k], seg_start[k] + seg_count[k]):
            margin[row_index[p]] += v


def add_leaf_values(margin, row_index, seg_start, seg_count, values):
    """See numpy_kernels.add_leaf_values."""
    _add_leaf_values(margin, row_index, np.asarray(seg_start, dtype=np.int64),
                     np.asarray(seg_count, dtype=np.int64), np.asarray(values, dtype=np.float64))


@njit(parallel=True, **_JIT)
def _add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature, bin_threshold,
                           default_left, left_value, right_value, n_threads):
    # Threads split each node's rows (the deepest level may hold a single node).
    for k in range(seg_start.shape[0]):
        count = seg_count[k]
        chunk = (count + n_threads - 1) // n_threads
        f = feature[k]
        thr = bin_threshold[k]
        dl = default_left[k]
        lv = left_value[k]
        rv = right_value[k]
        for t in prange(n_threads):
            a = seg_start[k] + t * chunk
            b = min(seg_start[k] + count, a + chunk)
            for p in range(a, b):
                r = row_index[p]
                bb = bins_by_feature[f, r]
                go = (bb == 0 and dl) or (bb != 0 and bb <= thr)
                margin[r] += lv if go else rv


def add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature, bin_threshold,
                          default_left, left_value, right_value):
    """See numpy_kernels.add_split_leaf_values."""
    _add_split_leaf_values(margin, bins_by_feature, row_index, np.asarray(seg_start, dtype=np.int64),
                           np.asarray(seg_count, dtype=np.int64), np.asarray(feature, np.int64),
                           np.asarray(bin_threshold, np.int64), np.asarray(default_left, np.bool_),
                           np.asarray(left_value, np.float64), np.asarray(right_value, np.float64),
                           numba.get_num_threads())


@njit(parallel=True, **_JIT)
def _predict_margins(X, feature, threshold, default_left, left, right, value, tree_root,
                     tree_group, out):
    for i in prange(X.shape[0]):
        for t in range(tree_root.shape[0]):
            node = tree_root[t]
            while feature[node] >= 0:
                x = X[i, feature[node]]
                if x != x:
                    go_left = default_left[node]
                else:
                    go_left = x < threshold[node]
                node = left[node] if go_left else right[node]
            out[i, tree_group[t]] += value[node]


def predict_margins(X, feature, threshold, default_left, left, right, value, tree_root, tree_group,
                    out):
    """See numpy_kernels.predict_margins."""
    _predict_margins(X, feature, threshold, default_left, left, right, value, tree_root,
                     tree_group, out)
    return out
