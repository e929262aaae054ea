"""A whole depthwise tree grown in one compiled call on the CPU (no Python between levels).

Small data is where the level-by-level grower's host work shows (a tree of sklearn's digits:
0.3 ms in kernels, 1.2 ms in the Python around them). This loop runs the same kernels in the
same order over the same integers, so it grows the same tree, bit for bit, then finishes it
and adds it to the margins; its twin is ``numpy_kernels.grow_whole_tree``.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

from .. import _dtypes
from . import cpu_kernels
from .common import FEATURE_IDS_NOT_CUT, GrownTree, entry_slots, feature_widths, padded_width
from .cpu_kernels import (
    _JIT,
    _NODE_ROWS_APART,
    _NODES_APART,
    _add_leaf_values,
    _add_split_leaf_values,
    _bounded_weight,
    _build_histograms,
    _build_slot_histograms,
    _evaluate_sparse_splits,
    _fill_common_bins,
    _gather_split_column,
    _partition_and_histogram,
    _partition_nodes_apart,
    _sibling_histograms,
)
from .cpu_widen import ANY_READ_ONLY, Widened


def grow_whole_tree(bins, bins_by_feature, gh, row_index, spare_index, n_value_bins, n_bins,
                    feature_allowed, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                    min_child_weight, min_gain, max_delta_step=None, features=None, sparse=None,
                    finish=None):
    """See numpy_kernels.grow_whole_tree (the same ``GrownTree``, bit for bit, and the same
    margins)."""
    n_features = bins.shape[1]
    feature_allowed = np.ascontiguousarray(feature_allowed, dtype=np.bool_)
    if feature_allowed.ndim != 2 or feature_allowed.shape[1] != n_features:
        raise ValueError(f"grow_whole_tree: feature_allowed must be (max_depth, {n_features}) "
                         f"bool, got shape {feature_allowed.shape}")
    features = np.arange(n_features, dtype=np.int64) if features is None else \
        np.asarray(features, dtype=np.int64)
    if finish is not None:  # (the feature ids: in the compiled grower, in microseconds less)
        finish.check_margin(bins.shape[0])
    grown = _GROW_TREE_CALL(
        bins, bins_by_feature, gh, row_index, spare_index,
        np.asarray(n_value_bins, dtype=np.int32), int(n_bins),
        # checked here: the compiled tree clears its threads' histograms by them, unchecked
        feature_widths(n_value_bins, n_features, n_bins), feature_allowed, features,
        None if sparse is None else _sparse_arguments(sparse, feature_allowed.shape[0]),
        float(inv_scale_g), float(inv_scale_h), float(reg_lambda), float(reg_alpha),
        float(min_child_weight), float(min_gain), max_delta_step is not None,
        float(max_delta_step or 0.0), np.zeros(max(n_features, 1), dtype=np.int8),
        _finish_arguments(finish), numba.get_num_threads())
    return GrownTree(*grown[:9]) if finish is None else GrownTree(*grown)


# a tree grown unfinished: arguments never read but for their types (one compiled grower)
_NO_CUTS = (np.zeros(0, dtype=_dtypes.CUT), np.zeros(1, dtype=np.int64))
_NO_MARGIN = np.zeros((1, 1), dtype=_dtypes.MARGIN)


def _finish_arguments(finish) -> tuple:
    """A ``TreeFinish`` (or None) as the compiled grower takes it: one tuple of fixed types
    (``TreeFinish.check_margin`` checked it; the grower checks the feature ids)."""
    if finish is None:
        return (*_NO_CUTS, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, _NO_MARGIN, np.int64(0), False, False)
    margin = finish.margin
    return (np.ascontiguousarray(finish.cut_values, dtype=_dtypes.CUT),
            np.ascontiguousarray(finish.cut_offsets, dtype=np.int64),
            *(float(c) for c in finish.leaf_constants),
            _NO_MARGIN if margin is None else margin, np.int64(finish.group), margin is not None,
            True)


def _sparse_arguments(sparse, max_depth: int) -> tuple:
    """A ``SparseSide`` as the compiled grower takes it: one tuple of fixed types (without a
    column index, stand-ins of its types and slots of the stored slots' dtype)."""
    n_sparse = len(sparse.n_value_bins)
    allowed = np.ascontiguousarray(sparse.feature_allowed, dtype=np.bool_)
    if allowed.shape != (max_depth, n_sparse):
        raise ValueError(f"grow_whole_tree: the sparse side's feature_allowed must be "
                         f"({max_depth}, {n_sparse}) bool, got shape {allowed.shape}")
    offsets = np.asarray(sparse.bin_offsets, dtype=np.int64)
    columns = sparse.columns
    if columns is not None:
        # split_column's walk ratio, read now: an argument, not a constant numba would freeze
        walk = np.int64(cpu_kernels._WALK_ENTRIES_PER_ROW)
        index = (columns.col_ptr, columns.col_rows, columns.col_bins, columns.marks)
        slots = columns.slots
    else:  # stand-ins of the index's types, never read
        walk = np.int64(0)  # nothing walked without the index
        index = (np.zeros(1, np.int64), np.zeros(0, np.int32),
                 np.zeros(0, sparse.entry_bin.dtype), np.zeros(0, np.int32))
        slots = entry_slots(sparse.entry_feature, sparse.entry_bin, offsets)
    return (sparse.indptr, slots, offsets, np.asarray(sparse.n_value_bins, dtype=np.int32),
            np.asarray(sparse.common_bin, dtype=np.int64), allowed,
            np.asarray(sparse.features, dtype=np.int64), sparse.entry_feature, sparse.entry_bin,
            walk, *index, sparse.column,
            padded_width(offsets) if sparse.padded_bins is None else sparse.padded_bins,
            np.zeros(max(n_sparse, 1), dtype=np.int8))


@njit(**_JIT)
def _grow_tree(bins, bins_by_feature, gh, rows_even, rows_odd, n_value_bins, n_bins, widths,
               feature_allowed, dense_ids, sparse, inv_scale_g, inv_scale_h, reg_lambda,
               reg_alpha, min_child_weight, min_gain, bounded, max_delta_step, no_signs,
               finish, n_threads):
    # A level's nodes sit in the level loop's histogram order (the siblings of its parent
    # level's splits, then the built children: the partition adds into the second half and
    # the siblings are subtracted in place); node_id maps them to their tree ids, which are
    # first .. first + n - 1, and the records are written by id. sparse is None (this
    # compiles without its branches: numba prunes them) or _sparse_arguments' tuple; finish
    # _finish_arguments' tuple (the finished arrays, and the margin update where asked).
    n_rows, n_features = bins.shape
    if finish[11]:  # TreeFinish.check's test of the ids, which the finish reads unchecked
        n_cut_features = finish[1].shape[0] - 1
        for f in dense_ids:
            if f < 0 or f >= n_cut_features:
                raise ValueError(FEATURE_IDS_NOT_CUT)
        if sparse is not None:
            for f in sparse[6]:
                if f < 0 or f >= n_cut_features:
                    raise ValueError(FEATURE_IDS_NOT_CUT)
    # the kernels' arguments typed as the level loop passes them (a literal False or 0 would
    # compile a second specialization of each: seconds of the first call)
    not_in_place = n_rows < 0
    max_depth = feature_allowed.shape[0]
    # at most n_rows leaves: a split's children each hold a row (an empty child makes the gain
    # exactly 0, never above min_gain)
    capacity = min((1 << (max_depth + 1)) - 1, 2 * max(n_rows, 1) - 1)
    out_totals = np.empty((capacity, 2), dtype=np.int64)
    out_feature = np.empty(capacity, dtype=np.int32)
    out_threshold = np.empty(capacity, dtype=np.int32)
    out_default_left = np.empty(capacity, dtype=np.bool_)
    out_gain = np.empty(capacity, dtype=np.float64)
    out_left = np.empty(capacity, dtype=np.int64)
    out_depth = np.empty(capacity, dtype=np.int32)
    out_start = np.empty(capacity, dtype=np.int64)
    out_count = np.empty(capacity, dtype=np.int64)
    out_local = np.empty(capacity, dtype=np.int64)  # a split's feature in its store
    last_gathered = False  # the last level's split bins gathered into the sparse column
    width = n_features * n_bins
    offsets = np.arange(n_features + 1) * n_bins  # the dense layout as the compact one
    padded_bins = max(n_bins, 2)
    seg_start = np.zeros(1, dtype=np.int64)
    seg_count = np.full(1, n_rows, dtype=np.int64)
    hist = np.zeros((1, n_features, n_bins, 2), dtype=np.int64)
    if n_features:
        _build_histograms(bins, gh, rows_even, seg_start, seg_count, hist, n_threads, widths)
    totals = np.zeros((1, 2), dtype=np.int64)
    for p in range(n_rows):
        totals[0, 0] += gh[rows_even[p], 0]
        totals[0, 1] += gh[rows_even[p], 1]
    n_slots = 1
    sparse_hist = np.zeros((1, 1, 2), dtype=np.int64)
    if sparse is not None:
        (indptr, slots, bin_offsets, sparse_value_bins, common_bin, sparse_allowed, sparse_ids,
         entry_feature, entry_bin, walk, col_ptr, col_rows, col_bins, marks, column,
         sparse_padded_bins, sparse_no_signs) = sparse
        n_slots = bin_offsets[bin_offsets.shape[0] - 1]
        sparse_hist = np.zeros((1, n_slots, 2), dtype=np.int64)
        _build_slot_histograms(indptr, slots, gh, rows_even, seg_start, seg_count, sparse_hist,
                               n_threads)
        _fill_common_bins(sparse_hist, totals, bin_offsets, common_bin)
    node_id = np.zeros(1, dtype=np.int64)
    first = 0
    n = 1
    for depth in range(max_depth + 1):
        rows = rows_even if depth % 2 == 0 else rows_odd
        dest = rows_odd if depth % 2 == 0 else rows_even
        gain = np.full(n, -np.inf)
        feature = np.full(n, -1, dtype=np.int32)  # in its store
        bin_threshold = np.zeros(n, dtype=np.int32)
        default_left = np.zeros(n, dtype=np.bool_)
        left_sum = np.zeros((n, 2), dtype=np.int64)
        in_sparse = np.zeros(n, dtype=np.bool_)
        feature_id = np.full(n, -1, dtype=np.int64)  # in the caller's numbering
        if depth < max_depth:
            node_bounds = np.empty((n, 2))
            for k in range(n):
                node_bounds[k, 0] = -np.inf
                node_bounds[k, 1] = np.inf
            if n_features:
                _evaluate_sparse_splits(hist.reshape((n, width, 2)), offsets, n_value_bins,
                                        feature_allowed[depth: depth + 1], padded_bins,
                                        inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                                        min_child_weight, bounded, max_delta_step, node_bounds,
                                        no_signs, gain, feature, bin_threshold, default_left,
                                        left_sum)
                for k in range(n):
                    if feature[k] >= 0:
                        feature_id[k] = dense_ids[feature[k]]
            if sparse is not None:
                s_gain = np.full(n, -np.inf)
                s_feature = np.full(n, -1, dtype=np.int32)
                s_threshold = np.zeros(n, dtype=np.int32)
                s_default_left = np.zeros(n, dtype=np.bool_)
                s_left_sum = np.zeros((n, 2), dtype=np.int64)
                _evaluate_sparse_splits(sparse_hist, bin_offsets, sparse_value_bins,
                                        sparse_allowed[depth: depth + 1], sparse_padded_bins,
                                        inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                                        min_child_weight, bounded, max_delta_step, node_bounds,
                                        sparse_no_signs, s_gain, s_feature, s_threshold,
                                        s_default_left, s_left_sum)
                for k in range(n):  # split.find_splits' rule: a tie to the lower id
                    f = s_feature[k]
                    if f < 0:
                        continue
                    f_id = sparse_ids[f]
                    if s_gain[k] > gain[k] or (s_gain[k] == gain[k] and f_id < feature_id[k]):
                        gain[k] = s_gain[k]
                        feature[k] = f
                        feature_id[k] = f_id
                        bin_threshold[k] = s_threshold[k]
                        default_left[k] = s_default_left[k]
                        left_sum[k, 0] = s_left_sum[k, 0]
                        left_sum[k, 1] = s_left_sum[k, 1]
                        in_sparse[k] = True
        at = np.empty(n, dtype=np.int64)  # the level's positions in id order
        for k in range(n):
            at[node_id[k] - first] = k
        split_node = np.empty(n, dtype=np.int64)  # the splits' positions, in id order
        n_split = 0
        for r in range(n):
            k = at[r]
            i = first + r
            out_totals[i, 0] = totals[k, 0]
            out_totals[i, 1] = totals[k, 1]
            out_depth[i] = depth
            out_start[i] = seg_start[k]
            out_count[i] = seg_count[k]
            if depth < max_depth and feature[k] >= 0 and gain[k] > min_gain:
                out_feature[i] = feature_id[k]
                out_threshold[i] = bin_threshold[k]
                out_default_left[i] = default_left[k]
                out_gain[i] = gain[k]
                out_left[i] = first + n + 2 * n_split
                out_local[i] = feature[k]
                split_node[n_split] = k
                n_split += 1
            else:
                out_feature[i] = -1
                out_threshold[i] = 0
                out_default_left[i] = False
                out_gain[i] = 0.0
                out_left[i] = -1
                out_local[i] = -1
        if n_split == 0:
            first += n
            break
        split_node = split_node[:n_split]
        child_totals = np.empty((2 * n_split, 2), dtype=np.int64)
        child_id = np.empty(2 * n_split, dtype=np.int64)
        split_start = np.empty(n_split, dtype=np.int64)
        split_count = np.empty(n_split, dtype=np.int64)
        split_feature = np.empty(n_split, dtype=np.int64)
        split_threshold = np.empty(n_split, dtype=np.int64)
        split_default_left = np.empty(n_split, dtype=np.bool_)
        split_in_sparse = np.empty(n_split, dtype=np.bool_)
        built_left = np.empty(n_split, dtype=np.bool_)
        n_split_rows = np.int64(0)
        any_sparse = False
        for j in range(n_split):
            k = split_node[j]
            left_id = first + n + 2 * j
            right_g = totals[k, 0] - left_sum[k, 0]
            right_h = totals[k, 1] - left_sum[k, 1]
            # the child with the smaller hessian is built, its sibling subtracted
            built_left[j] = left_sum[k, 1] <= right_h
            sibling, built = j, n_split + j
            child_id[built] = left_id if built_left[j] else left_id + 1
            child_id[sibling] = left_id + 1 if built_left[j] else left_id
            left_at = built if built_left[j] else sibling
            right_at = sibling if built_left[j] else built
            child_totals[left_at, 0] = left_sum[k, 0]
            child_totals[left_at, 1] = left_sum[k, 1]
            child_totals[right_at, 0] = right_g
            child_totals[right_at, 1] = right_h
            split_start[j] = seg_start[k]
            split_count[j] = seg_count[k]
            split_feature[j] = feature[k]
            split_threshold[j] = bin_threshold[k]
            split_default_left[j] = default_left[k]
            split_in_sparse[j] = in_sparse[k]
            any_sparse |= in_sparse[k]
            n_split_rows += seg_count[k]
        new_start = np.empty(2 * n_split, dtype=np.int64)
        new_count = np.empty(2 * n_split, dtype=np.int64)
        if depth + 1 == max_depth:  # the children are leaves: their rows are not moved
            new_start[:] = -1
            new_count[:] = 0
            if sparse is not None and any_sparse and finish[10]:
                # the margins read every split row's bin from the column, as a LeafRows'
                # update reads ShardSet.split_matrix's
                _gather_split_column(bins_by_feature, indptr, entry_feature, entry_bin,
                                     common_bin, rows, split_start, split_count,
                                     np.where(split_in_sparse, -1, split_feature),
                                     np.where(split_in_sparse, split_feature, -1), column,
                                     walk, col_ptr, col_rows, col_bins, marks, n_threads)
                last_gathered = True
        else:
            children = np.empty((2 * n_split, n_features, n_bins, 2), dtype=np.int64)
            words = children.reshape(-1)
            for w in range(n_split * width * 2, 2 * n_split * width * 2):
                words[w] = 0  # the built half, which the partition adds into
            left_count = np.zeros(n_split, dtype=np.int64)
            built_hist = children[n_split:]
            source, source_feature = bins_by_feature, split_feature
            if sparse is not None and any_sparse:
                # every split node's bins gathered into the column, as the level loop does
                # (ShardSet.split_source)
                dense_feature = np.where(split_in_sparse, -1, split_feature)
                sparse_feature = np.where(split_in_sparse, split_feature, -1)
                _gather_split_column(bins_by_feature, indptr, entry_feature, entry_bin,
                                     common_bin, rows, split_start, split_count, dense_feature,
                                     sparse_feature, column, walk, col_ptr, col_rows, col_bins,
                                     marks, n_threads)
                source = column.reshape((1, n_rows))
                source_feature = np.zeros(n_split, dtype=np.int64)
            # partition_and_histogram's choice of kernel, as the level loop makes it (one call
            # site each: a callee's code is compiled again into every function calling it)
            if n_split >= _NODES_APART * n_threads and \
                    n_split_rows <= _NODE_ROWS_APART * n_split:
                _partition_nodes_apart(bins, source, gh, rows, split_start, split_count,
                                       source_feature, split_threshold, split_default_left,
                                       built_left, built_hist, left_count, dest)
            else:
                _partition_and_histogram(bins, source, gh, rows, split_start, split_count,
                                         source_feature, split_threshold, split_default_left,
                                         built_left, built_hist, left_count, dest, not_in_place,
                                         n_threads, widths)
            _sibling_histograms(hist.reshape((n, width * 2)), split_node,
                                children.reshape((2 * n_split, width * 2)), np.int64(n_split))
            hist = children
            for j in range(n_split):
                left_start, right_start = split_start[j], split_start[j] + left_count[j]
                left_n, right_n = left_count[j], split_count[j] - left_count[j]
                built, sibling = n_split + j, j
                new_start[built] = left_start if built_left[j] else right_start
                new_count[built] = left_n if built_left[j] else right_n
                new_start[sibling] = right_start if built_left[j] else left_start
                new_count[sibling] = right_n if built_left[j] else left_n
            if sparse is not None:
                # the built children's entries from their moved rows, their common bins from
                # their totals, then each sibling its parent minus the built child
                sparse_children = np.zeros((2 * n_split, n_slots, 2), dtype=np.int64)
                sparse_built = sparse_children[n_split:]
                _build_slot_histograms(indptr, slots, gh, dest, new_start[n_split:],
                                       new_count[n_split:], sparse_built, n_threads)
                _fill_common_bins(sparse_built, child_totals[n_split:], bin_offsets,
                                  common_bin)
                _sibling_histograms(sparse_hist.reshape((n, n_slots * 2)), split_node,
                                    sparse_children.reshape((2 * n_split, n_slots * 2)),
                                    np.int64(n_split))
                sparse_hist = sparse_children
        seg_start, seg_count = new_start, new_count
        totals = child_totals
        node_id = child_id
        first += n
        n = 2 * n_split
    (cut_values, cut_offsets, leaf_g, leaf_h, leaf_lambda, leaf_alpha, learning_rate,
     leaf_max_delta_step, margin, group, add_margin, finished) = finish
    threshold = np.zeros(first, dtype=np.float32)
    value = np.zeros(first, dtype=np.float64)
    cover = np.zeros(first, dtype=np.float64)
    if finished:
        _finish_whole_tree(out_feature[:first], out_threshold[:first], out_totals[:first],
                           np.arange(cut_offsets.shape[0] - 1), cut_values, cut_offsets,
                           leaf_g, leaf_h, leaf_lambda, leaf_alpha, learning_rate,
                           leaf_max_delta_step, np.empty(first, dtype=np.int32), threshold,
                           value, cover)
    if add_margin:
        _add_tree_margins(margin[:, group], rows_even, rows_odd, out_feature[:first],
                          out_threshold[:first], out_default_left[:first], out_left[:first],
                          out_depth[:first], out_start[:first], out_count[:first],
                          out_local[:first], value, max_depth, bins_by_feature, n_threads,
                          last_gathered, sparse)
    return (out_totals[:first], out_feature[:first], out_threshold[:first],
            out_default_left[:first], out_gain[:first], out_left[:first], out_depth[:first],
            out_start[:first], out_count[:first], threshold, value, cover)


# the grower as Python calls it: bins of any layout, read-only (one compile for them all)
_GROW_TREE_CALL = Widened(_grow_tree, {0: ANY_READ_ONLY, 1: ANY_READ_ONLY})


@njit(**_JIT)
def _add_tree_margins(margin, rows_even, rows_odd, feature, bin_threshold, default_left, left,
                      depth, seg_start, seg_count, local, value, max_depth, bins_by_feature,
                      n_threads, last_gathered, sparse):
    # A LeafRows update's additions (grow.whole._leaf_rows): each leaf whose rows were moved
    # adds its value to the rows of its segment (in the row array of its depth's parity); each
    # split of the last level sends its segment's rows to its children by their split bins
    n = feature.shape[0]
    n_leaves = np.zeros(2, dtype=np.int64)
    n_last = 0
    for k in range(n):
        if feature[k] < 0 and seg_start[k] >= 0:
            n_leaves[depth[k] & 1] += 1
        elif feature[k] >= 0 and depth[k] == max_depth - 1:
            n_last += 1
    for parity in range(2):
        starts = np.empty(n_leaves[parity], dtype=np.int64)
        counts = np.empty(n_leaves[parity], dtype=np.int64)
        values = np.empty(n_leaves[parity], dtype=np.float64)
        j = 0
        for k in range(n):
            if feature[k] < 0 and seg_start[k] >= 0 and (depth[k] & 1) == parity:
                starts[j], counts[j], values[j] = seg_start[k], seg_count[k], value[k]
                j += 1
        if j:
            _add_leaf_values(margin, rows_even if parity == 0 else rows_odd, starts, counts,
                             values)
    if n_last == 0:
        return
    starts = np.empty(n_last, dtype=np.int64)
    counts = np.empty(n_last, dtype=np.int64)
    split_row = np.empty(n_last, dtype=np.int64)
    thresholds = np.empty(n_last, dtype=np.int64)
    defaults = np.empty(n_last, dtype=np.bool_)
    left_value = np.empty(n_last, dtype=np.float64)
    right_value = np.empty(n_last, dtype=np.float64)
    j = 0
    for k in range(n):
        if feature[k] >= 0 and depth[k] == max_depth - 1:
            starts[j], counts[j] = seg_start[k], seg_count[k]
            split_row[j] = 0 if last_gathered else local[k]
            thresholds[j], defaults[j] = bin_threshold[k], default_left[k]
            left_value[j], right_value[j] = value[left[k]], value[left[k] + 1]
            j += 1
    rows = rows_even if (max_depth - 1) % 2 == 0 else rows_odd
    if sparse is not None and last_gathered:
        column = sparse[14]
        _add_split_leaf_values(margin, column.reshape((1, column.shape[0])), rows, starts,
                               counts, split_row, thresholds, defaults, left_value,
                               right_value, n_threads)
    else:
        _add_split_leaf_values(margin, bins_by_feature, rows, starts, counts, split_row,
                               thresholds, defaults, left_value, right_value, n_threads)


# the threshold of a present-versus-missing split, a constant numba compiles in
_BELOW_EVERY_VALUE = _dtypes.BELOW_EVERY_VALUE


def finish_whole_tree(feature, bin_threshold, totals, features, cut_values, cut_offsets,
                      inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                      max_delta_step=0.0):
    """See numpy_kernels.finish_whole_tree (the same four arrays, bit for bit), in one
    compiled pass over the nodes (``_grow_tree`` finishes its tree with it; this entry is the
    test's)."""
    n = len(feature)
    out_feature = np.empty(n, dtype=_dtypes.NODE)
    threshold = np.zeros(n, dtype=_dtypes.CUT)
    value = np.empty(n, dtype=_dtypes.MARGIN)
    cover = np.empty(n, dtype=np.float64)
    _finish_whole_tree(np.asarray(feature), np.asarray(bin_threshold),
                       np.ascontiguousarray(totals, dtype=np.int64),
                       np.asarray(features, dtype=np.int64),
                       np.asarray(cut_values, dtype=_dtypes.CUT),
                       np.asarray(cut_offsets, dtype=np.int64), float(inv_scale_g),
                       float(inv_scale_h), float(reg_lambda), float(reg_alpha),
                       float(learning_rate), float(max_delta_step), out_feature, threshold,
                       value, cover)
    return out_feature, threshold, value, cover


@njit(**_JIT)
def _finish_whole_tree(feature, bin_threshold, totals, features, cut_values, cut_offsets,
                       inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                       max_delta_step, out_feature, threshold, value, cover):
    last_cut = cut_values.shape[0] - 1
    for k in range(feature.shape[0]):
        G = np.float64(totals[k, 0]) * inv_scale_g
        H = np.float64(totals[k, 1]) * inv_scale_h
        denominator = H + reg_lambda
        # leaf_weights' operations: the unbounded weight is _bounded_weight's first step
        w = _bounded_weight(G, H, reg_lambda, reg_alpha, max_delta_step, -np.inf, np.inf) \
            if denominator > 0 else 0.0
        value[k] = w * learning_rate
        cover[k] = H
        f = feature[k]
        if f < 0:
            out_feature[k] = -1  # _dtypes.LEAF
            continue
        g = features[f]
        out_feature[k] = g
        t = np.int64(bin_threshold[k])
        if t > 0:
            at = cut_offsets[g] + t - 1
            threshold[k] = cut_values[min(max(at, 0), last_cut)] if last_cut >= 0 else 0.0
        else:
            threshold[k] = np.float32(_BELOW_EVERY_VALUE)
