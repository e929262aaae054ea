"""Fast CPU kernels (numba, multi-threaded): same names, signatures and results as numpy_kernels.

Threads split rows (histograms, binning, prediction) or nodes (partition, split search). Each thread
accumulates integers into its own histogram, and the per-thread histograms are added at the end,
so the result does not depend on the number of threads. Floating-point split gains are computed
with the same operations in the same order as the NumPy twin (no fastmath), so they agree exactly.
"""
from __future__ import annotations

import contextlib
import functools
import math
import typing

import numba
import numpy as np
from numba import njit, prange

from .. import _dtypes
from . import numpy_kernels
from .common import (
    categorical_width,
    check_bounds,
    check_column_out,
    check_dest,
    check_feature_mask,
    check_sibling_shapes,
    check_side_map,
    feature_widths,
    gradient_out,
    integer_scalar,
    padded_width,
    segments_of_work,
)
from .cpu_prefetch import PREFETCH_ROWS, prefetch
from .cpu_widen import ANY, ANY_READ_ONLY, READ_ONLY, Widened
from .losses import check_loss_arguments
from .sketch_tallies import BUCKET_BITS, N_BUCKETS, N_SUB, SUB_BITS, check_sketch_arguments

# error_model="numpy": a float division by zero gives inf like NumPy instead of raising.
_JIT = dict(cache=True, nogil=True, error_model="numpy")
# A helper called in a parallel loop's body, many times (a row's step, a block's rows):
# compiled on its own and inlined by LLVM, not into numba's IR (numba's parallel passes over
# the inlined copies made the prediction walk 8.7 s of compilation a signature, against 3.0),
# and without reference counting (it allocates nothing; outside the loop's own function its
# arrays' counts were atomic operations on every call: the walk ran 6-12x slower). Callers
# pass int64 rows and nodes (one compile each). numba passes forceinline on to the plain
# helpers a forceinline function compiles first (``_radix_sort``, ``_parent_gain``): LLVM may
# inline them too; no result depends on it.
_LEAF_JIT = dict(forceinline=True, _nrt=False, **_JIT)
# Rows per block in the fused partition/histogram pass (a block's rows stay in L1 between steps).
_BLOCK = 256
# A level's nodes are spread over the threads whole (one thread a node) instead of each node's
# rows over all threads (per-thread histograms, two parallel regions a node) from this many
# nodes per thread, when they hold at most _NODE_ROWS_APART rows on average: larger nodes keep
# every thread busy to the end of the level (on 2 cores, 1M x 28 at 16 nodes of 62K rows:
# 13.5 ns a row apart, 10.6 ns split; 100K rows at 16 nodes of 6K rows: 10.3 apart, 21 split).
_NODES_APART = 2
_NODE_ROWS_APART = 1 << 15


@contextlib.contextmanager
def limited_threads(n: int | None):
    """Within this block, the calling thread's kernels use at most ``n`` threads (numba's
    setting is per thread: other threads keep theirs; None: as it is). Yields the count used."""
    previous = numba.get_num_threads()
    if n is None:
        yield previous
        return
    used = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(used)
    try:
        yield used
    finally:
        numba.set_num_threads(previous)


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


_BIN_FEATURES_CALL = Widened(_bin_features, {0: READ_ONLY, 3: ANY})


# Features of fewer than _CUT_TABLE_WIDTH cuts are binned through a (n_features, width) table of
# their cuts padded with NaN (no value is >= NaN), by a search whose step count is a compile-time
# constant: LLVM unrolls it into eight branch-free steps. On 100,000 x 28 values of 254 cuts that
# took 11 ms against 55 ms for the search by each feature's own cut count (two cores), whose
# loop bound is only known at run time.
_CUT_TABLE_WIDTH = 256


@njit(parallel=True, **_JIT)
def _bin_by_table(X, table, out):
    n_rows, n_features = X.shape
    for i in prange(n_rows):
        for f in range(n_features):
            x = X[i, f]
            # table[f, 0] is -inf: base ends at the number of cuts <= x (0 for NaN, masked below)
            base = 0
            step = _CUT_TABLE_WIDTH >> 1
            while step > 0:
                base += step * np.int64(table[f, base + step] <= x)
                step >>= 1
            out[i, f] = 0 if x != x else base + 1


_BIN_BY_TABLE_CALL = Widened(_bin_by_table, {0: READ_ONLY, 2: ANY})


def _cut_table(cut_values, cut_offsets):
    """(n_features, _CUT_TABLE_WIDTH) array of cut_values' dtype: row f is -inf, feature f's
    cuts, then NaN; None when a feature has _CUT_TABLE_WIDTH cuts or more."""
    counts = np.diff(cut_offsets)
    if len(counts) == 0 or counts.max() >= _CUT_TABLE_WIDTH:
        return None
    table = np.full((len(counts), _CUT_TABLE_WIDTH), np.nan, dtype=cut_values.dtype)
    table[:, 0] = -np.inf
    rows = np.repeat(np.arange(len(counts)), counts)
    places = 1 + np.arange(len(cut_values)) - np.repeat(cut_offsets[:-1], counts)
    table[rows, places] = cut_values
    return table


def bin_features(X, cut_values, cut_offsets, out):
    """See numpy_kernels.bin_features."""
    table = _cut_table(np.asarray(cut_values), np.asarray(cut_offsets, dtype=np.int64))
    if table is None:
        _BIN_FEATURES_CALL(X, cut_values, cut_offsets, out)
    else:
        _BIN_BY_TABLE_CALL(X, table, out)
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


@njit(inline="always", **_JIT)
def _add_rows(acc, bins, gh, rows, lo, hi):
    # The rows rows[lo:hi] into acc, each row's bins and gradients asked for PREFETCH_ROWS rows
    # ahead: in node order they lie scattered over the matrix (see cpu_prefetch).
    for p in range(lo, min(hi, lo + PREFETCH_ROWS)):
        prefetch(bins, rows[p])
        prefetch(gh, rows[p])
    for p in range(lo, hi):
        if p + PREFETCH_ROWS < hi:
            ahead = rows[p + PREFETCH_ROWS]
            prefetch(bins, ahead)
            prefetch(gh, ahead)
        _add_row(acc, bins, gh, rows[p])


@njit(inline="always", **_JIT)
def _clear_thread_histogram(acc, widths):
    # Zeroes feature f's first widths[f] bins, the only ones its rows reach: a feature of 5,000
    # categories makes every feature's histograms that wide, and clearing (then adding) all of
    # it for every node cost more than the rows (see _add_thread_histograms).
    for f in range(acc.shape[0]):
        for b in range(widths[f]):
            acc[f, b, 0] = 0
            acc[f, b, 1] = 0


@njit(parallel=True, **_JIT)
def _add_thread_histograms(into, local, widths):
    # into += every thread's local histogram over feature f's first widths[f] bins (the rest of
    # a thread's histogram is neither cleared nor reached), the features spread over the threads
    # (serially, 16 threads' 114 KB histograms cost 0.2 ms a node); element by element (an
    # array expression would also compile numba's shape mismatch message: seconds of the first
    # call's compile for a check that cannot fail here).
    for f in prange(local.shape[1]):
        for t in range(local.shape[0]):
            for b in range(widths[f]):
                into[f, b, 0] += local[t, f, b, 0]
                into[f, b, 1] += local[t, f, b, 1]


@njit(parallel=True, **_JIT)
def _build_histograms(bins, gh, row_index, seg_start, seg_count, hist, n_threads, widths):
    # widths: (F,) int64, feature f's bins are below widths[f] (common.feature_widths: a bin
    # at or above its feature's width would be left out of the sums; the cuts bound them)
    n_features = bins.shape[1]
    n_bins = hist.shape[2]
    local = np.empty((n_threads, n_features, n_bins, 2), dtype=np.int64)
    for k in range(seg_start.shape[0]):
        count = seg_count[k]
        if count == 0:
            continue
        chunk = (count + n_threads - 1) // n_threads
        for t in prange(n_threads):
            lo = seg_start[k] + np.int64(t) * chunk
            _thread_rows_histogram(local[t], bins, gh, row_index, lo,
                                   min(seg_start[k] + count, lo + chunk), widths)
        _add_thread_histograms(hist[k], local, widths)


_BUILD_HISTOGRAMS_CALL = Widened(_build_histograms, {0: ANY_READ_ONLY})


@njit(forceinline=True, **_JIT)
def _thread_rows_histogram(acc, bins, gh, row_index, lo, hi, widths):
    """One thread's histogram ``acc`` (cleared over widths) of row_index[lo:hi]'s rows."""
    _clear_thread_histogram(acc, widths)
    _add_rows(acc, bins, gh, row_index, lo, hi)


def build_histograms(bins, gh, row_index, seg_start, seg_count, n_bins, n_value_bins=None):
    """See numpy_kernels.build_histograms (n_value_bins: the threads' histograms are cleared
    and added over each feature's own bins)."""
    hist = np.zeros((len(seg_start), bins.shape[1], n_bins, 2), dtype=_dtypes.FIXED)
    _BUILD_HISTOGRAMS_CALL(bins, gh, row_index, np.asarray(seg_start, dtype=np.int64),
                           np.asarray(seg_count, dtype=np.int64), hist, numba.get_num_threads(),
                           feature_widths(n_value_bins, bins.shape[1], n_bins))
    return hist


@njit(inline="always", **_JIT)
def _l1_threshold(G, reg_alpha):
    if G > reg_alpha:
        return G - reg_alpha
    if G < -reg_alpha:
        return G + reg_alpha
    return 0.0


@njit(inline="always", **_JIT)
def _score(G, H, reg_lambda, reg_alpha):
    t = _l1_threshold(G, reg_alpha)
    return t * t / (H + reg_lambda)


@njit(**_JIT)
def _bounded_weight(G, H, reg_lambda, reg_alpha, max_delta_step, lower, upper):
    """See numpy_kernels._bounded_weight (the same float operations)."""
    w = -_l1_threshold(G, reg_alpha) / (H + reg_lambda)
    if max_delta_step != 0 and abs(w) > max_delta_step:
        w = math.copysign(max_delta_step, w)
    if w < lower:
        return lower
    if w > upper:
        return upper
    return w


@njit(**_JIT)
def _weight_gain(G, H, reg_lambda, reg_alpha, w):
    return -(2.0 * (G * w) + (H + reg_lambda) * (w * w))


@njit(**_JIT)
def _parent_gain(GP, HP, reg_lambda, reg_alpha, bounded, max_delta_step, lower, upper):
    """See numpy_kernels._parent_gain (bounded False: no node bounds)."""
    if not bounded:
        return _score(GP, HP, reg_lambda, reg_alpha)
    w = _bounded_weight(GP, HP, reg_lambda, reg_alpha, max_delta_step, lower, upper)
    return _weight_gain(GP, HP, reg_lambda, reg_alpha, w)


@njit(inline="always", **_JIT)
def _free_gain(lg, lh, tot_g, tot_h, parent, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
               min_child_weight):
    """``_candidate_gain`` without bounds (the twin's float operations in its order; -inf where
    either child's hessian is below min_child_weight or its H + lambda is not positive), one
    expression, so that the split search's gain pass has no branch."""
    GL = np.float64(lg) * inv_scale_g
    HL = np.float64(lh) * inv_scale_h
    GR = np.float64(tot_g - lg) * inv_scale_g
    HR = np.float64(tot_h - lh) * inv_scale_h
    valid = (HL >= min_child_weight) & (HR >= min_child_weight) & (HL + reg_lambda > 0) & \
        (HR + reg_lambda > 0)
    gain = (_score(GL, HL, reg_lambda, reg_alpha) + _score(GR, HR, reg_lambda, reg_alpha)) - \
        parent
    return gain if valid else -np.inf


@njit(inline="always", **_JIT)
def _candidate_gain(lg, lh, tot_g, tot_h, parent, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                    min_child_weight, bounded, max_delta_step, lower, upper, sign):
    """Gain of the split whose left child sums to (lg, lh) of the node's (tot_g, tot_h), with the
    twin's float operations in its order; -inf where the candidate is not valid. bounded: the
    gain of weights bounded by max_delta_step and the node's [lower, upper], and with sign +1
    (-1) valid only when the left weight is <= (>=) the right one."""
    if not bounded:
        return _free_gain(lg, lh, tot_g, tot_h, parent, inv_scale_g, inv_scale_h, reg_lambda,
                          reg_alpha, min_child_weight)
    GL = np.float64(lg) * inv_scale_g
    HL = np.float64(lh) * inv_scale_h
    GR = np.float64(tot_g - lg) * inv_scale_g
    HR = np.float64(tot_h - lh) * inv_scale_h
    if HL < min_child_weight or HR < min_child_weight:
        return -np.inf
    if not (HL + reg_lambda > 0) or not (HR + reg_lambda > 0):
        return -np.inf
    WL = _bounded_weight(GL, HL, reg_lambda, reg_alpha, max_delta_step, lower, upper)
    WR = _bounded_weight(GR, HR, reg_lambda, reg_alpha, max_delta_step, lower, upper)
    if (sign > 0 and WL > WR) or (sign < 0 and WL < WR):
        return -np.inf
    return (_weight_gain(GL, HL, reg_lambda, reg_alpha, WL) +
            _weight_gain(GR, HR, reg_lambda, reg_alpha, WR)) - parent


def _bound_args(bounds, n_nodes: int, n_features: int | None) -> tuple:
    """The numba searches' (bounded, max_delta_step, node_bounds, monotone) of a search's
    ``bounds`` (numpy_kernels.evaluate_splits): stand-ins of the right types without them (no
    node bounds, every sign 0; n_features None: a search that reads no sign)."""
    bounds = check_bounds(bounds, n_nodes, n_features)
    no_signs = np.zeros(n_features or 1, dtype=np.int8)
    if bounds is None:
        return False, 0.0, np.zeros((1, 2)), no_signs
    max_delta_step, node_bounds, monotone = bounds
    return (True, max_delta_step, np.ascontiguousarray(node_bounds, dtype=np.float64),
            no_signs if monotone is None else np.ascontiguousarray(monotone, dtype=np.int8))


def evaluate_splits(hist, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h, reg_lambda,
                    reg_alpha, min_child_weight, bounds=None):
    """See numpy_kernels.evaluate_splits. The dense layout is the compact one with every feature
    n_bins wide: the sparse search (``evaluate_sparse_splits``) runs on it unchanged, with the
    same candidates in the same order (a view, no copy for a C-contiguous hist)."""
    n_nodes, n_features, n_bins, _ = hist.shape
    offsets = np.arange(n_features + 1, dtype=np.int64) * n_bins
    compact = np.ascontiguousarray(hist).reshape(n_nodes, n_features * n_bins, 2)
    return evaluate_sparse_splits(compact, offsets, n_value_bins, feature_allowed, inv_scale_g,
                                  inv_scale_h, reg_lambda, reg_alpha, min_child_weight, bounds,
                                  padded_bins=max(n_bins, 2))


@njit(parallel=True, **_JIT)
def _partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                             bin_threshold, default_left, small_is_left, hist, left_count,
                             dest, in_place, n_threads, widths):
    # Each parallel loop's body is a function of its own (as in the other growing kernels'
    # large loops): numba's parallel passes over a large loop body (fusion, and lowering it again
    # into the threads' function) cost about 2.5x a plain compile of the same code, seconds of
    # every fresh machine's first call.
    n_features = bins.shape[1]
    n_bins = hist.shape[2]
    local = np.empty((n_threads, n_features, n_bins, 2), dtype=np.int64)
    n_left_of = np.zeros(n_threads, dtype=np.int64)
    for k in range(seg_start.shape[0]):
        lo = seg_start[k]
        count = seg_count[k]
        if count == 0:
            continue
        goes_left = np.empty(count, dtype=np.bool_)
        chunk = (count + n_threads - 1) // n_threads
        # Pass 1, per block of rows: decide each row's side (branch-free), collect the rows of the
        # child being built, then add those rows to the histogram while they are still in cache.
        for t in prange(n_threads):
            a = lo + np.int64(t) * chunk
            n_left_of[t] = _sides_and_histogram(
                local[t], bins, bins_by_feature, gh, row_index, lo, a, min(lo + count, a + chunk),
                feature[k], bin_threshold[k], default_left[k], small_is_left[k], goes_left,
                widths)
        total_left = 0
        for t in range(n_threads):
            total_left += n_left_of[t]
        # Pass 2: stable, branch-free scatter into dest's segment; partitioning in place, into
        # a scratch copy first (the rows are read from row_index, which is dest).
        moved = np.empty(count if in_place else 0, dtype=row_index.dtype)
        offset = 0 if in_place else lo
        for t in prange(n_threads):
            a = lo + np.int64(t) * chunk
            _scatter_sides(moved if in_place else dest, row_index, goes_left, lo, a,
                           min(lo + count, a + chunk), offset, n_left_of, np.int64(t),
                           total_left)
        if in_place:
            for t in prange(n_threads):
                for j in range(t * chunk, min(count, (t + 1) * chunk)):
                    dest[lo + j] = moved[j]
        _add_thread_histograms(hist[k], local, widths)
        left_count[k] = total_left


_PARTITION_AND_HISTOGRAM_CALL = Widened(_partition_and_histogram,
                                        {0: ANY_READ_ONLY, 1: ANY_READ_ONLY})


@njit(forceinline=True, **_JIT)
def _sides_and_histogram(acc, bins, bins_by_feature, gh, row_index, lo, a, b, f, thr, dl,
                         build_left, goes_left, widths):
    """Pass 1 of ``_partition_and_histogram`` for one thread's rows row_index[a:b] of the
    segment starting at lo: goes_left[p - lo] set, the built child's rows added into the
    thread's histogram ``acc`` (cleared first); returns how many rows go left."""
    _clear_thread_histogram(acc, widths)
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
        _add_rows(acc, bins, gh, block, 0, n_block)
    return n_left


@njit(forceinline=True, **_JIT)
def _scatter_sides(out, row_index, goes_left, lo, a, b, offset, n_left_of, t, total_left):
    """Pass 2 of ``_partition_and_histogram`` for thread t's rows row_index[a:b]: each to its
    side's next place in out (left ones from offset, right ones after every left one)."""
    left_before = 0
    for u in range(t):
        left_before += n_left_of[u]
    left_pos = offset + left_before
    right_pos = offset + total_left + (a - lo) - left_before
    for p in range(a, b):
        go = goes_left[p - lo]
        out[left_pos if go else right_pos] = row_index[p]
        left_pos += go
        right_pos += 1 - go


@njit(parallel=True, **_JIT)
def _partition_nodes_apart(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                           bin_threshold, default_left, small_is_left, hist, left_count, dest):
    # Many nodes: each thread takes whole nodes, adds the built child's rows straight into the
    # node's own histogram and scatters the segment into dest (not row_index): no per-thread
    # buffers to clear and add, no parallel region per node (at a deep level, hundreds of nodes
    # of a few rows each; one parallel region a node ran up to 9x slower at 128 nodes).
    for k in prange(seg_start.shape[0]):
        left_count[k] = _partition_node(hist[k], bins, bins_by_feature, gh, row_index,
                                        seg_start[k], seg_start[k] + seg_count[k], feature[k],
                                        bin_threshold[k], default_left[k], small_is_left[k],
                                        dest)


_PARTITION_NODES_APART_CALL = Widened(_partition_nodes_apart,
                                      {0: ANY_READ_ONLY, 1: ANY_READ_ONLY})


@njit(forceinline=True, **_JIT)
def _partition_node(acc, bins, bins_by_feature, gh, row_index, lo, hi, f, thr, dl, build_left,
                    dest):
    """One node of ``_partition_nodes_apart``: its built child's rows added into ``acc``, its
    segment row_index[lo:hi] scattered into dest's; returns how many rows go left."""
    n_left = 0
    block = np.empty(_BLOCK, dtype=row_index.dtype)
    for block_start in range(lo, hi, _BLOCK):
        n_block = 0
        for p in range(block_start, min(hi, block_start + _BLOCK)):
            r = row_index[p]
            bb = bins_by_feature[f, r]
            go = (bb == 0 and dl) or (bb != 0 and bb <= thr)
            n_left += go
            block[n_block] = r
            n_block += go == build_left
        _add_rows(acc, bins, gh, block, 0, n_block)
    left_pos = lo
    right_pos = lo + n_left
    for p in range(lo, hi):
        r = row_index[p]
        bb = bins_by_feature[f, r]
        go = (bb == 0 and dl) or (bb != 0 and bb <= thr)
        dest[left_pos if go else right_pos] = r
        left_pos += go
        right_pos += 1 - go
    return n_left


def _hist_out(out, shape, name):
    """The histograms a kernel adds into: new zeros, or the caller's ``out`` once checked (the
    numba kernels add their per-thread histograms into whatever it holds)."""
    if out is None:
        return np.zeros(shape, dtype=_dtypes.FIXED)
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape) or \
            out.dtype != _dtypes.FIXED or not out.flags.c_contiguous:
        raise ValueError(f"{name}: out must be a C-contiguous int64 array of shape "
                         f"{tuple(shape)}")
    return out


def partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                            bin_threshold, default_left, small_is_left, n_bins, out=None,
                            dest=None, n_value_bins=None, side_map=None):
    """See numpy_kernels.partition_and_histogram (``out``: histograms added into it; ``dest``:
    where the segments' new order goes, row_index itself when None; n_value_bins: as
    ``build_histograms``'; a side map is applied by ``map_sides`` into a column the partition
    then reads)."""
    k = len(seg_start)
    if side_map is not None:
        side_map = check_side_map(side_map, k, n_bins)
        mapped = np.empty((1, bins_by_feature.shape[1]), dtype=bins_by_feature.dtype)
        map_sides(bins_by_feature, row_index, seg_start, seg_count, feature, side_map, mapped[0])
        bins_by_feature, feature = mapped, np.zeros(k, dtype=np.int64)
    hist = _hist_out(out, (k, bins.shape[1], n_bins, 2), "partition_and_histogram")
    left_count = np.zeros(k, dtype=np.int64)
    n_threads = numba.get_num_threads()
    nodes = (np.asarray(seg_start, dtype=np.int64), np.asarray(seg_count, dtype=np.int64),
             np.asarray(feature, dtype=np.int64), np.asarray(bin_threshold, dtype=np.int64),
             np.asarray(default_left, dtype=np.bool_), np.asarray(small_is_left, dtype=np.bool_))
    if dest is not None and k >= _NODES_APART * n_threads and \
            int(nodes[1].sum()) <= _NODE_ROWS_APART * k:
        _PARTITION_NODES_APART_CALL(bins, bins_by_feature, gh, row_index, *nodes, hist, left_count,
                                    check_dest(dest, row_index))
    else:
        _PARTITION_AND_HISTOGRAM_CALL(bins, bins_by_feature, gh, row_index, *nodes, hist,
                                      left_count, row_index if dest is None else
                                      check_dest(dest, row_index), dest is None, n_threads,
                                      feature_widths(n_value_bins, bins.shape[1], n_bins))
    return left_count, hist


@njit(parallel=True, **_JIT)
def _quantise_gradients(grad, hess, scale_g, scale_h, gh):
    for i in prange(grad.shape[0]):
        gh[i, 0] = np.int64(np.rint(grad[i] * scale_g))
        gh[i, 1] = np.int64(np.rint(hess[i] * scale_h))


def quantise_gradients(grad, hess, scale_g, scale_h, out=None):
    """See numpy_kernels.quantise_gradients. float32 gradients are read as they are (numba
    widens each to float64 before the product, as the twin's conversion does): converting a
    whole column first cost a pass and an allocation per tree."""
    gh = gradient_out(np, out, len(grad))
    _quantise_gradients(_float_column(grad), _float_column(hess), np.float64(scale_g),
                        np.float64(scale_h), gh)
    return gh


def _float_column(x):
    """x as a float32 or float64 array (no copy where it is one already)."""
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)


@njit(parallel=True, **_JIT)
def _sibling_histograms(parent, split_nodes, children, n_valid):
    n = split_nodes.shape[0]
    for k in prange(n_valid):
        p = split_nodes[k]
        for w in range(children.shape[1]):
            children[k, w] = parent[p, w] - children[n + k, w]


def sibling_histograms(parent, split_nodes, children, n_valid=None):
    """See numpy_kernels.sibling_histograms. children: C-contiguous int64 (its nodes are read
    and written as flat words), modified in place and returned."""
    n = len(split_nodes)
    check_sibling_shapes(parent, n, children)
    if not children.flags.c_contiguous or children.dtype != _dtypes.FIXED:
        raise ValueError("sibling_histograms: children must be a C-contiguous int64 array")
    valid = n if n_valid is None else min(n, int(n_valid[0]))
    if valid and children.size:
        _sibling_histograms(np.ascontiguousarray(parent).reshape(parent.shape[0], -1),
                            np.asarray(split_nodes, dtype=np.int64),
                            children.reshape(2 * n, -1), valid)
    return children


# Level plans and their margins: the GPU's loop (the CPU grows trees level by level; these run
# in the tests of planned trees), nothing to gain from numba.
plan_level = numpy_kernels.plan_level
level_segments = numpy_kernels.level_segments
add_planned_leaf_values = numpy_kernels.add_planned_leaf_values
add_planned_split_values = numpy_kernels.add_planned_split_values
quantile_select = numpy_kernels.quantile_select  # (groups, 256) values: no rows to go through


def partition_planned(bins, bins_by_feature, gh, row_index, work, n_work, feature, bin_threshold,
                      default_left, small_is_left, n_bins, out, dest, n_value_bins=None):
    """See numpy_kernels.partition_planned."""
    seg_start, seg_count = segments_of_work(work, n_work, len(feature))
    left_count, _ = partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start,
                                            seg_count, feature, bin_threshold, default_left,
                                            small_is_left, n_bins, out=out, dest=dest,
                                            n_value_bins=n_value_bins)
    return left_count


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


@njit(inline="always", **_JIT)
def _add_split_node(margin, bins_by_feature, row_index, a, b, f, thr, dl, lv, rv):
    for p in range(a, b):
        r = row_index[p]
        bb = bins_by_feature[f, r]
        go = (bb == 0 and dl) or (bb != 0 and bb <= thr)
        margin[r] += lv if go else rv


@njit(parallel=True, **_JIT)
def _add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature,
                           bin_threshold, default_left, left_value, right_value, n_threads):
    n_nodes = seg_start.shape[0]
    if n_nodes >= _NODES_APART * n_threads:  # one node per iteration (segments are disjoint)
        for k in prange(n_nodes):
            _add_split_node(margin, bins_by_feature, row_index, seg_start[k],
                            seg_start[k] + seg_count[k], feature[k], bin_threshold[k],
                            default_left[k], left_value[k], right_value[k])
        return
    # few nodes: threads split each node's rows (the deepest level may hold a single node)
    for k in range(n_nodes):
        count = seg_count[k]
        chunk = (count + n_threads - 1) // n_threads
        for t in prange(n_threads):
            a = seg_start[k] + t * chunk
            _add_split_node(margin, bins_by_feature, row_index, a,
                            min(seg_start[k] + count, a + chunk), feature[k], bin_threshold[k],
                            default_left[k], left_value[k], right_value[k])


_ADD_SPLIT_LEAF_VALUES_CALL = Widened(_add_split_leaf_values, {0: ANY, 1: ANY_READ_ONLY})


def add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature,
                          bin_threshold, default_left, left_value, right_value):
    """See numpy_kernels.add_split_leaf_values."""
    _ADD_SPLIT_LEAF_VALUES_CALL(
        margin, bins_by_feature, row_index, np.asarray(seg_start, dtype=np.int64),
        np.asarray(seg_count, dtype=np.int64), np.asarray(feature, np.int64),
        np.asarray(bin_threshold, np.int64), np.asarray(default_left, np.bool_),
        np.asarray(left_value, np.float64), np.asarray(right_value, np.float64),
        numba.get_num_threads())


# The node tests of the tree walks: whether a row goes left at ``node`` (node arrays passed
# whole: a node's threshold or default is read only on the path that needs it, which the walk's
# speed depends on).
@njit(inline="always", **_JIT)
def _value_goes_left(x, threshold, default_left, node):
    missing = x != x
    return (missing and default_left[node]) or (not missing and x < threshold[node])


@njit(inline="always", **_JIT)
def _bin_goes_left(b, bin_threshold, default_left, node):
    b = np.int32(b)
    return (b == 0 and default_left[node]) or (b != 0 and b <= bin_threshold[node])


@njit(inline="always", **_JIT)
def _value_position(x):
    return np.int64(x) if x >= 0 and x < 2147483648.0 else np.int64(-1)


@njit(inline="always", **_JIT)
def _bin_position(b):
    return np.int64(b) - 1


@njit(inline="always", **_JIT)
def _category_goes_left(position, cat_bits, start, default_left, node):
    """A categorical split's test (numpy_kernels.in_category_set): missing by default, the
    categories of the set right."""
    if position < 0:
        return default_left[node]
    word = position >> 5
    if word >= cat_bits[start]:
        return True
    return ((cat_bits[start + 1 + word] >> np.uint32(position & 31)) & np.uint32(1)) == 0


@njit(inline="always", **_JIT)
def _goes_left(x, node, binned, threshold, default_left, cat_start, cat_bits, has_categories):
    """Whether a row whose split feature holds ``x`` (a bin id when ``binned``, else a raw
    value) goes left at inner node ``node``: the one node test of every CPU walk."""
    if has_categories and cat_start[node] >= 0:
        position = _bin_position(x) if binned else _value_position(x)
        return _category_goes_left(position, cat_bits, cat_start[node], default_left, node)
    if binned:
        return _bin_goes_left(x, threshold, default_left, node)
    return _value_goes_left(x, threshold, default_left, node)


@njit(**_LEAF_JIT)
def _walk_step(rows, i, node, binned, feature, threshold, default_left, left, cat_start,
               cat_bits, has_categories):
    """Row i's next node from ``node`` (the node itself at a leaf)."""
    f = feature[node]
    if f < 0:
        return node
    go_left = _goes_left(rows[i, f], node, binned, threshold, default_left, cat_start,
                         cat_bits, has_categories)
    return left[node] + np.int32(1 - go_left)


@njit(parallel=True, **_JIT)
def _walk_trees(rows, binned, feature, threshold, default_left, left, value, tree_root,
                tree_group, out, cat_start, cat_bits, has_categories):
    # The prediction walk: every tree in tree order per row, the leaf value added; ``binned``:
    # rows of bins and bin thresholds, else raw values and float thresholds (one loop-invariant
    # test; two kernels made by a closure were never loaded from numba's cache: each process
    # compiled them again, 0.8 s). Without a branch on the direction (a row's path is
    # unpredictable): the right child follows the left one (``predictor.FlatForest``), 1.5x
    # faster than choosing between left and right. Four rows walk each tree side by side: a
    # step waits for the previous one's loads, and four independent paths keep the core busy
    # (200K binned rows, one depth-6 tree: 0.93 against 1.65 ms). Categorical splits
    # (cat_start >= 0) are tested only when the forest has any.
    n = rows.shape[0]
    for q in prange((n + 3) // 4):
        # int64 rows and nodes: one compile of the step (the parallel index is uint64, a
        # tree's root int32 and a child int64)
        i0 = np.int64(4 * q)
        # past the last row the last row walks again; its leaves are not added twice
        i1, i2, i3 = min(i0 + 1, n - 1), min(i0 + 2, n - 1), min(i0 + 3, n - 1)
        for t in range(tree_root.shape[0]):
            a = b = c = d = np.int64(tree_root[t])
            while feature[a] >= 0 or feature[b] >= 0 or feature[c] >= 0 or feature[d] >= 0:
                a = _walk_step(rows, i0, a, binned, feature, threshold, default_left, left,
                               cat_start, cat_bits, has_categories)
                b = _walk_step(rows, i1, b, binned, feature, threshold, default_left, left,
                               cat_start, cat_bits, has_categories)
                c = _walk_step(rows, i2, c, binned, feature, threshold, default_left, left,
                               cat_start, cat_bits, has_categories)
                d = _walk_step(rows, i3, d, binned, feature, threshold, default_left, left,
                               cat_start, cat_bits, has_categories)
            g = tree_group[t]
            out[i0, g] += value[a]
            if i0 + 1 < n:
                out[i0 + 1, g] += value[b]
            if i0 + 2 < n:
                out[i0 + 2, g] += value[c]
            if i0 + 3 < n:
                out[i0 + 3, g] += value[d]


_WALK_TREES_CALL = Widened(_walk_trees, {0: ANY_READ_ONLY})


def _category_arrays(cat_start, cat_bits):
    """The walks' last three arguments: the sets, and whether there are any (None: none)."""
    if cat_start is None:
        return np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.uint32), False
    return np.asarray(cat_start, dtype=np.int32), np.asarray(cat_bits, dtype=np.uint32), True


def predict_margins(X, feature, threshold, default_left, left, right, value, tree_root, tree_group,
                    out, cat_start=None, cat_bits=None):
    """See numpy_kernels.predict_margins."""
    _WALK_TREES_CALL(X, False, feature, threshold, default_left, left, value, tree_root,
                     tree_group, out, *_category_arrays(cat_start, cat_bits))
    return out


def predict_margins_binned(bins, feature, bin_threshold, default_left, left, right, value,
                           tree_root, tree_group, out, cat_start=None, cat_bits=None):
    """See numpy_kernels.predict_margins_binned."""
    _WALK_TREES_CALL(bins, True, feature, np.asarray(bin_threshold, dtype=np.int32),
                     default_left, left, value, tree_root, tree_group, out,
                     *_category_arrays(cat_start, cat_bits))
    return out


# ---------------------------------------------------------------------------------------------
# Explaining predictions: see the section of numpy_kernels. Rows in parallel, each row's trees
# or paths in order, with the twin's operations in the twin's order.

@njit(**_LEAF_JIT)
def _goes_left_at(rows, i, node, feature, threshold, default_left, cat_start, cat_bits,
                  has_categories):
    return _goes_left(rows[i, feature[node]], node, False, threshold, default_left, cat_start,
                      cat_bits, has_categories)


@njit(parallel=True, **_JIT)
def _predict_leaves(X, feature, threshold, default_left, left, tree_root, out, cat_start,
                    cat_bits, has_categories):
    for i in prange(X.shape[0]):
        for t in range(tree_root.shape[0]):
            node = np.int64(tree_root[t])  # int64 rows and nodes: one compile of the step
            while feature[node] >= 0:
                go_left = _goes_left_at(X, np.int64(i), node, feature, threshold,
                                        default_left, cat_start, cat_bits, has_categories)
                node = left[node] + np.int32(1 - go_left)
            out[i, t] = node - tree_root[t]


_PREDICT_LEAVES_CALL = Widened(_predict_leaves, {0: ANY_READ_ONLY})


def predict_leaves(X, feature, threshold, default_left, left, right, tree_root, out,
                   cat_start=None, cat_bits=None):
    """See numpy_kernels.predict_leaves."""
    _PREDICT_LEAVES_CALL(X, feature, threshold, default_left, left, tree_root, out,
                         *_category_arrays(cat_start, cat_bits))
    return out


@njit(parallel=True, **_JIT)
def _saabas_contributions(X, feature, threshold, default_left, left, tree_root, tree_group,
                          node_mean, out, cat_start, cat_bits, has_categories):
    bias = out.shape[2] - 1
    for i in prange(X.shape[0]):
        for t in range(tree_root.shape[0]):
            g = tree_group[t]
            node = np.int64(tree_root[t])  # int64 rows and nodes: one compile of the step
            out[i, g, bias] += node_mean[node]
            while feature[node] >= 0:
                go_left = _goes_left_at(X, np.int64(i), node, feature, threshold,
                                        default_left, cat_start, cat_bits, has_categories)
                child = left[node] + np.int32(1 - go_left)
                out[i, g, feature[node]] += node_mean[child] - node_mean[node]
                node = child


_SAABAS_CONTRIBUTIONS_CALL = Widened(_saabas_contributions, {0: ANY_READ_ONLY})


def saabas_contributions(X, feature, threshold, default_left, left, right, tree_root,
                         tree_group, node_mean, out, cat_start=None, cat_bits=None):
    """See numpy_kernels.saabas_contributions."""
    _SAABAS_CONTRIBUTIONS_CALL(X, feature, threshold, default_left, left, tree_root, tree_group,
                               node_mean, out, *_category_arrays(cat_start, cat_bits))
    return out


@njit(inline="always", **_JIT)
def _path_ones(X, i, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
               edge_left, cat_start, cat_bits, has_categories, one):
    """one[j] = whether row i satisfies every edge of element j of path p."""
    for j in range(path_ptr[p + 1] - path_ptr[p]):
        k = path_ptr[p] + j
        satisfied = True
        for e in range(elem_ptr[k], elem_ptr[k + 1]):
            went_left = _goes_left_at(X, np.int64(i), np.int64(edge_node[e]), feature,
                                      threshold, default_left, cat_start, cat_bits,
                                      has_categories)
            satisfied = satisfied and went_left == edge_left[e]
        one[j] = satisfied


@njit(inline="always", **_JIT)
def _extend_one(e, degree, z):
    """e *= (z + t) in place (e of ``degree``, room for one more)."""
    e[degree + 1] = e[degree]
    for s in range(degree, 0, -1):
        e[s] = e[s] * z + e[s - 1]
    e[0] = e[0] * z


@njit(inline="always", **_JIT)
def _satisfied_polynomial(one, m, elem_zero, first, e):
    """e = the polynomial of path elements first..first+m-1 whose ``one`` is set
    (numpy_kernels._extend) -> (its degree, the product of the other elements' fractions)."""
    e[0] = 1.0
    degree = 0
    rest = 1.0
    for j in range(m):
        if one[j]:
            _extend_one(e, degree, elem_zero[first + j])
            degree += 1
        else:
            rest = rest * elem_zero[first + j]
    return degree, rest


@njit(inline="always", **_JIT)
def _unwind(e, degree, z, q):
    """q = e / (z + t), from the top down (degree >= 1)."""
    q[degree - 1] = e[degree]
    for s in range(degree - 1, 0, -1):
        q[s - 1] = e[s] - z * q[s]


@njit(inline="always", **_JIT)
def _weighted(a, count, weights):
    total = 0.0
    for s in range(count):
        total = total + weights[s] * a[s]
    return total


@njit(parallel=True, **_JIT)
def _shap_contributions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                        elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                        out, cat_start, cat_bits, has_categories):
    bias = out.shape[2] - 1
    width = shapley_weights.shape[0] + 1
    for i in prange(X.shape[0]):
        one = np.empty(width, dtype=np.bool_)
        e = np.empty(width)
        q = np.empty(width)
        for p in range(path_value.shape[0]):
            first, m, g = path_ptr[p], path_ptr[p + 1] - path_ptr[p], path_group[p]
            _path_ones(X, i, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
                       edge_left, cat_start, cat_bits, has_categories, one)
            degree, rest = _satisfied_polynomial(one, m, elem_zero, first, e)
            c = path_value[p] * rest
            out[i, g, bias] += c * e[0]
            if m == 0:
                continue
            w = shapley_weights[m]
            failed = -(c * _weighted(e, degree + 1, w))
            for j in range(m):
                z = elem_zero[first + j]
                if one[j]:
                    _unwind(e, degree, z, q)
                    out[i, g, elem_feature[first + j]] += (c * (1.0 - z)) * \
                        _weighted(q, degree, w)
                else:
                    out[i, g, elem_feature[first + j]] += failed


_SHAP_CONTRIBUTIONS_CALL = Widened(_shap_contributions, {0: ANY_READ_ONLY})


def shap_contributions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                       elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                       out, cat_start=None, cat_bits=None):
    """See numpy_kernels.shap_contributions."""
    _SHAP_CONTRIBUTIONS_CALL(
        X, feature, threshold, default_left, path_ptr, path_value, path_group, elem_ptr,
        elem_feature, elem_zero, edge_node, edge_left, shapley_weights, out,
        *_category_arrays(cat_start, cat_bits))
    return out


@njit(parallel=True, **_JIT)
def _shap_interactions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                       elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                       out, cat_start, cat_bits, has_categories):
    width = shapley_weights.shape[0] + 1
    for r in prange(X.shape[0]):
        one = np.empty(width, dtype=np.bool_)
        e = np.empty(width)
        e_i = np.empty(width)
        q = np.empty(width)
        for p in range(path_value.shape[0]):
            first, m, g = path_ptr[p], path_ptr[p + 1] - path_ptr[p], path_group[p]
            if m < 2:
                continue
            _path_ones(X, r, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
                       edge_left, cat_start, cat_bits, has_categories, one)
            degree, _ = _satisfied_polynomial(one, m, elem_zero, first, e)
            w = shapley_weights[m - 1]
            for i in range(m):
                z_i = elem_zero[first + i]
                if one[i]:
                    _unwind(e, degree, z_i, e_i)
                    degree_i = degree - 1
                else:
                    e_i[: degree + 1] = e[: degree + 1]
                    degree_i = degree
                rest = 1.0
                for j in range(m):
                    if j != i and not one[j]:
                        rest = rest * elem_zero[first + j]
                c = path_value[p] * rest
                scale = (np.float64(one[i]) - z_i) * 0.5
                failed = -(c * _weighted(e_i, degree_i + 1, w))
                for j in range(m):
                    if j == i:
                        continue
                    z = elem_zero[first + j]
                    if one[j]:
                        _unwind(e_i, degree_i, z, q)
                        value = (c * (1.0 - z)) * _weighted(q, degree_i, w)
                    else:
                        value = failed
                    out[r, g, elem_feature[first + i], elem_feature[first + j]] += scale * value


_SHAP_INTERACTIONS_CALL = Widened(_shap_interactions, {0: ANY_READ_ONLY})


def shap_interactions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                      elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                      out, cat_start=None, cat_bits=None):
    """See numpy_kernels.shap_interactions."""
    _SHAP_INTERACTIONS_CALL(
        X, feature, threshold, default_left, path_ptr, path_value, path_group, elem_ptr,
        elem_feature, elem_zero, edge_node, edge_left, shapley_weights, out,
        *_category_arrays(cat_start, cat_bits))
    return out

# ---------------------------------------------------------------------------------------------
# Sparse columns: see the "Sparse columns" section of numpy_kernels for the sparse store and the
# compact histograms (n_nodes, n_slots, 2), feature s at slots bin_offsets[s]..bin_offsets[s+1]-1.

# Row positions per parallel chunk of split_column (enough to amortise a chunk's start).
_MIN_CHUNK = 4096


def _chunks(seg_start, seg_count, n_threads):
    """Each node's segment cut into chunks of consecutive positions, about 4 per thread over all
    nodes: (node, begin, end) int64 arrays, empty segments giving no chunk."""
    return _segment_chunks(np.asarray(seg_start, dtype=np.int64),
                           np.asarray(seg_count, dtype=np.int64), n_threads)


@njit(**_JIT)
def _segment_chunks(start, count, n_threads):
    # _chunks compiled: the whole-tree grower calls it between its kernels
    total = np.int64(0)
    for k in range(count.shape[0]):
        total += count[k]
    size = max(_MIN_CHUNK, -(-total // (4 * n_threads)))
    n_chunks = np.int64(0)
    for k in range(count.shape[0]):
        n_chunks += -(-count[k] // size)
    node = np.empty(n_chunks, dtype=np.int64)
    begin = np.empty(n_chunks, dtype=np.int64)
    end = np.empty(n_chunks, dtype=np.int64)
    c = 0
    for k in range(count.shape[0]):
        stop = start[k] + count[k]
        for b in range(start[k], stop, size):
            node[c] = k
            begin[c] = b
            end[c] = min(b + size, stop)
            c += 1
    return node, begin, end


@njit(parallel=True, **_JIT)
def _bin_entries(values, entry_feature, cut_values, cut_offsets, out):
    for k in prange(values.shape[0]):
        x = values[k]
        if x != x:
            out[k] = 0
            continue
        f = entry_feature[k]
        lo = cut_offsets[f]
        n = cut_offsets[f + 1] - lo
        if n == 0:
            out[k] = 1
            continue
        base = lo  # the branch-free upper bound of _bin_features
        while n > 1:
            half = n >> 1
            base += half if cut_values[base + half] <= x else 0
            n -= half
        out[k] = base - lo + (2 if cut_values[base] <= x else 1)


def bin_entries(values, entry_feature, cut_values, cut_offsets, out):
    """See numpy_kernels.bin_entries. out (nnz,) uint8/uint16, written and returned."""
    _bin_entries(values, entry_feature, cut_values, np.asarray(cut_offsets, dtype=np.int64), out)
    return out


@njit(inline="always", **_JIT)
def _add_slots(acc, indptr, slots, gh, r):
    # One row's gradient pair into the slots of its stored entries, of a (n_slots, 2) histogram.
    # Slots precomputed, in one narrow array: half the bytes a row of 16-bit slots, and no offset
    # lookup (about twice as fast per entry on one-hot data as feature ids and bins).
    g = gh[r, 0]
    h = gh[r, 1]
    for e in range(indptr[r], indptr[r + 1]):
        s = slots[e]
        acc[s, 0] += g
        acc[s, 1] += h


@njit(inline="always", **_JIT)
def _add_slot_rows(acc, indptr, slots, gh, rows, lo, hi):
    # The rows rows[lo:hi] into acc, prefetched in two steps (see cpu_prefetch): a row's start
    # in indptr 2 * PREFETCH_ROWS rows ahead, then its entries' slots and its gradients
    # PREFETCH_ROWS rows ahead (reading the start asked for earlier).
    for p in range(lo, min(hi, lo + 2 * PREFETCH_ROWS)):
        prefetch(indptr, rows[p])
    for p in range(lo, min(hi, lo + PREFETCH_ROWS)):
        prefetch(slots, indptr[rows[p]])
        prefetch(gh, rows[p])
    for p in range(lo, hi):
        if p + 2 * PREFETCH_ROWS < hi:
            prefetch(indptr, rows[p + 2 * PREFETCH_ROWS])
        if p + PREFETCH_ROWS < hi:
            ahead = rows[p + PREFETCH_ROWS]
            prefetch(slots, indptr[ahead])
            prefetch(gh, ahead)
        _add_slots(acc, indptr, slots, gh, rows[p])


@njit(inline="always", **_JIT)
def _add_slot_thread_histograms(into, local):
    # into += every thread's local (n_slots, 2) histogram, the slots spread over the threads
    # (see _add_thread_histograms).
    for s in prange(local.shape[1]):
        for t in range(local.shape[0]):
            into[s, 0] += local[t, s, 0]
            into[s, 1] += local[t, s, 1]


@njit(parallel=True, **_JIT)
def _build_slot_histograms(indptr, slots, gh, row_index, seg_start, seg_count, hist, n_threads):
    n_nodes = seg_start.shape[0]
    if n_nodes >= n_threads:
        # Enough nodes to keep every thread busy: one node per iteration, straight into its own
        # histogram (no two threads share a node).
        for k in prange(n_nodes):
            _add_slot_rows(hist[k], indptr, slots, gh, row_index, seg_start[k],
                           seg_start[k] + seg_count[k])
    else:
        # Few nodes: threads split each node's rows into per-thread histograms, added after.
        local = np.zeros((n_threads, hist.shape[1], 2), dtype=np.int64)
        for k in range(n_nodes):
            count = seg_count[k]
            if count == 0:
                continue
            chunk = (count + n_threads - 1) // n_threads
            for t in prange(n_threads):
                lo = seg_start[k] + t * chunk
                hi = min(seg_start[k] + count, lo + chunk)
                acc = local[t]
                acc[:] = 0
                _add_slot_rows(acc, indptr, slots, gh, row_index, lo, hi)
            _add_slot_thread_histograms(hist[k], local)


def build_sparse_histograms(indptr, entry_feature, entry_bin, bin_offsets, gh, row_index,
                            seg_start, seg_count, n_slots, out=None, slots=None, split_left=None,
                            built_left=None):
    """See numpy_kernels.build_sparse_histograms. Returns (n_nodes, n_slots, 2) int64, common
    bins 0 (or left as they were in ``out``, the histograms added into it). The kernel reads
    each entry's slot: ``slots`` when given (the CPU store keeps them), else computed here from
    entry_feature (int16 or int32) and entry_bin, one pass over the entries."""
    hist = _hist_out(out, (len(seg_start), int(n_slots), 2), "build_sparse_histograms")
    if split_left is not None:
        seg_start, seg_count = numpy_kernels.built_child_segments(seg_start, seg_count,
                                                                  split_left, built_left)
    if not (len(seg_start) and len(entry_bin)):
        return hist
    if slots is None:
        slots = np.asarray(bin_offsets, dtype=np.int64)[entry_feature] + entry_bin
    elif len(slots) != len(entry_bin):
        raise ValueError(f"build_sparse_histograms: {len(slots)} slots for {len(entry_bin)} "
                         f"entries")
    _build_slot_histograms(indptr, slots, gh, row_index, np.asarray(seg_start, dtype=np.int64),
                           np.asarray(seg_count, dtype=np.int64), hist, numba.get_num_threads())
    return hist


@njit(parallel=True, **_JIT)
def _fill_common_bins(hist, totals, bin_offsets, common_bin):
    for k in prange(hist.shape[0]):
        for s in range(common_bin.shape[0]):
            lo = bin_offsets[s]
            sum_g = np.int64(0)
            sum_h = np.int64(0)
            for b in range(lo, bin_offsets[s + 1]):  # the common bin too, as the twin sums it
                sum_g += hist[k, b, 0]
                sum_h += hist[k, b, 1]
            c = lo + common_bin[s]
            hist[k, c, 0] = totals[k, 0] - sum_g
            hist[k, c, 1] = totals[k, 1] - sum_h


def fill_common_bins(hist, totals, bin_offsets, common_bin):
    """See numpy_kernels.fill_common_bins. hist modified in place and returned."""
    _fill_common_bins(hist, np.asarray(totals, dtype=_dtypes.FIXED),
                      np.asarray(bin_offsets, dtype=np.int64),
                      np.asarray(common_bin, dtype=np.int64))
    return hist


@njit(parallel=True, **_JIT)
def _evaluate_sparse_splits(hist, bin_offsets, n_value_bins, feature_allowed, padded_bins,
                            inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight,
                            bounded, max_delta_step, node_bounds, monotone,
                            gain, feature, bin_threshold, default_left, left_sum):
    # The dense split search on the twin's padded histogram (width padded_bins) without
    # building it: feature f's bins past its own width are 0 there, and its thresholds run to
    # min(n_value_bins[f], padded_bins - 1), the last one (every value bin left) with missing
    # values right only: the present-versus-missing split, written as threshold 0, missing
    # left, as the twin writes it. Same float operations, same candidate order.
    # One node a task, the task a function of its own: numba's parallel passes over a large
    # loop body (fusion, and lowering it again into the threads' function) cost about 2.5x a
    # plain compile of the same code, seconds of every fresh machine's first call.
    for k in prange(hist.shape[0]):
        _evaluate_node_splits(np.int64(k), hist, bin_offsets, n_value_bins, feature_allowed,
                              padded_bins, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                              min_child_weight, bounded, max_delta_step, node_bounds, monotone,
                              gain, feature, bin_threshold, default_left, left_sum)


@njit(forceinline=True, **_JIT)
def _evaluate_node_splits(k, hist, bin_offsets, n_value_bins, feature_allowed, padded_bins,
                          inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight,
                          bounded, max_delta_step, node_bounds, monotone,
                          gain, feature, bin_threshold, default_left, left_sum):
    """Node k's best dense split (``_evaluate_sparse_splits``' task), written into its rows of
    gain, feature, bin_threshold, default_left and left_sum."""
    n_features = n_value_bins.shape[0]
    tot_g = np.int64(0)
    tot_h = np.int64(0)
    for b in range(bin_offsets[0], bin_offsets[1]):  # feature 0's bins, as the twin
        tot_g += hist[k, b, 0]
        tot_h += hist[k, b, 1]
    GP = np.float64(tot_g) * inv_scale_g
    HP = np.float64(tot_h) * inv_scale_h
    lower = node_bounds[k, 0] if bounded else 0.0
    upper = node_bounds[k, 1] if bounded else 0.0
    parent = _parent_gain(GP, HP, reg_lambda, reg_alpha, bounded, max_delta_step, lower,
                          upper)
    best = -np.inf
    best_f = -1
    best_t = 0
    best_d = False
    best_lg = np.int64(0)
    best_lh = np.int64(0)
    at_t = np.empty(padded_bins, dtype=np.int64)  # a feature's thresholds worth scoring
    at_g = np.empty(padded_bins, dtype=np.int64)
    at_h = np.empty(padded_bins, dtype=np.int64)
    gain_left = np.empty(padded_bins, dtype=np.float64)
    gain_right = np.empty(padded_bins, dtype=np.float64)
    for f in range(n_features):
        if not feature_allowed[k % feature_allowed.shape[0], f]:  # 1 row, or 1 a node
            continue
        lo = bin_offsets[f]
        width = bin_offsets[f + 1] - lo
        if min_child_weight > 0:
            # All value bins zero (no present value here, the usual case of a one-hot
            # column in a deep node): every candidate leaves one child the whole node and
            # the other a hessian of 0 < min_child_weight, so all are -inf. Skipped.
            empty = True
            for b in range(lo + 1, lo + width):
                if hist[k, b, 0] != 0 or hist[k, b, 1] != 0:
                    empty = False
                    break
            if empty:
                continue
        miss_g = hist[k, lo, 0] if width > 0 else np.int64(0)
        miss_h = hist[k, lo, 1] if width > 0 else np.int64(0)
        no_missing = miss_g == 0 and miss_h == 0
        cum_g = np.int64(0)
        cum_h = np.int64(0)
        n_values = n_value_bins[f]
        sign = monotone[f]
        # Three passes: the thresholds worth scoring with their left sums, every gain (no
        # branch between the divisions without bounds, which the core then overlaps), and
        # the scan in candidate order (threshold, then missing left before right).
        m = 0
        for t in range(1, min(n_values, padded_bins - 1) + 1):
            bin_g = hist[k, lo + t, 0] if t < width else np.int64(0)
            bin_h = hist[k, lo + t, 1] if t < width else np.int64(0)
            if t > 1 and bin_g == 0 and bin_h == 0 and (sign == 0 or t < n_values):
                # An empty bin (most of them in a deep node): t's candidates are t - 1's,
                # evaluated already (or equal to ones that were), and an equal gain never
                # wins. Present versus missing included: t - 1's missing-right candidate
                # is the same split, found first, as the twin keeps it. (Not with a
                # monotone sign: present versus missing is exempt from it, t - 1's
                # candidate is not.)
                continue
            cum_g += bin_g
            cum_h += bin_h
            at_t[m] = t
            at_g[m] = cum_g
            at_h[m] = cum_h
            m += 1
        if bounded:  # the unbounded loop apart: LLVM does not hoist the test
            for j in range(m):
                ordered = 0 if at_t[j] == n_values else sign
                gain_left[j] = _candidate_gain(
                    at_g[j] + miss_g, at_h[j] + miss_h, tot_g, tot_h, parent, inv_scale_g,
                    inv_scale_h, reg_lambda, reg_alpha, min_child_weight, True,
                    max_delta_step, lower, upper, ordered)
                gain_right[j] = _candidate_gain(
                    at_g[j], at_h[j], tot_g, tot_h, parent, inv_scale_g, inv_scale_h,
                    reg_lambda, reg_alpha, min_child_weight, True, max_delta_step, lower,
                    upper, ordered)
        else:
            for j in range(m):
                gain_left[j] = _free_gain(at_g[j] + miss_g, at_h[j] + miss_h, tot_g, tot_h,
                                          parent, inv_scale_g, inv_scale_h, reg_lambda,
                                          reg_alpha, min_child_weight)
                gain_right[j] = _free_gain(at_g[j], at_h[j], tot_g, tot_h, parent,
                                           inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                                           min_child_weight)
        for j in range(m):
            every_value = at_t[j] == n_values  # missing right: present versus missing
            for d in range(2):  # 0: missing goes left, 1: missing goes right
                if d == 0 and (every_value or no_missing):
                    # every value and the missing ones: no split; without missing values
                    # here both directions are one split, kept with missing values right
                    # (XGBoost's default direction where training saw none)
                    continue
                g = gain_left[j] if d == 0 else gain_right[j]
                if g > best:
                    best = g
                    best_f = f
                    best_t = at_t[j]
                    best_d = d == 0
                    best_lg = at_g[j] + miss_g if d == 0 else at_g[j]
                    best_lh = at_h[j] + miss_h if d == 0 else at_h[j]
    if best_f >= 0 and best_t == n_value_bins[best_f]:  # present versus missing
        best_t = 0
        best_d = True
        best_lg = tot_g - best_lg
        best_lh = tot_h - best_lh
    gain[k] = best
    feature[k] = best_f
    bin_threshold[k] = best_t
    default_left[k] = best_d
    left_sum[k, 0] = best_lg
    left_sum[k, 1] = best_lh


@njit(**_JIT)
def _try_categories(hist, n, f, right_g, right_h, tg, th, parent, inv_scale_g, inv_scale_h, lam,
                    reg_alpha, min_child_weight, bounded, max_delta_step, lower, upper,
                    best_gain, j, missing_right, right_sum, sorted_set):
    """Both sides of the missing values for one category set summing to (right_g, right_h);
    True where one beats best_gain[n, j] (then recorded). A sorted set (not one hot) at a node
    without missing values of the feature: missing right alone (the twin's rule)."""
    taken = False
    first = 1 if sorted_set and hist[n, f, 0, 0] == 0 and hist[n, f, 0, 1] == 0 else 0
    for side in range(first, 2):
        rg = right_g + (hist[n, f, 0, 0] if side else 0)
        rh = right_h + (hist[n, f, 0, 1] if side else 0)
        g = _candidate_gain(tg - rg, th - rh, tg, th, parent, inv_scale_g, inv_scale_h, lam,
                            reg_alpha, min_child_weight, bounded, max_delta_step, lower, upper,
                            0)
        if g > best_gain[n, j]:
            best_gain[n, j] = g
            missing_right[n, j] = side == 1
            right_sum[n, j, 0] = rg
            right_sum[n, j, 1] = rh
            taken = True
    return taken


@njit(parallel=True, **_JIT)
def _categorical_splits(hist, total, columns, n_categories, onehot, max_cat_threshold,
                        inv_scale_g, inv_scale_h, lam, reg_alpha, min_child_weight, cat_smooth,
                        bounded, max_delta_step, node_bounds,
                        gain, missing_right, right_sum, size, order, n_sorted):
    # One task per (node, feature), the task a function of its own: 0.51-0.67 of the time of
    # the same code as the parallel loop's body (64 nodes x 4 features of 60 categories, one
    # hot and sorted; the same results), and no longer than it to compile.
    for task in prange(hist.shape[0] * columns.shape[0]):
        _categorical_task(np.int64(task), hist, total, columns, n_categories, onehot,
                          max_cat_threshold, inv_scale_g, inv_scale_h, lam, reg_alpha,
                          min_child_weight, cat_smooth, bounded, max_delta_step, node_bounds,
                          gain, missing_right, right_sum, size, order, n_sorted)


@njit(forceinline=True, **_JIT)
def _categorical_task(task, hist, total, columns, n_categories, onehot, max_cat_threshold,
                      inv_scale_g, inv_scale_h, lam, reg_alpha, min_child_weight, cat_smooth,
                      bounded, max_delta_step, node_bounds,
                      gain, missing_right, right_sum, size, order, n_sorted):
    """``_categorical_splits``' task ``task``: node task // n_features, feature column
    task % n_features; its best category split written into row (node, feature) of gain,
    missing_right, right_sum, size, order and n_sorted."""
    n_features = columns.shape[0]
    n = task // n_features
    j = task % n_features
    f = columns[j]
    K = n_categories[j]
    tg = total[n, 0]
    th = total[n, 1]
    lower = node_bounds[n, 0] if bounded else 0.0
    upper = node_bounds[n, 1] if bounded else 0.0
    parent = _parent_gain(np.float64(tg) * inv_scale_g, np.float64(th) * inv_scale_h, lam,
                          reg_alpha, bounded, max_delta_step, lower, upper)
    if onehot:
        for k in range(K):
            cg = hist[n, f, k + 1, 0]
            ch = hist[n, f, k + 1, 1]
            if (cg != 0 or ch != 0) and _try_categories(
                    hist, n, f, cg, ch, tg, th, parent, inv_scale_g, inv_scale_h, lam,
                    reg_alpha, min_child_weight, bounded, max_delta_step, lower, upper,
                    gain, j, missing_right, right_sum, False):
                size[n, j] = 1
                order[n, j, 0] = k
        return
    eligible = np.empty(K, dtype=np.int64)
    n_eligible = 0
    for k in range(K):
        h = hist[n, f, k + 1, 1]
        H = np.float64(h) * inv_scale_h
        if h != 0 and H > 0 and H >= cat_smooth:
            eligible[n_eligible] = k
            n_eligible += 1
    n_sorted[n, j] = n_eligible
    P = min(K, max_cat_threshold, n_eligible - 1)
    if P <= 0:
        return
    eligible = eligible[:n_eligible]
    key = np.empty(n_eligible, dtype=np.float64)
    for i in range(n_eligible):
        k = eligible[i]
        key[i] = (np.float64(hist[n, f, k + 1, 0]) * inv_scale_g) / \
            (np.float64(hist[n, f, k + 1, 1]) * inv_scale_h + cat_smooth)
    for direction in range(2):
        if direction == 1:
            key = -key
        run = eligible[np.argsort(key, kind="mergesort")]  # stable: ties by category
        right_g = 0
        right_h = 0
        for i in range(P):
            right_g += hist[n, f, run[i] + 1, 0]
            right_h += hist[n, f, run[i] + 1, 1]
            if _try_categories(hist, n, f, right_g, right_h, tg, th, parent, inv_scale_g,
                               inv_scale_h, lam, reg_alpha, min_child_weight, bounded,
                               max_delta_step, lower, upper, gain, j, missing_right,
                               right_sum, True):
                size[n, j] = i + 1
                # element by element: an array copy compiles numba's shape message
                for c in range(order.shape[2]):
                    order[n, j, c] = run[c] if c <= i else -1


def categorical_splits(hist, total, columns, n_categories, onehot, max_cat_threshold,
                       inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight,
                       cat_smooth, cat_l2, bounds=None):
    """See numpy_kernels.categorical_splits (the same six results, bit for bit): one task per
    (node, feature), the eligible categories sorted with a stable sort."""
    n_nodes, n_features = hist.shape[0], len(columns)
    n_categories = np.asarray(n_categories, dtype=np.int64)
    width = categorical_width(onehot, n_categories, max_cat_threshold)
    gain = np.full((n_nodes, n_features), -np.inf)
    missing_right = np.zeros((n_nodes, n_features), dtype=np.bool_)
    right_sum = np.zeros((n_nodes, n_features, 2), dtype=_dtypes.FIXED)
    size = np.zeros((n_nodes, n_features), dtype=np.int32)
    order = np.full((n_nodes, n_features, width), -1, dtype=np.int32)
    n_sorted = np.zeros((n_nodes, n_features), dtype=np.int32)
    if n_nodes and n_features:
        _categorical_splits(hist, np.ascontiguousarray(total, dtype=_dtypes.FIXED),
                            np.asarray(columns, dtype=np.int64), n_categories, bool(onehot),
                            int(max_cat_threshold), float(inv_scale_g), float(inv_scale_h),
                            float(reg_lambda if onehot else reg_lambda + cat_l2),
                            float(reg_alpha), float(min_child_weight), float(cat_smooth),
                            *_bound_args(bounds, n_nodes, None)[:3], gain, missing_right,
                            right_sum, size, order, n_sorted)
    return gain, missing_right, right_sum, size, order, n_sorted


@njit(parallel=True, **_JIT)
def _quantile_tally(keys, groups, weights, has_weights, prefix, shift, local, n_threads):
    n = keys.shape[0]
    chunk = (n + n_threads - 1) // n_threads
    for t in prange(n_threads):
        acc = local[t]
        acc[:] = 0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            key = keys[i]
            g = groups[i]
            if shift < 56 and (key >> np.uint64(shift + 8)) != prefix[g]:
                continue
            acc[g * 256 + np.int64((key >> np.uint64(shift)) & np.uint64(255))] += \
                weights[i] if has_weights else 1


def quantile_tally(keys, groups, weights, prefix, shift, table):
    """See numpy_kernels.quantile_tally (per-thread tables, then their sum: no more threads
    than rows a table's size each, so the tables never outweigh the rows)."""
    if shift not in range(0, 64, 8):
        raise ValueError(f"quantile_tally: shift must be a multiple of 8 in [0, 56], got {shift}")
    n_threads = max(1, min(numba.get_num_threads(), len(keys) // max(table.shape[0], 1)))
    local = np.empty((n_threads, table.shape[0]), dtype=np.int64)
    _quantile_tally(keys, np.asarray(groups, dtype=np.int64),
                    np.zeros(1, np.int64) if weights is None else
                    np.asarray(weights, dtype=np.int64),
                    weights is not None, np.asarray(prefix, dtype=np.uint64), int(shift),
                    local, n_threads)
    table += local.sum(axis=0)
    return table


def evaluate_sparse_splits(hist, bin_offsets, n_value_bins, feature_allowed, inv_scale_g,
                           inv_scale_h, reg_lambda, reg_alpha, min_child_weight, bounds=None,
                           padded_bins=None):
    """See numpy_kernels.evaluate_sparse_splits (the same five results, bit for bit). With no
    sparse feature (S = 0) every node gets no split (gain -inf, feature -1)."""
    n_nodes = hist.shape[0]
    bin_offsets = np.asarray(bin_offsets, dtype=np.int64)
    n_value_bins = np.asarray(n_value_bins, dtype=np.int32)
    check_feature_mask(np.asarray(feature_allowed), n_nodes, len(n_value_bins))
    gain = np.full(n_nodes, -np.inf, dtype=np.float64)
    feature = np.full(n_nodes, -1, dtype=_dtypes.NODE)
    bin_threshold = np.zeros(n_nodes, dtype=np.int32)
    default_left = np.zeros(n_nodes, dtype=np.bool_)
    left_sum = np.zeros((n_nodes, 2), dtype=_dtypes.FIXED)
    if len(n_value_bins) == 0:
        return gain, feature, bin_threshold, default_left, left_sum
    if padded_bins is None:
        padded_bins = padded_width(bin_offsets)  # the twin's padded width
    _evaluate_sparse_splits(hist, bin_offsets, n_value_bins,
                            np.atleast_2d(np.asarray(feature_allowed, dtype=np.bool_)),
                            padded_bins,
                            float(inv_scale_g), float(inv_scale_h), float(reg_lambda),
                            float(reg_alpha), float(min_child_weight),
                            *_bound_args(bounds, n_nodes, len(n_value_bins)), gain, feature,
                            bin_threshold, default_left, left_sum)
    return gain, feature, bin_threshold, default_left, left_sum


@njit(inline="always", **_JIT)
def _lower_bound(keys, lo, hi, key):
    # First position e in [lo, hi) with keys[e] >= key (keys ascending), else hi.
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(parallel=True, **_JIT)
def _split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin, row_index,
                  chunk_node, chunk_begin, chunk_end, dense_feature, sparse_feature, out):
    for c in prange(chunk_node.shape[0]):
        k = chunk_node[c]
        d = dense_feature[k]
        if d >= 0:
            for p in range(chunk_begin[c], chunk_end[c]):
                r = row_index[p]
                out[r] = bins_by_feature[d, r]
        else:
            s = sparse_feature[k]
            common = common_bin[s]
            for p in range(chunk_begin[c], chunk_end[c]):
                r = row_index[p]
                hi = indptr[r + 1]
                e = _lower_bound(entry_feature, indptr[r], hi, s)
                out[r] = entry_bin[e] if e < hi and entry_feature[e] == s else common


@njit(parallel=True, **_JIT)
def _map_sides(bins_by_feature, row_index, chunk_node, chunk_begin, chunk_end, ids, side_map,
               out):
    for c in prange(chunk_node.shape[0]):
        k = chunk_node[c]
        d = ids[k]
        for p in range(chunk_begin[c], chunk_end[c]):
            r = row_index[p]
            out[r] = side_map[k, bins_by_feature[d, r]]


_MAP_SIDES_CALL = Widened(_map_sides, {0: ANY_READ_ONLY})


def map_sides(bins_by_feature, row_index, seg_start, seg_count, ids, side_map, out):
    """See numpy_kernels.map_sides. out written at the listed segments' rows and returned."""
    node, begin, end = _chunks(seg_start, seg_count, numba.get_num_threads())
    if len(node):
        _MAP_SIDES_CALL(bins_by_feature, row_index, node, begin, end,
                        np.asarray(ids, dtype=np.int64), np.ascontiguousarray(side_map, np.uint8),
                        out)
    return out


@njit(parallel=True, **_JIT)
def _mark_rows(row_index, chunk_node, chunk_begin, chunk_end, common, marks, out):
    # each row of the walked nodes: its node in marks, the common bin in out
    for c in prange(chunk_node.shape[0]):
        k = chunk_node[c]
        for p in range(chunk_begin[c], chunk_end[c]):
            r = row_index[p]
            marks[r] = k
            out[r] = common[k]


@njit(parallel=True, **_JIT)
def _walk_columns(walked, col_ptr, col_rows, col_bins, sparse_feature, marks, out):
    # each walked feature's entries: the stored bin of the rows of the nodes split on it
    for i in prange(walked.shape[0]):
        s = walked[i]
        for e in range(col_ptr[s], col_ptr[s + 1]):
            r = col_rows[e]
            k = marks[r]
            if k >= 0 and sparse_feature[k] == s:
                out[r] = col_bins[e]


@njit(parallel=True, **_JIT)
def _unmark_rows(row_index, chunk_begin, chunk_end, marks):
    for c in prange(chunk_begin.shape[0]):
        for p in range(chunk_begin[c], chunk_end[c]):
            marks[row_index[p]] = -1


# A split feature's stored entries are walked (``columns``) rather than every row of its nodes
# searched when it has fewer than this many entries per row of its nodes: a row's binary search
# among its own entries costs about as much as walking this many entries of a column.
_WALK_ENTRIES_PER_ROW = 4


def split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin, row_index,
                 seg_start, seg_count, dense_feature, sparse_feature, out, columns=None):
    """See numpy_kernels.split_column. out written at the listed segments' rows and returned.
    entry_feature int16 or int32, passed as it is (the search compares its ids with an int64
    feature id, positions int64).

    With ``columns`` (``stores.SparseColumns``: the entries indexed by feature, and a row marks
    scratch that holds -1 between calls), a sparse feature whose entries are few next to the rows
    of its nodes is read by walking its entries (the nodes' rows marked first, then the common
    bin overwritten where a row has an entry) instead of one binary search a row: at the root of
    a one-hot CSR, all rows but a few percent hold the common bin."""
    walk_ratio = _WALK_ENTRIES_PER_ROW if columns is not None else 0  # read at each call
    if columns is None:  # stand-ins of the index's types, never read
        columns = _NoColumns(np.zeros(1, np.int64), np.zeros(0, np.int32),
                             np.zeros(0, entry_bin.dtype), np.zeros(0, np.int32))
    _GATHER_SPLIT_COLUMN_CALL(bins_by_feature, indptr, entry_feature, entry_bin,
                              np.asarray(common_bin, dtype=np.int64), row_index,
                              np.asarray(seg_start, dtype=np.int64),
                              np.asarray(seg_count, dtype=np.int64),
                              np.asarray(dense_feature, dtype=np.int64),
                              np.asarray(sparse_feature, dtype=np.int64), out, np.int64(walk_ratio),
                              columns.col_ptr, columns.col_rows, columns.col_bins, columns.marks,
                              numba.get_num_threads())
    return out


class _NoColumns(typing.NamedTuple):
    col_ptr: np.ndarray
    col_rows: np.ndarray
    col_bins: np.ndarray
    marks: np.ndarray


@njit(**_JIT)
def _gather_split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin,
                         row_index, seg_start, seg_count, dense_feature, sparse_feature, out,
                         walk_ratio, col_ptr, col_rows, col_bins, marks, n_threads):
    # split_column compiled (the whole-tree grower calls it between levels): which nodes walk
    # their feature's entries (fewer than walk_ratio entries a row of its nodes; 0: none, no
    # index), then the searched nodes' rows, then the walked ones'. The ratio is an argument,
    # not the module's constant, which numba would freeze into the compiled code.
    n_nodes = seg_start.shape[0]
    walked = np.zeros(n_nodes, dtype=np.bool_)
    walk = walk_ratio > 0
    if walk:
        rows_of = np.zeros(col_ptr.shape[0] - 1, dtype=np.int64)
        for k in range(n_nodes):
            if dense_feature[k] < 0 and seg_count[k] > 0:
                rows_of[sparse_feature[k]] += seg_count[k]
        for k in range(n_nodes):
            if dense_feature[k] < 0 and seg_count[k] > 0:
                s = sparse_feature[k]
                walked[k] = col_ptr[s + 1] - col_ptr[s] < walk_ratio * rows_of[s]
    searched_count = np.where(walked, 0, seg_count)
    node, begin, end = _segment_chunks(seg_start, searched_count, n_threads)
    if node.shape[0]:
        _split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin, row_index,
                      node, begin, end, dense_feature, sparse_feature, out)
    if not walk:
        return
    walked_count = np.where(walked, seg_count, 0)
    node, begin, end = _segment_chunks(seg_start, walked_count, n_threads)
    if not node.shape[0]:
        return
    common = np.empty(n_nodes, dtype=np.int64)
    on_feature = np.zeros(col_ptr.shape[0] - 1, dtype=np.bool_)
    for k in range(n_nodes):
        common[k] = common_bin[max(sparse_feature[k], 0)]
        if walked[k]:
            on_feature[sparse_feature[k]] = True
    _mark_rows(row_index, node, begin, end, common, marks, out)
    _walk_columns(np.flatnonzero(on_feature), col_ptr, col_rows, col_bins, sparse_feature,
                  marks, out)
    _unmark_rows(row_index, begin, end, marks)


_GATHER_SPLIT_COLUMN_CALL = Widened(_gather_split_column, {0: ANY_READ_ONLY})


@njit(parallel=True, **_JIT)
def _predict_margins_csr(indptr, indices, data, feature, threshold, default_left, left, right,
                         value, tree_root, tree_group, out):
    for i in prange(indptr.shape[0] - 1):
        lo = indptr[i]
        hi = indptr[i + 1]
        for t in range(tree_root.shape[0]):
            node = tree_root[t]
            while feature[node] >= 0:
                f = feature[node]
                e = _lower_bound(indices, lo, hi, f)
                x = data[e] if e < hi and indices[e] == f else np.float32(np.nan)  # absent: NaN
                go_left = _value_goes_left(x, threshold, default_left, node)
                node = left[node] + np.int32(1 - go_left)  # right = left + 1: no branch
            out[i, tree_group[t]] += value[node]


def predict_margins_csr(indptr, indices, data, feature, threshold, default_left, left, right,
                        value, tree_root, tree_group, out):
    """See numpy_kernels.predict_margins_csr. out (n_rows, n_groups) float64, updated in place
    and returned."""
    _predict_margins_csr(indptr, indices, data, feature, threshold, default_left, left, right,
                         value, tree_root, tree_group, out)
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation metrics: see the section of numpy_kernels.

@njit(parallel=True, **_JIT)
def _fixed_point_words(values, scale, low_scale, n_threads):
    words = np.zeros((n_threads, 2), dtype=np.int64)
    n = values.shape[0]
    chunk = (n + n_threads - 1) // n_threads
    for t in prange(n_threads):
        high_sum = np.int64(0)
        low_sum = np.int64(0)
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            scaled = np.float64(values[i]) * scale
            high = np.rint(scaled)
            high_sum += np.int64(high)
            low_sum += np.int64(np.rint((scaled - high) * low_scale))
        words[t, 0] = high_sum
        words[t, 1] = low_sum
    # added in a loop: words.sum(axis=0) compiled a parallel reduction (about a second of a
    # fresh machine's first call)
    total = np.zeros(2, dtype=np.int64)
    for t in range(n_threads):
        total[0] += words[t, 0]
        total[1] += words[t, 1]
    return total


_FIXED_POINT_WORDS_CALL = Widened(_fixed_point_words, {0: READ_ONLY})


def fixed_point_words(values, scale, low_scale):
    """See numpy_kernels.fixed_point_words (per-thread integer sums, added: the same words)."""
    return _FIXED_POINT_WORDS_CALL(np.asarray(values), np.float64(scale), np.float64(low_scale),
                                   numba.get_num_threads())


# ---------------------------------------------------------------------------------------------
# Elementwise steps of every evaluation round: the sigmoid, auc's prediction keys and buckets.
# NumPy runs each on one thread; these share the rows between numba's threads with the twin's
# operations in the twin's order. Below this many values NumPy's one thread does (what they save
# there is less than their compile costs a fresh process).
_ELEMENTWISE_PARALLEL_ROWS = 1 << 15


@njit(parallel=True, **_JIT)
def _sigmoid(x, out):
    for i in prange(x.shape[0]):
        out[i] = 1.0 / (1.0 + np.exp(-x[i]))


def _exp_probe() -> np.ndarray:
    """float64 values on which numba's exp is checked against NumPy's: every scale a margin
    takes, both limits (overflow, subnormal results) and the special values."""
    rng = np.random.default_rng(0)
    spread = np.concatenate([rng.standard_normal(1 << 14) * scale
                             for scale in (1e-3, 0.3, 3.0, 30.0, 300.0)])
    return np.concatenate([spread, np.linspace(-750.0, 750.0, 1 << 14),
                           [0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, -745.1, 5e-324]])


@functools.lru_cache(maxsize=None)
def _numpy_exp_is_numbas() -> bool:
    """Whether NumPy's float64 exp gives numba's (the C library's) values on this machine: then
    the sigmoid runs on numba's threads. Where NumPy has its own exp (x86's AVX-512 dispatch)
    or numba another (Intel's SVML), the sigmoid stays NumPy's: the same values everywhere on
    one machine, whichever kernels run."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:
        try:  # NumPy 1.x
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:  # a NumPy without the table: its exp unknown, so NumPy's runs
            return False
    if __cpu_features__.get("AVX512F", False):  # (absent off x86: the probe decides)
        return False
    probe = _exp_probe()
    ours = np.empty_like(probe)
    _sigmoid(probe, ours)
    theirs = numpy_kernels.sigmoid(probe, np.empty_like(probe))
    return bool(np.array_equal(ours.view(np.uint64), theirs.view(np.uint64)))  # NaNs' bits too


def sigmoid(x, out):
    """See numpy_kernels.sigmoid (the rows on numba's threads where the exp is NumPy's)."""
    x = np.asarray(x, dtype=np.float64)
    check_column_out(x, out, "sigmoid")
    if x.shape[0] < _ELEMENTWISE_PARALLEL_ROWS or not _numpy_exp_is_numbas():
        return numpy_kernels.sigmoid(x, out)
    _sigmoid(x, out)
    return out


# ---------------------------------------------------------------------------------------------
# Training's gradients of binary:logistic and multi:softprob: NumPy made them in about ten
# passes over the rows (digits, 1,797 x 10 classes: 0.76 ms a round, a sixth of the training),
# these in one pass on numba's threads, the twin's operations in the twin's order.
_MIN_HESSIAN = _dtypes.MIN_HESSIAN
_PAIRWISE_BLOCK = 128  # NumPy's pairwise sums add up to this many values with eight partials


@njit(parallel=True, **_JIT)
def _logistic_gradients(p, label, weight, weighted, grad, hess):
    for i in prange(p.shape[0]):
        q = p[i]
        h = (1.0 - q) * q
        if h < _MIN_HESSIAN:  # np.maximum: NaN stays NaN
            h = _MIN_HESSIAN
        g = q - label[i]
        if weighted:
            g = g * weight[i]
            h = h * weight[i]
        grad[i] = np.float32(g)
        hess[i] = np.float32(h)


_LOGISTIC_GRADIENTS_CALL = Widened(_logistic_gradients, {1: READ_ONLY, 2: READ_ONLY})


def logistic_gradients(margin, label, weight):
    """See numpy_kernels.logistic_gradients (``sigmoid``'s p, then the rest in one pass on
    numba's threads; below ``_ELEMENTWISE_PARALLEL_ROWS`` rows the twin)."""
    check_loss_arguments(margin, label, weight, 1, "logistic_gradients")
    margin = np.asarray(margin, dtype=np.float64)
    n = margin.shape[0]
    if n < _ELEMENTWISE_PARALLEL_ROWS:
        return numpy_kernels.logistic_gradients(margin, label, weight)
    p = sigmoid(margin, np.empty(n, dtype=np.float64))
    grad = np.empty(n, dtype=_dtypes.GRADIENT)
    hess = np.empty(n, dtype=_dtypes.GRADIENT)
    _LOGISTIC_GRADIENTS_CALL(p, np.asarray(label, dtype=np.float64), _weight_column(weight),
                             weight is not None, grad, hess)
    return grad, hess


def _weight_column(weight):
    """Row weights as the kernels take them: float64, or one unread value without weights."""
    return np.zeros(1) if weight is None else np.asarray(weight, dtype=np.float64)


@njit(forceinline=True, **_JIT)
def _numpy_row_sum(e, k):
    """e[:k]'s sum in NumPy's order for k <= _PAIRWISE_BLOCK (its pairwise sum: fewer than
    eight values one after another, else eight partial sums added as a tree, then the rest)."""
    if k < 8:
        total = 0.0
        for c in range(k):
            total += e[c]
        return total
    r0, r1, r2, r3, r4, r5, r6, r7 = e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]
    c = 8
    while c < k - k % 8:
        r0 += e[c]
        r1 += e[c + 1]
        r2 += e[c + 2]
        r3 += e[c + 3]
        r4 += e[c + 4]
        r5 += e[c + 5]
        r6 += e[c + 6]
        r7 += e[c + 7]
        c += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while c < k:
        total += e[c]
        c += 1
    return total


@njit(forceinline=True, **_JIT)
def _softmax_rows(margin, label, weight, weighted, grad, hess, a, b):
    """Rows a..b of ``_softmax_gradients``."""
    k = margin.shape[1]
    e = np.empty(k, dtype=np.float64)
    for i in range(a, b):
        largest = margin[i, 0]
        for c in range(1, k):
            v = margin[i, c]
            if v > largest or v != v:  # the row's max; a NaN propagates (NumPy's)
                largest = v
        for c in range(k):
            e[c] = np.exp(margin[i, c] - largest)
        total = _numpy_row_sum(e, k)
        for c in range(k):
            q = e[c] / total
            h = 2.0 * q * (1.0 - q)
            if h < _MIN_HESSIAN:
                h = _MIN_HESSIAN
            g = q - (1.0 if label[i] == c else 0.0)
            if weighted:
                g = g * weight[i]
                h = h * weight[i]
            grad[i, c] = np.float32(g)
            hess[i, c] = np.float32(h)


@njit(parallel=True, **_JIT)
def _softmax_gradients(margin, label, weight, weighted, grad, hess, n_chunks):
    n = margin.shape[0]
    chunk = (n + n_chunks - 1) // n_chunks
    for t in prange(n_chunks):
        a = np.int64(t) * chunk
        _softmax_rows(margin, label, weight, weighted, grad, hess, a, min(n, a + chunk))


_SOFTMAX_GRADIENTS_CALL = Widened(_softmax_gradients, {1: READ_ONLY, 2: READ_ONLY})


@functools.lru_cache(maxsize=None)
def _softmax_is_numpys(k: int) -> bool:
    """Whether ``_softmax_gradients`` gives the twin's values for k classes on this machine:
    NumPy's exp is numba's, k is within one pairwise block, and a probe of rows of every scale
    (weighted, labels of every class) agrees bit for bit (NumPy's row sum in another order
    would fail it: the twin runs then)."""
    if not 1 <= k <= _PAIRWISE_BLOCK or not _numpy_exp_is_numbas():
        return False
    rng = np.random.default_rng(k)
    rows = 512
    margin = rng.standard_normal((rows, k)) * rng.choice([1e-3, 1.0, 10.0, 300.0], (rows, 1))
    label = rng.integers(0, k, rows).astype(np.float64)
    weight = rng.random(rows) * 3.0
    for w in (None, weight):
        ours = _run_softmax_gradients(margin, label, w)
        theirs = numpy_kernels.softmax_gradients(margin, label, w)
        if not all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(ours, theirs)):
            return False
    return True


def _run_softmax_gradients(margin, label, weight):
    grad = np.empty(margin.shape, dtype=_dtypes.GRADIENT)
    hess = np.empty(margin.shape, dtype=_dtypes.GRADIENT)
    n_chunks = max(1, min(numba.get_num_threads(), margin.shape[0] // 64))
    _SOFTMAX_GRADIENTS_CALL(margin, np.asarray(label, dtype=np.float64), _weight_column(weight),
                            weight is not None, grad, hess, n_chunks)
    return grad, hess


def softmax_gradients(margin, label, weight):
    """See numpy_kernels.softmax_gradients (each row in one pass, rows on numba's threads,
    at any size: NumPy's small operations were the cost on small data) where
    ``_softmax_is_numpys``; else the twin."""
    check_loss_arguments(margin, label, weight, 2, "softmax_gradients")
    margin = np.ascontiguousarray(margin, dtype=np.float64)
    if margin.shape[0] == 0 or not _softmax_is_numpys(margin.shape[1]):
        return numpy_kernels.softmax_gradients(margin, label, weight)
    return _run_softmax_gradients(margin, label, weight)


_ABS_BITS, _INF_BITS = np.uint32(0x7FFFFFFF), np.uint32(0x7F800000)


@njit(parallel=True, **_JIT)
def _infinities_in_chunks(bits, n_chunks):
    # each chunk's values all read, branch-free (LLVM vectorises it), not a stop at the first
    n = bits.shape[0]
    found = np.zeros(n_chunks, dtype=np.int64)
    for c in prange(n_chunks):
        seen = np.uint32(0)
        for i in range(n * c // n_chunks, n * (c + 1) // n_chunks):
            seen |= np.uint32((bits[i] & _ABS_BITS) == _INF_BITS)
        found[c] = seen
    return found.sum()


def any_infinite(X) -> bool:
    """See numpy_kernels.any_infinite (a C-ordered matrix's bits read in chunks on numba's
    threads: NumPy's isinf and any run on one thread, 0.15 s of a 10M x 28 training's
    quantization on the GPU's host; other layouts, and fewer than
    ``_ELEMENTWISE_PARALLEL_ROWS`` rows: the twin)."""
    if X.ndim != 2 or X.dtype != np.float32 or not X.flags.c_contiguous or \
            X.shape[0] < _ELEMENTWISE_PARALLEL_ROWS:
        return numpy_kernels.any_infinite(X)
    return bool(_infinities_in_chunks(X.reshape(-1).view(np.uint32),
                                max(1, numba.get_num_threads() * 4)))


# ---------------------------------------------------------------------------------------------
# The quantile sketch's tallies of a dense block: NumPy made each in some ten passes over the
# block on one thread (keys, buckets, masks, gathers, a float64 bincount; the three passes over
# 1M x 28 took 1.6 s), these in one pass on numba's threads. Threads take whole features (each
# owns its features' table entries and slots: no two write one entry), every row's values of
# their features in row order; the sums are integers, so they do not depend on the order.
_BUCKET_SHIFT = 32 - BUCKET_BITS
_SUB_SHIFT = 32 - BUCKET_BITS - SUB_BITS
_SUB_MASK = N_SUB - 1


@njit(forceinline=True, **_JIT)
def _sketch_key(bits):
    """``common.ordered_keys``' key of a float32's bit pattern (an int64 in [0, 2**32)), -1
    for NaN."""
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return np.int64(-1)
    if bits == 0x80000000:  # -0.0 is +0.0
        bits = np.int64(0)
    # without a branch on the sign (half of the values of a symmetric feature): flip every
    # bit of a negative, only the sign bit of the others
    return bits ^ (0x80000000 | ((bits >> 31) * 0x7FFFFFFF))


@njit(parallel=True, **_JIT)
def _sketch_counts(bits, weight, weighted, slot_of, by_slot, table):
    n_rows, n_features = bits.shape
    for f in prange(n_features):
        for i in range(n_rows):
            key = _sketch_key(np.int64(bits[i, f]))
            if key < 0:
                continue
            w = np.int64(weight[i]) if weighted else np.int64(1)
            bucket = f * N_BUCKETS + (key >> _BUCKET_SHIFT)
            if by_slot:
                s = slot_of[bucket]
                if s >= 0:
                    table[np.int64(s) * N_SUB + ((key >> _SUB_SHIFT) & _SUB_MASK)] += w
            else:
                table[bucket] += w


@njit(parallel=True, **_JIT)
def _sketch_selected(bits, slot_of, wanted, out):
    n_rows, n_features = bits.shape
    for i in prange(n_rows):
        for f in range(n_features):
            key = _sketch_key(np.int64(bits[i, f]))
            if key < 0:
                out[i, f] = False
                continue
            # both sides read without a branch (whether a value's bucket is a candidate is
            # hard to predict); a value without a slot reads slot 0's entry, then drops it
            s = np.int64(slot_of[f * N_BUCKETS + (key >> _BUCKET_SHIFT)])
            out[i, f] = (s >= 0) & wanted[max(s, 0) * N_SUB + ((key >> _SUB_SHIFT) & _SUB_MASK)]


def _dense_sketch_block(values, feature, f0) -> bool:
    """Whether a sketch block is dense with features f0, f0 + 1, ... in its columns (the
    kernels' layout; a CSR's entries take the twin)."""
    return values.ndim == 2 and feature.shape == (1, values.shape[1]) and \
        np.array_equal(feature[0], np.arange(f0, f0 + values.shape[1]))


def sketch_counts(values, feature, f0, weight, slot_of, table):
    """See numpy_kernels.sketch_counts (a dense block in one pass on numba's threads, each
    owning whole features; a CSR's entries: the twin)."""
    check_sketch_arguments(values, feature, weight, slot_of, table, "sketch_counts")
    if not _dense_sketch_block(values, feature, f0):
        return numpy_kernels.sketch_counts(values, feature, f0, weight, slot_of, table)
    _sketch_counts(values.view(np.uint32), _weight_column(None if weight is None else
                                                          weight.reshape(-1)),
                   weight is not None, np.zeros(1, np.int32) if slot_of is None else slot_of,
                   slot_of is not None, table)
    return table


def sketch_selected(values, feature, f0, slot_of, wanted, out):
    """See numpy_kernels.sketch_selected (a dense block in one pass on numba's threads; a
    CSR's entries: the twin)."""
    check_sketch_arguments(values, feature, None, slot_of, None, "sketch_selected",
                           wanted=wanted, out=out)
    if not _dense_sketch_block(values, feature, f0):
        return numpy_kernels.sketch_selected(values, feature, f0, slot_of, wanted, out)
    _sketch_selected(values.view(np.uint32), slot_of, wanted, out)
    return out


_KEYED_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # native; others: the twin


@njit(parallel=True, **_JIT)
def _prediction_keys(values, rounded, rounded_bits, out):
    # rounded_bits: rounded's uint32 view (a scalar's bits cannot be read in numba). Two
    # loops: a parallel loop takes its arrays as not aliasing, so one loop's load of the
    # view could be moved before its store.
    for i in prange(values.shape[0]):
        rounded[i] = np.float32(values[i])
    for i in prange(values.shape[0]):
        b = rounded_bits[i]
        if b == np.uint32(0x80000000):  # -0.0 is +0.0 (on the bits, as common.ordered_keys)
            b = np.uint32(0)
        # negative floats: every bit flipped; others: the sign bit (common.ordered_keys)
        out[i] = np.int64(~b if b >> np.uint32(31) else b | np.uint32(0x80000000))


def prediction_keys(values):
    """See numpy_kernels.prediction_keys."""
    values = np.asarray(values)
    if values.size < _ELEMENTWISE_PARALLEL_ROWS or values.dtype not in _KEYED_FLOATS:
        return numpy_kernels.prediction_keys(values)
    flat = np.ascontiguousarray(values).reshape(-1)
    rounded = np.empty(flat.shape, dtype=np.float32)
    out = np.empty(flat.shape, dtype=np.int64)
    _prediction_keys(flat, rounded, rounded.view(np.uint32), out)
    return out.reshape(values.shape)


@njit(parallel=True, **_JIT)
def _key_buckets(keys, low, span, bits, out):
    for i in prange(keys.shape[0]):
        out[i] = ((keys[i] - low) << bits) // span


def key_buckets(keys, low, span, bits: int):
    """See numpy_kernels.key_buckets."""
    keys = np.asarray(keys, dtype=np.int64)
    low, span = integer_scalar(low, "low"), integer_scalar(span, "span")
    if keys.size < _ELEMENTWISE_PARALLEL_ROWS:
        return numpy_kernels.key_buckets(keys, low, span, bits)
    flat = np.ascontiguousarray(keys).reshape(-1)
    out = np.empty(flat.shape, dtype=np.int64)
    _key_buckets(flat, np.int64(low), np.int64(span), np.int64(bits), out)
    return out.reshape(keys.shape)


# The auc tally and its words are split between threads by bucket range (a thread reads every
# row and keeps those of its range: no table a thread, the dense one is 16 MB) and the words by
# chunks of buckets (each chunk's sums with its own running negative total, then combined in
# chunk order: integer sums, so any split gives the serial kernel's words); auc_bucket_words'
# rows by chunks (a bitmap and a table of occupied buckets a chunk, at most _AUC_MOST_PARTS:
# the tables are combined on one thread, in time and memory of chunks times occupied buckets,
# which on 64 threads cost more than the tally saved). Below these sizes one thread does it all.
_AUC_PARALLEL_ROWS = 1 << 15
_AUC_PARALLEL_BUCKETS = 1 << 16
_AUC_MOST_PARTS = 4


@njit(parallel=True, **_JIT)
def _auc_tally(bucket, label, weight, has_weight, scale, out, n_parts):
    n_buckets = out.shape[1]
    for part in prange(n_parts):
        lo = n_buckets * part // n_parts
        hi = n_buckets * (part + 1) // n_parts
        for i in range(bucket.shape[0]):
            b = bucket[i]
            if b < lo or b >= hi:
                continue
            w = weight[i] * scale if has_weight else scale
            positive = np.int64(np.rint(w * label[i]))
            out[0, b] += positive
            out[1, b] += np.int64(np.rint(w)) - positive


_AUC_TALLY_CALL = Widened(_auc_tally, {1: READ_ONLY, 2: READ_ONLY})


def auc_tally(bucket, label, weight, scale, out):
    """See numpy_kernels.auc_tally."""
    has_weight = weight is not None
    n_parts = numba.get_num_threads() if len(bucket) >= _AUC_PARALLEL_ROWS else 1
    _AUC_TALLY_CALL(np.asarray(bucket, dtype=np.int64), np.asarray(label, dtype=np.float64),
                    np.asarray(weight, dtype=np.float64) if has_weight else np.zeros(1), has_weight,
                    np.float64(scale), out, n_parts)
    return out


@njit(parallel=True, **_JIT)
def _auc_words(tables, out, n_chunks):
    n_tables, _, n_buckets = tables.shape
    # per (table, chunk): the numerator with the chunk's own running negative total, and the
    # chunk's positive and negative totals
    sums = np.zeros((n_tables * n_chunks, 3), dtype=np.int64)
    for job in prange(n_tables * n_chunks):
        k = job // n_chunks
        chunk = job % n_chunks
        below = np.int64(0)
        numerator = np.int64(0)
        positive_total = np.int64(0)
        for j in range(n_buckets * chunk // n_chunks, n_buckets * (chunk + 1) // n_chunks):
            positive = tables[k, 0, j]
            negative = tables[k, 1, j]
            numerator += positive * (2 * below + negative)
            positive_total += positive
            below += negative
        sums[job, 0] = numerator
        sums[job, 1] = positive_total
        sums[job, 2] = below
    for k in range(n_tables):
        below = np.int64(0)
        numerator = np.int64(0)
        positive_total = np.int64(0)
        for chunk in range(n_chunks):
            job = k * n_chunks + chunk
            # the negatives of the chunks before count below each of this chunk's positives
            numerator += sums[job, 0] + 2 * below * sums[job, 1]
            positive_total += sums[job, 1]
            below += sums[job, 2]
        out[k, 0] = numerator
        out[k, 1] = positive_total
        out[k, 2] = below


@njit(**_JIT)
def _popcount(x):
    # set bits of a uint64 (SWAR: pairs, nibbles, bytes, then the bytes summed by a multiply)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


_TALLY_LIMIT = 1 << 31  # the occupied-bucket table's int32 tallies stay below it
_BAD_BUCKET, _TOO_HEAVY = 1, 2  # _auc_bucket_words' refusals (0: done)


@njit(parallel=True, **_JIT)
def _auc_bucket_words(bucket, label, weight, has_weight, scale, n_buckets, out, n_parts):
    # The occupied buckets as a bitmap (n_buckets bits: 128 KB for 2**20, in cache), each
    # bucket's rank among them by a prefix count of the bitmap's words, the rows tallied into a
    # table of the occupied buckets alone, in bucket order: the dense table's nonzero columns,
    # so the same words, without filling and scanning 16 MB a round. The table holds int32
    # tallies: a bucket's tally is at most the rows' total, counted in int64 on the way and
    # refused from 2**31 (then a tally may have wrapped), and half the bytes scattered into
    # made 1M rows 2-3x faster. Threads take chunks of rows, each with its own bitmap and
    # table (combined in a fixed order; integer sums): a thread's tallies are at most the
    # total too.
    n = bucket.shape[0]
    n_words = (n_buckets + 63) >> 6
    bitmaps = np.zeros((n_parts, n_words), dtype=np.uint64)
    bad = np.zeros(n_parts, dtype=np.bool_)
    one = np.uint64(1)
    for p in prange(n_parts):
        for i in range(n * p // n_parts, n * (p + 1) // n_parts):
            b = bucket[i]
            if b < 0 or b >= n_buckets:
                bad[p] = True
                break
            bitmaps[p, b >> 6] |= one << np.uint64(b & 63)
    if bad.any():
        return _BAD_BUCKET
    bits = bitmaps[0]
    for p in range(1, n_parts):
        bits |= bitmaps[p]
    first = np.empty(n_words, dtype=np.int64)  # rank of each word's first occupied bucket
    occupied = 0
    for j in range(n_words):
        first[j] = occupied
        occupied += _popcount(bits[j])
    tables = np.zeros((n_parts, occupied, 2), dtype=np.int32)
    totals = np.zeros(n_parts, dtype=np.int64)
    for p in prange(n_parts):
        total = np.int64(0)
        for i in range(n * p // n_parts, n * (p + 1) // n_parts):
            b = bucket[i]
            below = (one << np.uint64(b & 63)) - one
            r = first[b >> 6] + _popcount(bits[b >> 6] & below)
            w = weight[i] * scale if has_weight else scale
            whole = np.int64(np.rint(w))
            positive = np.int64(np.rint(w * label[i]))
            total += whole
            tables[p, r, 0] += np.int32(positive)
            tables[p, r, 1] += np.int32(whole - positive)
        totals[p] = total
    if totals.sum() >= _TALLY_LIMIT:
        return _TOO_HEAVY
    below_total = np.int64(0)
    numerator = np.int64(0)
    positive_total = np.int64(0)
    for r in range(occupied):
        positive = np.int64(0)
        negative = np.int64(0)
        for p in range(n_parts):
            positive += tables[p, r, 0]
            negative += tables[p, r, 1]
        numerator += positive * (2 * below_total + negative)
        positive_total += positive
        below_total += negative
    out[0] = numerator
    out[1] = positive_total
    out[2] = below_total
    return 0


_AUC_BUCKET_WORDS_CALL = Widened(_auc_bucket_words, {1: READ_ONLY, 2: READ_ONLY})


def auc_bucket_words(bucket, label, weight, scale, n_buckets: int):
    """See numpy_kernels.auc_bucket_words (a bitmap of the occupied buckets and a table of
    those alone; rows split between threads in chunks of at least ``_AUC_PARALLEL_ROWS``, at
    most ``_AUC_MOST_PARTS`` of them)."""
    has_weight = weight is not None
    out = np.empty(3, dtype=np.int64)
    n_parts = max(1, min(numba.get_num_threads(), _AUC_MOST_PARTS,
                         len(bucket) // _AUC_PARALLEL_ROWS))
    # the ids are checked as the bitmap is made, the total as the rows are tallied (no pass
    # of their own)
    refused = _AUC_BUCKET_WORDS_CALL(np.asarray(bucket, dtype=np.int64),
                                     np.asarray(label, dtype=np.float64),
                                     np.asarray(weight, dtype=np.float64) if has_weight
                                     else np.zeros(1), has_weight, np.float64(scale),
                                     int(n_buckets), out, n_parts)
    if refused == _BAD_BUCKET:
        raise ValueError(f"auc_bucket_words: bucket ids must lie in [0, {n_buckets})")
    if refused == _TOO_HEAVY:
        raise ValueError(f"auc_bucket_words: {len(bucket)} rows of scale {scale:g} may tally "
                         f"2**31 or more (int32 tallies); choose a smaller scale")
    return out


def auc_words(table):
    """See numpy_kernels.auc_words (one pass over each table instead of NumPy's six)."""
    table = np.asarray(table, dtype=np.int64)
    tables = np.ascontiguousarray(table.reshape(-1, 2, table.shape[-1]))
    out = np.empty((tables.shape[0], 3), dtype=np.int64)
    n_chunks = numba.get_num_threads() if tables.shape[2] >= _AUC_PARALLEL_BUCKETS else 1
    _auc_words(tables, out, n_chunks)
    return out.reshape(table.shape[:-2] + (3,))


@njit(parallel=True, **_JIT)
def _log_gamma(values, out):
    for i in prange(values.shape[0]):
        out[i] = math.lgamma(values[i])


def log_gamma(values):
    """See numpy_kernels.log_gamma (numba's lgamma: equal to a few ulps)."""
    values = np.asarray(values, dtype=np.float64)
    out = np.empty(len(values), dtype=np.float64)
    _log_gamma(values, out)
    return out


# The segment sort is a least-significant-digit radix sort of 11-bit digits (three passes over a
# segment, a pass skipped where every key shares its digit): stable, so weights keep the order of
# equal keys as the twin's, and 19x faster than numba's quicksort on 28 segments of 100K keys
# (4 against 78 ms on two cores; a stable merge argsort for weights was slower still). Segments
# of at most _SMALL_SEGMENT keys (ranking's queries) take an insertion sort, with no scratch.
_DIGIT_BITS = 11
_SMALL_SEGMENT = 32


@njit(inline="always", **_JIT)
def _insertion_sort(keys, weights, weighted, lo, hi):
    for i in range(lo + 1, hi):
        key = keys[i]
        weight = weights[i] if weighted else 0.0
        j = i - 1
        while j >= lo and keys[j] > key:
            keys[j + 1] = keys[j]
            if weighted:
                weights[j + 1] = weights[j]
            j -= 1
        keys[j + 1] = key
        if weighted:
            weights[j + 1] = weight


@njit(**_JIT)
def _digit_counts(keys):
    # (3, 2**_DIGIT_BITS) int64: how many keys (in [0, 2**32)) have each value of each digit
    mask = (1 << _DIGIT_BITS) - 1
    starts = np.zeros((3, 1 << _DIGIT_BITS), np.int64)
    for i in range(keys.shape[0]):
        key = keys[i]
        starts[0, key & mask] += 1
        starts[1, (key >> _DIGIT_BITS) & mask] += 1
        starts[2, key >> (2 * _DIGIT_BITS)] += 1
    return starts


@njit(**_JIT)
def _digit_places(starts, digit, first_value, n):
    # digit's counts turned into each value's first place (in place); False, and nothing
    # changed, when every one of the n keys has the first key's value there (no pass needed)
    if starts[digit, first_value] == n:
        return False
    total = 0
    for b in range(starts.shape[1]):
        count = starts[digit, b]
        starts[digit, b] = total
        total += count
    return True


@njit(**_JIT)
def _radix_sort(keys, weights, weighted):
    # keys: (n,) uint32, n > 0; weights: (n,) float64 if weighted (else unused)
    n = keys.shape[0]
    mask = (1 << _DIGIT_BITS) - 1
    starts = _digit_counts(keys)
    source_keys, dest_keys = keys, np.empty_like(keys)
    source_weights = weights
    dest_weights = np.empty_like(weights) if weighted else weights
    moved = False
    for digit in range(3):
        shift = digit * _DIGIT_BITS
        if not _digit_places(starts, digit, (keys[0] >> shift) & mask, n):
            continue  # one value of this digit: the pass would not move a key
        for i in range(n):
            key = source_keys[i]
            b = (key >> shift) & mask
            place = starts[digit, b]
            starts[digit, b] = place + 1
            dest_keys[place] = key
            if weighted:
                dest_weights[place] = source_weights[i]
        source_keys, dest_keys = dest_keys, source_keys
        source_weights, dest_weights = dest_weights, source_weights
        moved = not moved
    if moved:
        # element by element: an array assignment would compile numba's shape mismatch
        # message (string formatting: about a second of a fresh machine's first call)
        for i in range(n):
            keys[i] = source_keys[i]
            if weighted:
                weights[i] = source_weights[i]


@njit(**_JIT)
def _occupied_keys(keys, entries, position):
    # An LSD radix sort of the rows by key (three 11-bit digits of keys below 2**32; a digit
    # every key shares is skipped), then the distinct keys ranked in one pass: what the twin's
    # comparison sort and scans give (equal keys get one entry whatever their order), without
    # the sort's n log n (np.argsort of 10,000 keys took half of a small set's evaluation).
    n = keys.shape[0]
    mask = (1 << _DIGIT_BITS) - 1
    for i in range(n):
        if keys[i] < 0 or keys[i] >= (1 << (3 * _DIGIT_BITS - 1)):
            return False
    starts = _digit_counts(keys)
    order = np.arange(n)
    spare = np.empty(n, np.int64)
    for digit in range(3):
        shift = digit * _DIGIT_BITS
        if not _digit_places(starts, digit, (keys[0] >> shift) & mask, n):
            continue
        for i in range(n):
            row = order[i]
            b = (keys[row] >> shift) & mask
            place = starts[digit, b]
            starts[digit, b] = place + 1
            spare[place] = row
        order, spare = spare, order
    rank = -1
    for i in range(n):
        row = order[i]
        if rank < 0 or keys[row] != entries[rank]:
            rank += 1
            entries[rank] = keys[row]
        position[row] = rank
    for r in range(rank + 1, n):
        entries[r] = -1
    return True


def occupied_keys(keys):
    """See numpy_kernels.occupied_keys (a radix sort of the rows by key)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    entries = np.empty(len(keys), dtype=np.int64)
    position = np.empty(len(keys), dtype=np.int64)
    if len(keys) and not _occupied_keys(keys, entries, position):
        raise ValueError("occupied_keys: keys must lie in [0, 2**32)")
    return entries, position


@njit(parallel=True, **_JIT)
def _sort_segments(ptr, keys, weights, weighted):
    # the loop's body a function of its own: see _partition_and_histogram
    for s in prange(ptr.shape[0] - 1):
        _sort_segment(keys, weights, weighted, ptr[s], ptr[s + 1])


@njit(forceinline=True, **_JIT)
def _sort_segment(keys, weights, weighted, lo, hi):
    """keys[lo:hi] sorted in place, stably (and their weights with them when weighted)."""
    if hi - lo <= _SMALL_SEGMENT:
        _insertion_sort(keys, weights, weighted, lo, hi)
    else:
        _radix_sort(keys[lo:hi], weights[lo:hi] if weighted else weights, weighted)


def sort_segments(ptr, keys, weights=None):
    """See numpy_kernels.sort_segments: one thread a segment, a stable radix sort (so the
    weights' order is the twin's too)."""
    ptr = np.asarray(ptr, dtype=np.int64)
    weighted = weights is not None
    _sort_segments(ptr, keys, weights if weighted else np.zeros(0, np.float64), weighted)
    return keys, weights


@njit(parallel=True, **_JIT)
def _segment_sums(values, starts, out):
    for s in prange(len(starts) - 1):
        for c in range(values.shape[1]):
            out[s, c] = 0.0
        for r in range(starts[s], starts[s + 1]):
            for c in range(values.shape[1]):
                out[s, c] += values[r, c]


def segment_sums(values, starts, out):
    """See numpy_kernels.segment_sums: one thread a segment, rows added in order."""
    if len(starts) > 1:
        _segment_sums(np.ascontiguousarray(values, dtype=np.float64),
                      np.asarray(starts, dtype=np.int64), out)
    return out


@njit(parallel=True, **_JIT)
def _pair_order_counts(values, starts, query_of, out):
    # one thread a place (not a query: one long query would be one thread's work)
    for b in prange(values.shape[0]):
        v = values[b]
        finite = np.isfinite(v)
        count = np.int64(0)
        for a in range(starts[query_of[b]], b):
            if values[a] > v:
                count += 2
            elif values[a] == v and finite:
                count += 1
        out[b] = count


def pair_order_counts(values, starts, query_of, out):
    """See numpy_kernels.pair_order_counts: one thread a place."""
    if len(values):
        _pair_order_counts(np.ascontiguousarray(values, dtype=np.float32),
                           np.asarray(starts, dtype=np.int64),
                           np.asarray(query_of, dtype=np.int64), out)
    return out


# the twin's own pair function, compiled: the same operations by construction
_lambda_pair = njit(inline="always", **_JIT)(numpy_kernels._lambda_pair)


@njit(parallel=True, **_JIT)
def _lambda_pairs(y, s, e, gain, discount, inv_ideal, relevant, acc, starts, kind, top_k,
                  score_normalize, own, top):
    for q in prange(len(starts) - 1):
        first, end = starts[q], starts[q + 1]
        for b in range(first, end):
            g = h = p = 0.0
            for a in range(first, min(first + top_k, b)):
                dg, dh, dp = _lambda_pair(y, s, e, gain, discount, inv_ideal, relevant, acc, q,
                                          first, end - 1, kind, score_normalize, a, b)
                g += dg
                h += dh
                p += dp
            own[b, 0], own[b, 1], own[b, 2] = g, h, p
        for i in range(top_k):
            g = h = 0.0
            for b in range(first + i + 1, end):
                dg, dh, _ = _lambda_pair(y, s, e, gain, discount, inv_ideal, relevant, acc, q,
                                         first, end - 1, kind, score_normalize, first + i, b)
                g -= dg
                h += dh
            top[q, i, 0], top[q, i, 1] = g, h


def lambda_pairs(y, s, e, gain, discount, inv_ideal, relevant, acc, starts, query_of, kind,
                 top_k, score_normalize, own, top):
    """See numpy_kernels.lambda_pairs: one thread a query, the twin's operations in its
    order."""
    _lambda_pairs(y, s, e, gain, discount, inv_ideal, relevant, acc,
                  np.asarray(starts, dtype=np.int64), int(kind), int(top_k),
                  bool(score_normalize), own, top)
    return own, top
