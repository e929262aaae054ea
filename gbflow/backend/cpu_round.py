"""A boosting round's whole trees in one compiled call on the CPU (``Backend.grow_whole_round``):
each output's tree grown by ``cpu_tree._grow_tree`` after its gradients are quantised, with no
host work between the trees."""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

from .. import _dtypes
from .common import FEATURE_IDS_NOT_CUT, GrownTree, check_round, feature_widths
from .cpu_kernels import _JIT, _quantise_gradients
from .cpu_tree import _grow_tree


def grow_whole_round(bins, bins_by_feature, grad, hess, scales, gh, row_index, spare_index,
                     n_value_bins, n_bins, feature_allowed, split_constants, min_gain,
                     max_delta_step, features, cut_values, cut_offsets, leaf_constants, margin):
    """See numpy_kernels.grow_whole_round (the same ``GrownTree``s and margins, bit for bit),
    in one compiled call: the round's trees cost no host work between them."""
    n_rows, n_features = bins.shape
    n_trees = check_round(grad, hess, scales, gh, feature_allowed, split_constants,
                          leaf_constants, margin, n_features)
    features = np.asarray(features, dtype=np.int64)
    arrays = _grow_round(
        bins, bins_by_feature, np.ascontiguousarray(grad), np.ascontiguousarray(hess),
        np.ascontiguousarray(scales, dtype=np.float64), gh, row_index, spare_index,
        np.asarray(n_value_bins, dtype=np.int32), int(n_bins),
        feature_widths(n_value_bins, n_features, n_bins),
        np.ascontiguousarray(feature_allowed, dtype=np.bool_), features,
        np.ascontiguousarray(split_constants, dtype=np.float64), float(min_gain),
        max_delta_step is not None, float(max_delta_step or 0.0),
        np.zeros(max(n_features, 1), dtype=np.int8),
        np.ascontiguousarray(cut_values, dtype=_dtypes.CUT),
        np.ascontiguousarray(cut_offsets, dtype=np.int64),
        np.ascontiguousarray(leaf_constants, dtype=np.float64), margin, numba.get_num_threads())
    n_nodes, capacity = arrays[0], arrays[1]
    return [GrownTree(*(a[k * capacity: k * capacity + n_nodes[k]] for a in arrays[2:]))
            for k in range(n_trees)]


@njit(**_JIT)
def _grow_round(bins, bins_by_feature, grad, hess, scales, gh, rows_even, rows_odd,
                n_value_bins, n_bins, widths, feature_allowed, dense_ids, split_constants,
                min_gain, bounded, max_delta_step, no_signs, cut_values, cut_offsets,
                leaf_constants, margin, n_threads):
    # Each tree: its column's fixed-point gradients into gh, the root's rows in row order,
    # then _grow_tree with its finish (the margins' column k), its arrays copied into the
    # round's at k * capacity (the most nodes a tree has).
    n_rows, n_features = bins.shape
    n_trees = grad.shape[1]
    for f in dense_ids:  # TreeFinish.check's test of the ids
        if f < 0 or f >= cut_offsets.shape[0] - 1:
            raise ValueError(FEATURE_IDS_NOT_CUT)
    max_depth = feature_allowed.shape[1]
    capacity = min((1 << (max_depth + 1)) - 1, 2 * max(n_rows, 1) - 1)
    size = n_trees * capacity
    n_nodes = np.zeros(n_trees, dtype=np.int64)
    totals = np.zeros((size, 2), dtype=np.int64)
    feature = np.zeros(size, dtype=np.int32)
    bin_threshold = np.zeros(size, dtype=np.int32)
    default_left = np.zeros(size, dtype=np.bool_)
    gain = np.zeros(size, dtype=np.float64)
    left = np.zeros(size, dtype=np.int64)
    depth = np.zeros(size, dtype=np.int32)
    seg_start = np.zeros(size, dtype=np.int64)
    seg_count = np.zeros(size, dtype=np.int64)
    threshold = np.zeros(size, dtype=np.float32)
    value = np.zeros(size, dtype=np.float64)
    cover = np.zeros(size, dtype=np.float64)
    # the finish's flags as computed booleans: literal ones would type a second _grow_tree
    finished = n_rows >= 0
    for k in range(n_trees):
        _quantise_gradients(grad[:, k], hess[:, k], scales[k, 0], scales[k, 1], gh)
        for p in range(n_rows):
            rows_even[p] = p
        leaf = leaf_constants[k]
        finish = (cut_values, cut_offsets, leaf[0], leaf[1], leaf[2], leaf[3], leaf[4], leaf[5],
                  margin, np.int64(k), finished, finished)
        split = split_constants[k]
        tree = _grow_tree(bins, bins_by_feature, gh, rows_even, rows_odd, n_value_bins, n_bins,
                          widths, feature_allowed[k], dense_ids, None, split[0], split[1],
                          split[2], split[3], split[4], min_gain, bounded, max_delta_step,
                          no_signs, finish, n_threads)
        n = tree[0].shape[0]
        n_nodes[k] = n
        at = k * capacity
        for i in range(n):
            totals[at + i, 0] = tree[0][i, 0]
            totals[at + i, 1] = tree[0][i, 1]
            feature[at + i] = tree[1][i]
            bin_threshold[at + i] = tree[2][i]
            default_left[at + i] = tree[3][i]
            gain[at + i] = tree[4][i]
            left[at + i] = tree[5][i]
            depth[at + i] = tree[6][i]
            seg_start[at + i] = tree[7][i]
            seg_count[at + i] = tree[8][i]
            threshold[at + i] = tree[9][i]
            value[at + i] = tree[10][i]
            cover[at + i] = tree[11][i]
    return (n_nodes, capacity, totals, feature, bin_threshold, default_left, gain, left, depth,
            seg_start, seg_count, threshold, value, cover)
