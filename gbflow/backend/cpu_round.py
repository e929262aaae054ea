"""A boosting round's whole trees in one compiled call on the CPU (``Backend.grow_whole_round``):
each output's tree grown by ``cpu_tree._grow_tree`` after its gradients are quantised, with no
host work between the trees."""
from __future__ import annotations

import dataclasses

import numba
import numpy as np
from numba import njit

from .. import _dtypes
from .common import GrownTree, check_round, feature_widths
from .cpu_kernels import _JIT, _quantise_gradients
from .cpu_tree import _grow_tree, _sparse_arguments
from .cpu_widen import ANY_READ_ONLY, Widened


def grow_whole_round(bins, bins_by_feature, grad, hess, scales, gh, row_index, spare_index,
                     n_value_bins, n_bins, feature_allowed, split_constants, min_gain,
                     max_delta_step, features, cut_values, cut_offsets, leaf_constants, margin,
                     sparse=None):
    """See numpy_kernels.grow_whole_round (the same ``GrownTree``s and margins, bit for bit),
    in one compiled call: the round's trees cost no host work between them."""
    n_features = bins.shape[1]
    features = np.arange(n_features, dtype=np.int64) if features is None else \
        np.asarray(features, dtype=np.int64)
    n_trees = check_round(bins, grad, hess, scales, gh, row_index, spare_index,
                          feature_allowed, split_constants, features, leaf_constants, margin,
                          sparse)
    if sparse is not None:  # the trees' masks in place of one tree's (checked: K of them)
        allowed = np.ascontiguousarray(sparse.feature_allowed, dtype=np.bool_)
        sparse = _sparse_arguments(dataclasses.replace(sparse, feature_allowed=allowed[0]),
                                   allowed.shape[1])
        sparse = sparse[:5] + (allowed,) + sparse[6:]
    arrays = _GROW_ROUND_CALL(
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
        np.ascontiguousarray(leaf_constants, dtype=np.float64), margin, sparse,
        numba.get_num_threads())
    offsets = arrays[0]
    return [GrownTree(*(a[offsets[k]:offsets[k + 1]] for a in arrays[1:]))
            for k in range(n_trees)]


@njit(**_JIT)
def _grow_round(bins, bins_by_feature, grad, hess, scales, gh, rows_even, rows_odd,
                n_value_bins, n_bins, widths, feature_allowed, dense_ids, split_constants,
                min_gain, bounded, max_delta_step, no_signs, cut_values, cut_offsets,
                leaf_constants, margin, sparse, n_threads):
    # Each tree: its column's fixed-point gradients into gh, the root's rows in row order,
    # then _grow_tree with its finish (the margins' column k) and, with a sparse store, the
    # sparse side's tuple with tree k's mask (_sparse_arguments' tuple holds every tree's);
    # the trees' arrays are then copied one after another into the round's (tree k's nodes at
    # offsets[k]).
    # (_grow_tree tests the feature ids against the cuts before anything is written)
    n_rows = bins.shape[0]
    n_trees = grad.shape[1]
    # the finish's flags as computed booleans: literal ones would type a second _grow_tree
    finished = n_rows >= 0
    trees = []
    for k in range(n_trees):
        _quantise_gradients(grad[:, k], hess[:, k], scales[k, 0], scales[k, 1], gh)
        for p in range(n_rows):
            rows_even[p] = p
        leaf = leaf_constants[k]
        finish = (cut_values, cut_offsets, leaf[0], leaf[1], leaf[2], leaf[3], leaf[4], leaf[5],
                  margin, np.int64(k), finished, finished)
        split = split_constants[k]
        # two calls, one pruned away: a function returning None or the tuple would make
        # numba type an optional tuple, which _grow_tree cannot take
        if sparse is None:
            trees.append(_grow_tree(bins, bins_by_feature, gh, rows_even, rows_odd,
                                    n_value_bins, n_bins, widths, feature_allowed[k], dense_ids,
                                    None, split[0], split[1], split[2], split[3], split[4],
                                    min_gain, bounded, max_delta_step, no_signs, finish,
                                    n_threads))
        else:
            side = (sparse[0], sparse[1], sparse[2], sparse[3], sparse[4], sparse[5][k],
                    sparse[6], sparse[7], sparse[8], sparse[9], sparse[10], sparse[11],
                    sparse[12], sparse[13], sparse[14], sparse[15], sparse[16])
            trees.append(_grow_tree(bins, bins_by_feature, gh, rows_even, rows_odd,
                                    n_value_bins, n_bins, widths, feature_allowed[k], dense_ids,
                                    side, split[0], split[1], split[2], split[3], split[4],
                                    min_gain, bounded, max_delta_step, no_signs, finish,
                                    n_threads))
    offsets = np.zeros(n_trees + 1, dtype=np.int64)
    for k in range(n_trees):
        offsets[k + 1] = offsets[k] + trees[k][0].shape[0]
    size = offsets[n_trees]
    totals = np.empty((size, 2), dtype=np.int64)
    feature = np.empty(size, dtype=np.int32)
    bin_threshold = np.empty(size, dtype=np.int32)
    default_left = np.empty(size, dtype=np.bool_)
    gain = np.empty(size, dtype=np.float64)
    left = np.empty(size, dtype=np.int64)
    depth = np.empty(size, dtype=np.int32)
    seg_start = np.empty(size, dtype=np.int64)
    seg_count = np.empty(size, dtype=np.int64)
    threshold = np.empty(size, dtype=np.float32)
    value = np.empty(size, dtype=np.float64)
    cover = np.empty(size, dtype=np.float64)
    for k in range(n_trees):
        tree = trees[k]
        at = offsets[k]
        for i in range(tree[0].shape[0]):
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
    return (offsets, totals, feature, bin_threshold, default_left, gain, left, depth, seg_start,
            seg_count, threshold, value, cover)


# the round as Python calls it: the bins of any layout, read-only (one compile for them all)
_GROW_ROUND_CALL = Widened(_grow_round, {0: ANY_READ_ONLY, 1: ANY_READ_ONLY})
