"""Plain NumPy reference twins of every kernel: the definition the fast kernels are tested against.

Each function here has a twin of the same name and signature in ``cpu_kernels`` (numba) and in
``cuda_kernels`` (CUDA through CuPy). These are written for clarity, not speed; the tests compare
the fast versions with them exactly (integers bit for bit, floats by identical IEEE operations in
the same order).

Shared conventions (see ``gbflow._dtypes``):

- ``bins``: (n_rows, n_features) uint8/uint16, bin 0 = missing, value bins 1..n_value_bins.
- ``gh``: (n_rows, 2) int64 fixed-point gradient (column 0) and hessian (column 1).
- ``row_index``: (n_rows,) int32 row positions, grouped so that each tree node owns one contiguous
  segment ``row_index[seg_start[k] : seg_start[k] + seg_count[k]]``.
- ``hist``: (n_nodes, n_features, n_bins, 2) int64 sums of ``gh`` per node, feature and bin.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import _dtypes
from .common import (
    GrownTree,
    TreeFinish,
    better_splits,
    categorical_width,
    check_bounds,
    check_column_out,
    check_dest,
    check_feature_mask,
    check_round,
    check_sibling_shapes,
    check_side_map,
    check_value_bins,
    gradient_out,
    integer_scalar,
    key_buckets_with,
    occupied_keys_with,
    padded_width,
    prediction_keys_with,
    segments_of_work,
    sigmoid_with,
    work_list_rows,
)
from .losses import check_loss_arguments, logistic_gradients_with, softmax_gradients_with
from .sketch_tallies import check_sketch_arguments, sketch_counts_with, sketch_selected_with


def bin_features(X, cut_values, cut_offsets, out):
    """Map raw feature values to bin ids, in place.

    X: (n_rows, n_features) float32, NaN = missing. cut_values: float32 cut points of all features,
    feature f's ascending cuts at ``cut_values[cut_offsets[f]:cut_offsets[f + 1]]``.
    out: (n_rows, n_features) uint8/uint16, written: 0 for NaN, else 1 + (number of cuts <= x).
    Returns ``out``.
    """
    for f in range(X.shape[1]):
        cuts = cut_values[cut_offsets[f] : cut_offsets[f + 1]]
        column = X[:, f]
        ids = 1 + np.searchsorted(cuts, column, side="right")
        ids[np.isnan(column)] = _dtypes.MISSING_BIN
        out[:, f] = ids
    return out


def quantise_gradients(grad, hess, scale_g, scale_h, out=None):
    """Float gradients to fixed point: (n_rows,) float64 grad and hess (any strides, e.g. a
    column of (n_rows, n_groups) arrays) -> (n_rows, 2) int64 [rint(grad * scale_g),
    rint(hess * scale_h)] (``gbflow.fixed_point`` picks the scales): newly allocated, or
    written into ``out`` (a C-contiguous (n_rows, 2) int64 array, e.g. the previous round's,
    so that training reuses one buffer) and returned."""
    gh = gradient_out(np, out, len(grad))
    gh[:, 0] = np.rint(np.asarray(grad, dtype=np.float64) * scale_g)
    gh[:, 1] = np.rint(np.asarray(hess, dtype=np.float64) * scale_h)
    return gh


def build_histograms(bins, gh, row_index, seg_start, seg_count, n_bins, n_value_bins=None):
    """Histogram of the fixed-point gradients of each listed node.

    seg_start, seg_count: (n_nodes,) int64 segments of ``row_index`` (one per node; may be empty).
    n_value_bins: None, or (F,) host ints, feature f's bins being 0..n_value_bins[f] (checked
    here: the CUDA kernels size their shared-memory histograms by it; the sums do not depend
    on it). Returns (n_nodes, n_features, n_bins, 2) int64, newly allocated.
    """
    check_value_bins(bins, n_value_bins, n_bins)
    n_features = bins.shape[1]
    hist = np.zeros((len(seg_start), n_features, n_bins, 2), dtype=_dtypes.FIXED)
    feature_ids = np.arange(n_features)
    for k in range(len(seg_start)):
        rows = row_index[seg_start[k] : seg_start[k] + seg_count[k]]
        node_bins = bins[rows].astype(np.int64)
        for c in range(2):
            np.add.at(hist[k, :, :, c], (feature_ids[None, :], node_bins), gh[rows, c][:, None])
    return hist


def _l1_threshold(G, alpha):
    return np.where(G > alpha, G - alpha, np.where(G < -alpha, G + alpha, 0.0))


def _score(G, H, reg_lambda, reg_alpha):
    t = _l1_threshold(G, reg_alpha)
    return t * t / (H + reg_lambda)


def _bounded_weight(G, H, reg_lambda, reg_alpha, max_delta_step, lower, upper):
    """XGBoost's bounded leaf weight: -T_alpha(G) / (H + lambda), its size capped at
    max_delta_step (0: no cap), then clipped to [lower, upper] (a node's monotone bounds)."""
    w = -_l1_threshold(G, reg_alpha) / (H + reg_lambda)
    if max_delta_step != 0:
        w = np.where(np.abs(w) > max_delta_step, np.copysign(max_delta_step, w), w)
    return np.where(w < lower, lower, np.where(w > upper, upper, w))


def _weight_gain(G, H, reg_lambda, reg_alpha, w):
    """Twice the loss reduction of weight w on sums (G, H) without the L1 term:
    -(2 G w + (H + lambda) w^2), XGBoost's gain of a bounded weight (alpha acts through w's
    threshold alone); _score's value at the unbounded weight when alpha is 0. reg_alpha is
    unused (kept: the gain functions share their arguments)."""
    return -(2.0 * (G * w) + (H + reg_lambda) * (w * w))


def evaluate_splits(hist, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h, reg_lambda,
                    reg_alpha, min_child_weight, bounds=None):
    """Best split of every node of a level, all nodes at once.

    hist: (n_nodes, n_features, n_bins, 2) int64. n_value_bins: (n_features,) int32.
    feature_allowed: (n_features,) bool for every node, or (n_nodes, n_features) bool per node
    (``colsample_bynode``). inv_scale_g/h: fixed point -> float factors.

    Candidates of a feature: thresholds t = 1..n_value_bins-1 (bins 1..t go left) with the
    missing values on either side, and the split of the present values from the missing ones
    (scanned as t = n_value_bins with missing values right: every value bin left). That last
    one is the only split of a feature whose present values are all equal (a one-hot column,
    a CSR column), and is XGBoost's and LightGBM's too. A candidate is valid when both children
    have hessian >= min_child_weight. Candidates are ordered (feature, t, missing-left then
    missing-right); the first of equal gains wins. Where the node has no missing values of the
    chosen feature, the split sends missing values right (default_left False), as XGBoost's.

    bounds: None, or XGBoost's bounded weights (``max_delta_step``, monotone constraints) as
    (max_delta_step, node_bounds, monotone): max_delta_step float >= 0 (0: no cap), node_bounds
    (n_nodes, 2) float64 each node's [lower, upper] weight bounds, monotone None or
    (n_features,) int8. Then every weight is ``_bounded_weight`` and a gain is
    ``_weight_gain`` of the children's bounded weights minus the parent's; a feature with
    monotone +1 (-1) takes only candidates whose left weight is <= (>=) the right one, but
    the present-versus-missing split, which orders no present values (its children keep their
    parent's bounds).

    Returns gain (n_nodes,) float64 (-inf where no valid split), feature (n_nodes,) int32 (-1 where
    none), bin_threshold (n_nodes,) int32, default_left (n_nodes,) bool, left_sum (n_nodes, 2)
    int64.
    A present-versus-missing split comes back as bin_threshold 0 with default_left True (no value
    bin goes left, the missing values do) and left_sum the missing values' sums: the tree then
    stores it with a threshold below every float32 (``Cuts.split_thresholds``), which standard
    JSON can write, where "every value left" would need +inf.
    """
    n_nodes, n_features, n_bins, _ = hist.shape
    total = hist[:, 0, :, :].sum(axis=1)  # every row sits in exactly one bin of feature 0
    missing = hist[:, :, 0, :]
    cum = np.cumsum(hist[:, :, 1:, :], axis=2)  # cum[:, :, t-1] = bins 1..t
    left = np.stack([cum + missing[:, :, None, :], cum], axis=3)  # (N, F, B-1, dir, 2)
    right = total[:, None, None, None, :] - left
    GL = left[..., 0].astype(np.float64) * inv_scale_g
    HL = left[..., 1].astype(np.float64) * inv_scale_h
    GR = right[..., 0].astype(np.float64) * inv_scale_g
    HR = right[..., 1].astype(np.float64) * inv_scale_h
    GP = total[:, 0].astype(np.float64) * inv_scale_g
    HP = total[:, 1].astype(np.float64) * inv_scale_h
    thresholds = np.arange(1, n_bins)[None, :]
    inside = thresholds < n_value_bins[:, None]  # (F, B-1)
    every_value_left = thresholds == n_value_bins[:, None]  # only with missing values right
    check_feature_mask(np.asarray(feature_allowed), n_nodes, n_features)
    allowed = np.broadcast_to(np.asarray(feature_allowed, dtype=bool), (n_nodes, n_features))
    valid = np.stack([inside, inside | every_value_left], axis=2)[None] & \
        allowed[:, :, None, None]
    valid = valid & (HL >= min_child_weight) & (HR >= min_child_weight)
    valid &= (HL + reg_lambda > 0) & (HR + reg_lambda > 0)
    bounds = check_bounds(bounds, n_nodes, n_features)
    node = None if bounds is None else (bounds[0], bounds[1][:, 0], bounds[1][:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        parent = _parent_gain(GP, HP, reg_lambda, reg_alpha, node)
        if node is not None:  # one node's bounds for all its candidates
            node = (node[0], node[1][:, None, None, None], node[2][:, None, None, None])
        children, WL, WR = _split_terms(GL, HL, GR, HR, reg_lambda, reg_alpha, node)
        gain = children - parent[:, None, None, None]
    if bounds is not None and bounds[2] is not None:
        sign = np.asarray(bounds[2])[None, :, None, None]
        ordered = np.where(sign > 0, WL <= WR, np.where(sign < 0, WL >= WR, True))
        valid &= ordered | every_value_left[None, :, :, None]
    gain = np.where(valid, gain, -np.inf).reshape(n_nodes, -1)  # n_features >= 1, n_bins >= 2
    best = np.argmax(gain, axis=1)  # the first of equal gains
    best_gain = gain[np.arange(n_nodes), best]
    f, t, d = np.unravel_index(best, (n_features, n_bins - 1, 2))
    found = best_gain > -np.inf
    left_sum = left.reshape(n_nodes, -1, 2)[np.arange(n_nodes), best]
    # present versus missing: written with the missing values as the left child
    flipped = found & (t + 1 == np.asarray(n_value_bins)[f])
    left_sum = np.where(flipped[:, None], total - left_sum, left_sum)
    # a feature without missing values at the node: both directions are one split, of equal
    # gain (the missing-left candidate, first, won); kept with missing values right, XGBoost's
    # default direction where training saw none
    has_missing = (missing[np.arange(n_nodes), f] != 0).any(axis=1)
    return (
        best_gain.astype(np.float64),
        np.where(found, f, -1).astype(_dtypes.NODE),
        np.where(found & ~flipped, t + 1, 0).astype(np.int32),
        np.where(found, ((d == 0) & has_missing) | flipped, False),
        np.where(found[:, None], left_sum, 0).astype(_dtypes.FIXED),
    )


def partition_rows(bins, row_index, seg_start, seg_count, feature, bin_threshold, default_left,
                   side_map=None):
    """Stable in-place partition of each listed node's segment into (left rows, right rows).

    A row goes left when its bin of ``feature[k]`` is in 1..bin_threshold[k], or is the missing bin
    and ``default_left[k]``; with a ``side_map`` ((n_nodes, n_bins) uint8, ``map_sides``) the bin
    is first replaced by side_map[k, bin]. row_index is modified in place. Returns left_count
    (n_nodes,) int64.
    """
    left_count = np.zeros(len(seg_start), dtype=np.int64)
    for k in range(len(seg_start)):
        lo, hi = seg_start[k], seg_start[k] + seg_count[k]
        rows = row_index[lo:hi].copy()
        b = bins[rows, feature[k]]
        if side_map is not None:
            b = side_map[k, b.astype(np.int64)]
        go_left = np.where(b == _dtypes.MISSING_BIN, bool(default_left[k]), b <= bin_threshold[k])
        row_index[lo:hi] = np.concatenate([rows[go_left], rows[~go_left]])
        left_count[k] = int(go_left.sum())
    return left_count


def partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start, seg_count, feature,
                            bin_threshold, default_left, small_is_left, n_bins, out=None,
                            dest=None, n_value_bins=None, side_map=None):
    """``partition_rows``, then the histograms of one child per node, in one call.

    bins_by_feature: (n_features, n_rows), the same bins stored column by column; the side of a
    row is read from it (one column scanned, instead of one scattered row per row).
    small_is_left: (n_nodes,) bool, which child's histogram to build (the other one is the parent's
    minus it). dest: None, and row_index is partitioned in place; or an (n_rows,) int32 array
    other than row_index, and the listed segments' rows are written to dest, at the same
    positions, in their new order (row_index is only read, dest's other positions are left as
    they are: a grower ping-pongs between two arrays instead of copying the rows back). The
    histograms read the partitioned rows. Returns left_count (n_nodes,) int64 and
    hist (n_nodes, n_features, n_bins, 2) int64 of the chosen children: newly allocated, or
    ``out`` (that shape, int64, C-contiguous, e.g. a view into a level's histograms) with the
    histograms added to what it holds, so several shards can accumulate into one array.
    n_value_bins: as ``build_histograms``'. side_map: None, or (n_nodes, n_bins) uint8: each
    node's rows go by their bins mapped through it (``partition_rows``), as ``map_sides`` would
    write them, without that pass.
    """
    if side_map is not None:
        side_map = check_side_map(side_map, len(seg_start), n_bins)
    seg_start = np.asarray(seg_start, dtype=np.int64)
    seg_count = np.asarray(seg_count, dtype=np.int64)
    if dest is None:
        dest = row_index
    else:
        check_dest(dest, row_index)
        for lo, count in zip(seg_start, seg_count):
            dest[lo : lo + count] = row_index[lo : lo + count]
    left_count = partition_rows(bins_by_feature.T, dest, seg_start, seg_count, feature,
                                bin_threshold, default_left, side_map)
    start = np.where(small_is_left, seg_start, seg_start + left_count)
    count = np.where(small_is_left, left_count, seg_count - left_count)
    hist = build_histograms(bins, gh, dest, start, count, n_bins, n_value_bins)
    return left_count, _add_into(out, hist)


def _add_into(out, hist):
    """``hist``, or ``out`` after adding ``hist`` to it (the kernels' optional ``out``)."""
    if out is None:
        return hist
    if out.shape != hist.shape or out.dtype != hist.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {hist.dtype} array of shape {hist.shape}")
    out += hist
    return out


def sibling_histograms(parent, split_nodes, children, n_valid=None):
    """The siblings' half of the next level's histograms, from the parents and the built half.

    parent: (n_parents, ...) int64 histograms of a level (dense or sparse layout).
    split_nodes: (n_split,) int indices into parent of the nodes that split. children:
    (2 * n_split, ...) int64, the next level in the order [sibling of split 0, ..., sibling of
    split n_split - 1, built child of split 0, ..., built child of split n_split - 1]; its second
    half holds the built children (``partition_and_histogram``). Sets
    ``children[k] = parent[split_nodes[k]] - children[n_split + k]`` (exact integers) in place
    and returns ``children``. n_valid: None, or a (1,) int64 array (on the device: the count a
    level plan wrote there): only k < n_valid[0] are set, the other siblings are left as they
    are (the arrays are sized for every node that could split).
    """
    split_nodes = np.asarray(split_nodes, dtype=np.int64)
    n = len(split_nodes)
    check_sibling_shapes(parent, n, children)
    k = n if n_valid is None else min(n, int(n_valid[0]))
    children[:k] = parent[split_nodes[:k]] - children[n: n + k]
    return children


def add_leaf_values(margin, row_index, seg_start, seg_count, values):
    """margin[row] += values[k] for every row of leaf k's segment, in place.

    margin: (n_rows,) float64 (may be a strided column view). values: (n_leaves,) float64.
    """
    for k in range(len(seg_start)):
        rows = row_index[seg_start[k] : seg_start[k] + seg_count[k]]
        margin[rows] += values[k]


def add_split_leaf_values(margin, bins_by_feature, row_index, seg_start, seg_count, feature,
                          bin_threshold, default_left, left_value, right_value):
    """For nodes split into two leaves: margin[row] += the value of the leaf the row goes to.

    Takes the rows of each node's segment and the split (as in ``partition_rows``) without moving
    any row. bins_by_feature: (n_features, n_rows) bins, column by column.
    left_value/right_value: (n_nodes,) float64. margin (n_rows,) float64, in place.
    """
    for k in range(len(seg_start)):
        rows = row_index[seg_start[k] : seg_start[k] + seg_count[k]]
        b = bins_by_feature[feature[k], rows]
        go_left = np.where(b == _dtypes.MISSING_BIN, bool(default_left[k]), b <= bin_threshold[k])
        margin[rows] += np.where(go_left, left_value[k], right_value[k])


def in_category_set(position, cat_bits, start):
    """Whether category ``position`` (int array, >= 0) is in the sets at ``start`` (int array,
    per position) of ``cat_bits`` (uint32): a set is its word count, then its bit words
    (position p is bit p % 32 of word p // 32); positions beyond its words are not in it."""
    word = position >> 5
    inside = word < cat_bits[start].astype(np.int64)
    bits = cat_bits[np.where(inside, start + 1 + word, start)].astype(np.int64)
    return inside & (((bits >> (position & 31)) & 1) == 1)


def _walk_trees(rows, feature, threshold, default_left, left, right, value, tree_root,
                tree_group, out, goes_left, position_of, cat_start, cat_bits):
    """The walk both predictions share: every tree in tree order, each row from the root to a
    leaf by ``goes_left(row values at each row's node feature, the nodes' thresholds, their
    default_left)`` (vectorised over the rows still inside the tree), its leaf value added.
    Nodes with ``cat_start >= 0`` test categories instead: a row whose ``position_of(value)``
    (-1: missing) is in the node's set goes right, a missing one by default_left."""
    index = np.arange(rows.shape[0])
    for t in range(len(tree_root)):
        node = np.full(rows.shape[0], tree_root[t], dtype=np.int64)
        while True:
            f = feature[node]
            inner = f >= 0
            if not inner.any():
                break
            n = node[inner]
            values = rows[index[inner], f[inner]]
            go_left = goes_left(values, threshold[n], default_left[n])
            if cat_start is not None:
                start = cat_start[n].astype(np.int64)
                on_categories = start >= 0
                position = position_of(values[on_categories])
                chosen = in_category_set(np.maximum(position, 0), cat_bits,
                                         start[on_categories])
                go_left[on_categories] = np.where(position < 0, default_left[n][on_categories],
                                                  ~chosen)
            node[inner] = np.where(go_left, left[n], right[n])
        out[:, tree_group[t]] += value[node]
    return out


def _value_position(x):
    """Raw values of a categorical feature -> category positions, -1 for NaN (or a value that
    is no position)."""
    valid = (x >= 0) & (x < 2**31)
    return np.where(valid, np.where(valid, x, 0).astype(np.int64), -1)


def predict_margins(X, feature, threshold, default_left, left, right, value, tree_root, tree_group,
                    out, cat_start=None, cat_bits=None):
    """Add every tree's leaf value to ``out``, walking the trees on raw values, in tree order.

    X: (n_rows, n_features) float32. Flat node arrays of all trees: feature int32 (-1 = leaf),
    threshold float32 (go left when x < threshold), default_left bool (where x is NaN), left/right
    int32 absolute node ids, value float64. tree_root int64 (n_trees,), tree_group int32 (n_trees,)
    the output column of each tree. out: (n_rows, n_groups) float64, holding the base margin;
    updated in place and returned. cat_start: None (no categorical split), or (n_nodes,) int32,
    on a categorical split the start of its set in cat_bits (uint32; ``in_category_set``), -1
    elsewhere: there x is a category position, and the categories of the set go right.
    """
    return _walk_trees(X, feature, threshold, default_left, left, right, value, tree_root,
                       tree_group, out,
                       lambda x, thr, dl: np.where(np.isnan(x), dl, x < thr), _value_position,
                       cat_start, cat_bits)


def predict_margins_binned(bins, feature, bin_threshold, default_left, left, right, value,
                           tree_root, tree_group, out, cat_start=None, cat_bits=None):
    """``predict_margins`` on rows binned with the model's cuts: a row goes left where its bin
    is 0 (missing) and default_left, or 1 <= bin <= bin_threshold (int32), the rule training
    partitions by; for values binned with the cuts the trees were grown on it agrees with
    ``x < threshold`` exactly (``Cuts.split_thresholds``). On categorical splits, bin b is
    category position b - 1.

    bins: (n_rows, >= n_features) uint8/uint16, any strides. Other arguments and the result as
    ``predict_margins``'; out updated in place and returned."""
    return _walk_trees(bins, feature, bin_threshold, default_left, left, right, value,
                       tree_root, tree_group, out,
                       lambda b, thr, dl: np.where(b == 0, dl, b.astype(np.int64) <= thr),
                       lambda b: b.astype(np.int64) - 1, cat_start, cat_bits)



# ---------------------------------------------------------------------------------------------
# Explaining predictions (``gbflow.explain``): leaves, Saabas contributions, exact TreeSHAP.
# The raw-value kernels take X (n_rows, n_features) float32 and the forest's node arrays as
# ``predict_margins`` does (cat_start/cat_bits: None, or the categorical splits' sets).

def _goes_left_at(X, node, feature, threshold, default_left, cat_start, cat_bits):
    """(n_rows,) bool: whether each row of X goes left at ``node`` (a scalar node id)."""
    x = X[:, feature[node]]
    if cat_start is not None and cat_start[node] >= 0:
        position = _value_position(x)
        start = np.full(len(x), cat_start[node], dtype=np.int64)
        chosen = in_category_set(np.maximum(position, 0), cat_bits, start)
        return np.where(position < 0, bool(default_left[node]), ~chosen)
    return np.where(np.isnan(x), bool(default_left[node]), x < threshold[node])


def _descend(X, root, feature, threshold, default_left, left, right, cat_start, cat_bits,
             on_step=None):
    """(n_rows,) int64 leaf of each row in the tree at ``root``; ``on_step(rows, node, child)``
    is told every step (rows: the positions still inside, each once)."""
    index = np.arange(X.shape[0])
    node = np.full(X.shape[0], root, dtype=np.int64)
    while True:
        inner = feature[node] >= 0
        if not inner.any():
            return node
        go_left = np.zeros(X.shape[0], dtype=bool)
        for n in np.unique(node[inner]):
            at = node == n
            go_left[at] = _goes_left_at(X[at], n, feature, threshold, default_left, cat_start,
                                        cat_bits)
        child = np.where(go_left, left[node], right[node])
        if on_step is not None:
            on_step(index[inner], node[inner], child[inner])
        node = np.where(inner, child, node)


def predict_leaves(X, feature, threshold, default_left, left, right, tree_root, out,
                   cat_start=None, cat_bits=None):
    """The leaf each row reaches in each tree, as the leaf's node id within its tree.

    out: (n_rows, n_trees) int32, written in place and returned."""
    for t in range(len(tree_root)):
        leaf = _descend(X, tree_root[t], feature, threshold, default_left, left, right,
                        cat_start, cat_bits)
        out[:, t] = leaf - tree_root[t]
    return out


def saabas_contributions(X, feature, threshold, default_left, left, right, tree_root,
                         tree_group, node_mean, out, cat_start=None, cat_bits=None):
    """Saabas's approximate contributions: along each row's path, a split's feature gets the
    change of the node mean (``explain.node_means``, float64 (n_nodes,)) from the node to the
    child taken; the last column gets each tree's root mean.

    out: (n_rows, n_groups, n_features + 1) float64, added to in place (tree order, then the
    path from the root down) and returned."""
    bias = out.shape[2] - 1
    for t in range(len(tree_root)):
        g = tree_group[t]

        def step(rows, node, child, g=g):
            out[rows, g, feature[node]] += node_mean[child] - node_mean[node]

        out[:, g, bias] += node_mean[tree_root[t]]
        _descend(X, tree_root[t], feature, threshold, default_left, left, right, cat_start,
                 cat_bits, step)
    return out


def _path_ones(X, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
               edge_left, cat_start, cat_bits):
    """(n_rows, m) bool: whether each row satisfies every edge of each element of path p."""
    elems = range(path_ptr[p], path_ptr[p + 1])
    one = np.ones((X.shape[0], len(elems)), dtype=bool)
    for j, k in enumerate(elems):
        for e in range(elem_ptr[k], elem_ptr[k + 1]):
            went_left = _goes_left_at(X, edge_node[e], feature, threshold, default_left,
                                      cat_start, cat_bits)
            one[:, j] &= went_left == edge_left[e]
    return one


def _extend(one, zero):
    """The polynomial prod(zero[k] + t, k with one[:, k]) per row: (n_rows, m + 1) float64
    coefficients (lowest first; 0 above the row's degree), its degree (n_rows,) int64, and the
    product of zero[k] over the other k (n_rows,). Elements in order, as the fast kernels do."""
    n, m = one.shape
    e = np.zeros((n, m + 1))
    e[:, 0] = 1.0
    degree = np.zeros(n, dtype=np.int64)
    rest = np.ones(n)
    for k in range(m):
        z = zero[k]
        grown = np.empty_like(e)
        grown[:, 0] = e[:, 0] * z
        grown[:, 1:] = e[:, 1:] * z + e[:, :-1]
        e = np.where(one[:, k : k + 1], grown, e)
        rest = np.where(one[:, k], rest, rest * z)
        degree += one[:, k]
    return e, degree, rest


def _unwind(e, degree, z):
    """e divided by (z + t), from the top coefficient down: (n_rows, m + 1), for the rows of
    degree >= 1 (the others' values are not used)."""
    q = np.zeros_like(e)
    for s in range(e.shape[1] - 1, 0, -1):
        q[:, s - 1] = np.where(s == degree, e[:, s],
                               np.where(s < degree, e[:, s] - z * q[:, s], 0.0))
    return q


def _weighted(a, count, weights):
    """(n_rows,) sum over s < count (per row) of weights[s] * a[:, s], s ascending."""
    total = np.zeros(a.shape[0])
    for s in range(a.shape[1]):
        total = np.where(s < count, total + weights[s] * a[:, s], total)
    return total


def shap_contributions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                       elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                       out, cat_start=None, cat_bits=None):
    """Exact TreeSHAP values of every path (``explain.ForestPaths`` arrays), in path order.

    For path p of m elements, per row: e = the polynomial of the elements the row satisfies
    (``_extend``), rest the product of the others' fractions, c = value * rest. The bias column
    gets c * e[0]; a failed element -(c * sum_s w[m, s] e[s]); a satisfied one with fraction z
    (c * (1 - z)) * sum_s w[m, s] q[s], q = e / (z + t). out: (n_rows, n_groups, n_features + 1)
    float64, added to in place and returned (the base margin is not added)."""
    bias = out.shape[2] - 1
    for p in range(len(path_value)):
        elems = np.arange(path_ptr[p], path_ptr[p + 1])
        m, g = len(elems), path_group[p]
        one = _path_ones(X, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
                         edge_left, cat_start, cat_bits)
        e, degree, rest = _extend(one, elem_zero[elems])
        c = path_value[p] * rest
        out[:, g, bias] += c * e[:, 0]
        if m == 0:
            continue
        w = shapley_weights[m]
        failed = -(c * _weighted(e, degree + 1, w))
        for j, k in enumerate(elems):
            z = elem_zero[k]
            satisfied = (c * (1.0 - z)) * _weighted(_unwind(e, degree, z), degree, w)
            out[:, g, elem_feature[k]] += np.where(one[:, j], satisfied, failed)
    return out


def shap_interactions(X, feature, threshold, default_left, path_ptr, path_value, path_group,
                      elem_ptr, elem_feature, elem_zero, edge_node, edge_left, shapley_weights,
                      out, cat_start=None, cat_bits=None):
    """The off-diagonal SHAP interaction values of every path, in path order: for each element
    i of a path, ((one_i - z_i) * 0.5) times the SHAP values of the other elements j in the path
    without i (``shap_contributions``' terms with m - 1 players, i's factor left out).

    out: (n_rows, n_groups, n_features + 1, n_features + 1) float64, [r, g, f_i, f_j] added to in
    place and returned (diagonal and bias not touched: ``explain.shap_interactions`` fills them).
    """
    for p in range(len(path_value)):
        elems = np.arange(path_ptr[p], path_ptr[p + 1])
        m, g = len(elems), path_group[p]
        if m < 2:
            continue
        one = _path_ones(X, p, feature, threshold, default_left, path_ptr, elem_ptr, edge_node,
                         edge_left, cat_start, cat_bits)
        zero = elem_zero[elems]
        e, degree, _ = _extend(one, zero)
        w = shapley_weights[m - 1]
        for i in range(m):
            z_i = zero[i]
            e_i = np.where(one[:, i : i + 1], _unwind(e, degree, z_i), e)
            degree_i = degree - one[:, i]
            rest = np.ones(X.shape[0])
            for j in range(m):
                if j != i:
                    rest = np.where(one[:, j], rest, rest * zero[j])
            c = path_value[p] * rest
            scale = (one[:, i] - z_i) * 0.5
            failed = -(c * _weighted(e_i, degree_i + 1, w))
            for j in range(m):
                if j == i:
                    continue
                z = zero[j]
                satisfied = (c * (1.0 - z)) * _weighted(_unwind(e_i, degree_i, z), degree_i, w)
                out[:, g, elem_feature[elems[i]], elem_feature[elems[j]]] += \
                    scale * np.where(one[:, j], satisfied, failed)
    return out

# Sparse columns (see ``gbflow.routing``). A shard's sparse store holds, row by row, only the
# entries of its sparse features whose bin is not that feature's common bin:
#
# - ``indptr``: (n_rows + 1,) int64, row r's entries at ``indptr[r]:indptr[r + 1]``;
# - ``entry_feature``: (nnz,) int16 or int32 sparse-local feature ids (0..S-1), ascending within
#   a row (``_dtypes.entry_feature_dtype``: int16 while S <= 32767);
# - ``entry_bin``: (nnz,) uint8/uint16 bin ids (never the feature's ``common_bin``).
#
# Their histograms are compact: ``sparse_hist`` (n_nodes, n_slots, 2) int64, feature s's bins
# 0..n_value_bins[s] at slots ``bin_offsets[s]..bin_offsets[s + 1] - 1``.


def bin_entries(values, entry_feature, cut_values, cut_offsets, out):
    """Bin ids of single entries, in place: ``bin_features`` for a list of (feature, value).

    values: (nnz,) float32, NaN = missing. entry_feature: (nnz,) int32 feature of each entry (an
    index into ``cut_offsets``). out: (nnz,) uint8/uint16, written: 0 for NaN, else
    1 + (number of the feature's cuts <= value). Returns ``out``.
    """
    for k in range(len(values)):
        f = entry_feature[k]
        if np.isnan(values[k]):
            out[k] = _dtypes.MISSING_BIN
        else:
            cuts = cut_values[cut_offsets[f] : cut_offsets[f + 1]]
            out[k] = 1 + np.searchsorted(cuts, values[k], side="right")
    return out


def build_sparse_histograms(indptr, entry_feature, entry_bin, bin_offsets, gh, row_index,
                            seg_start, seg_count, n_slots, out=None, slots=None, split_left=None,
                            built_left=None):
    """Compact histograms of each listed node, from the stored entries of its rows only.

    The common bin of every feature stays 0 here (``fill_common_bins`` sets it from the node
    totals). entry_feature: int16 or int32 (an index into bin_offsets: the slot arithmetic is
    int64). bin_offsets: (S + 1,) int64. Returns (n_nodes, n_slots, 2) int64: newly allocated,
    or ``out`` (that shape, int64, C-contiguous) with the histograms added to what it holds.
    slots: None, or each entry's slot bin_offsets[entry_feature] + entry_bin already computed
    ((nnz,) uint16 or int32, ``stores.entry_slots``), which a fast version may read instead; it
    never changes the result. split_left, built_left: None, or (n_nodes,) int64 and bool: the
    segments are split nodes' after their partition (``partition_and_histogram``'s left counts,
    which may stay on the device) and each node's histogram is of its built child's rows
    (``built_child_segments``).
    """
    if split_left is not None:
        seg_start, seg_count = built_child_segments(seg_start, seg_count, split_left, built_left)
    hist = np.zeros((len(seg_start), n_slots, 2), dtype=_dtypes.FIXED)
    for k in range(len(seg_start)):
        for row in row_index[seg_start[k] : seg_start[k] + seg_count[k]]:
            for e in range(indptr[row], indptr[row + 1]):
                hist[k, bin_offsets[entry_feature[e]] + entry_bin[e]] += gh[row]
    return _add_into(out, hist)


def built_child_segments(seg_start, seg_count, split_left, built_left) -> tuple:
    """(start, count) (n,) int64 host: the built children's segments of split nodes' segments
    after their partition, the left child first (left: the first split_left[k] positions)."""
    start = np.asarray(seg_start, dtype=np.int64)
    count = np.asarray(seg_count, dtype=np.int64)
    left = np.asarray(split_left, dtype=np.int64)
    built_left = np.asarray(built_left, dtype=bool)
    return np.where(built_left, start, start + left), np.where(built_left, left, count - left)


def fill_common_bins(hist, totals, bin_offsets, common_bin):
    """Set each feature's common bin to the node total minus its other bins, in place.

    hist: (n_nodes, n_slots, 2) int64 whose common bins hold 0. totals: (n_nodes, 2) int64 node
    totals. common_bin: (S,) int32. Exact: every row sits in one bin of every feature.
    Returns ``hist``.
    """
    for s in range(len(common_bin)):
        lo, hi = bin_offsets[s], bin_offsets[s + 1]
        hist[:, lo + common_bin[s]] = totals - hist[:, lo:hi].sum(axis=1)
    return hist


def evaluate_sparse_splits(hist, bin_offsets, n_value_bins, feature_allowed, inv_scale_g,
                           inv_scale_h, reg_lambda, reg_alpha, min_child_weight, bounds=None,
                           padded_bins=None):
    """``evaluate_splits`` on compact histograms (common bins filled in).

    hist: (n_nodes, n_slots, 2) int64; feature s has bins 0..n_value_bins[s]. Same candidates,
    float operations, order and results as ``evaluate_splits`` on the features padded to one
    width, which is how this twin is written; features are sparse-local ids. padded_bins: None,
    or that width as the caller computed it once (``padded_width``), so that a fast version
    need not read the offsets on the host every call; it never changes the result.
    """
    n_nodes = hist.shape[0]
    n_features = len(n_value_bins)
    width = padded_width(bin_offsets)
    if padded_bins is not None and int(padded_bins) != width:
        raise ValueError(f"evaluate_sparse_splits: padded_bins {padded_bins}, the offsets' "
                         f"widest feature pads to {width}")
    padded = np.zeros((n_nodes, n_features, width, 2), dtype=_dtypes.FIXED)
    for s in range(n_features):
        lo, hi = bin_offsets[s], bin_offsets[s + 1]
        padded[:, s, : hi - lo] = hist[:, lo:hi]
    return evaluate_splits(padded, n_value_bins, feature_allowed, inv_scale_g, inv_scale_h,
                           reg_lambda, reg_alpha, min_child_weight, bounds)


def categorical_splits(hist, total, columns, n_categories, onehot, max_cat_threshold,
                       inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight,
                       cat_smooth, cat_l2, bounds=None):
    """Each (node, categorical feature)'s best category-set split (``category_splits``).

    hist: (N, D, B, 2) int64 histograms; total: (N, 2) int64 the nodes' sums; columns: (c,)
    int64 the features searched (store-local); n_categories: (c,) int64 their category counts K
    (category k in bin k + 1; bin 0 missing; K + 1 <= B).

    onehot True: every category that holds anything alone to the right (reg_lambda).
    onehot False (LightGBM's and XGBoost's sorted partition): the eligible categories (holding
    hessian > 0 and >= cat_smooth) sorted by G / (H + cat_smooth), stably (ties by category);
    the candidates are the prefixes of that order read from either end, of at most
    P = min(K, max_cat_threshold) categories and fewer than the eligible ones (one stays left),
    with gains regularised by reg_lambda + cat_l2. Candidates are ordered (ascending prefixes,
    then descending; size; missing left then right) and the first of equal gains wins; at a
    node without missing values of the feature, a sorted set (not one hot) is scored missing
    right alone (the same split), as XGBoost keeps it.
    bounds: None, or (max_delta_step, node_bounds, monotone) as ``evaluate_splits`` takes them
    (gains of bounded weights; monotone is not read: categories have no order to keep).

    Returns gain (N, c) float64 (-inf: none), missing_right (N, c) bool, right_sum (N, c, 2)
    int64, size (N, c) int32, order (N, c, W) int32, W = 1 when onehot else
    min(max K, max_cat_threshold): the categories (0-based) that go right are
    order[n, j, :size[n, j]]; the rest of order is -1 (all of it when there is no candidate),
    and n_sorted (N, c) int32: how many eligible categories were sorted (0 when onehot; the
    count the noise penalty of ``category_splits`` is taken at).
    """
    n_nodes, n_features = hist.shape[0], len(columns)
    width = categorical_width(onehot, n_categories, max_cat_threshold)
    lam = reg_lambda if onehot else reg_lambda + cat_l2
    gain = np.full((n_nodes, n_features), -np.inf)
    missing_right = np.zeros((n_nodes, n_features), dtype=bool)
    right_sum = np.zeros((n_nodes, n_features, 2), dtype=np.int64)
    size = np.zeros((n_nodes, n_features), dtype=np.int32)
    order = np.full((n_nodes, n_features, width), -1, dtype=np.int32)
    n_sorted = np.zeros((n_nodes, n_features), dtype=np.int32)
    bounds = check_bounds(bounds, n_nodes, None)
    for n in range(n_nodes):
        tg, th = int(total[n, 0]), int(total[n, 1])
        node = None if bounds is None else (bounds[0], *bounds[1][n])
        with np.errstate(divide="ignore", invalid="ignore"):  # a parent of no hessian
            parent = _parent_gain(np.float64(tg) * inv_scale_g, np.float64(th) * inv_scale_h,
                                  lam, reg_alpha, node)
        for j, (f, K) in enumerate(zip(columns, n_categories)):
            cats, missing = hist[n, f, 1:int(K) + 1], hist[n, f, 0]
            if onehot:
                held = np.flatnonzero((cats[:, 0] != 0) | (cats[:, 1] != 0))
                candidates = [([k], cats[k]) for k in held]
            else:
                H = cats[:, 1] * inv_scale_h
                eligible = np.flatnonzero((cats[:, 1] != 0) & (H > 0) & (H >= cat_smooth))
                n_sorted[n, j] = len(eligible)
                key = (cats[eligible, 0] * inv_scale_g) / (H[eligible] + cat_smooth)
                P = max(min(int(K), max_cat_threshold, len(eligible) - 1), 0)
                candidates = []
                for sign in (1.0, -1.0):  # ascending keys, then descending
                    run = eligible[np.argsort(sign * key, kind="stable")][:P]
                    prefix_sums = np.cumsum(cats[run], axis=0)
                    candidates += [(run[:i + 1], prefix_sums[i]) for i in range(P)]
            # a sorted set's split at a node without missing values of the feature: kept
            # missing-right (the other side, of equal gain, is the same split), as XGBoost's
            sides = (1,) if not onehot and not missing.any() else (0, 1)
            for right_cats, right in candidates:
                for side in sides:
                    R = right + (missing if side else 0)
                    g = _candidate_gain(tg - int(R[0]), th - int(R[1]), tg, th, parent,
                                        inv_scale_g, inv_scale_h, lam, reg_alpha,
                                        min_child_weight, node)
                    if g > gain[n, j]:
                        gain[n, j], missing_right[n, j], right_sum[n, j] = g, bool(side), R
                        size[n, j] = len(right_cats)
                        order[n, j] = -1
                        order[n, j, :len(right_cats)] = right_cats[:width]
    return gain, missing_right, right_sum, size, order, n_sorted


def _parent_gain(GP, HP, reg_lambda, reg_alpha, node=None):
    """The parent's term of a gain: ``_score``, or with a node's (max_delta_step, lower, upper)
    the ``_weight_gain`` of its bounded weight."""
    if node is None:
        return _score(GP, HP, reg_lambda, reg_alpha)
    w = _bounded_weight(GP, HP, reg_lambda, reg_alpha, *node)
    return _weight_gain(GP, HP, reg_lambda, reg_alpha, w)


def _candidate_gain(lg, lh, tg, th, parent, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                    min_child_weight, node=None):
    """Gain of the split whose left child sums to (lg, lh) of the node's (tg, th): the float
    operations of ``evaluate_splits`` in its order; -inf where not valid. node: None, or the
    node's (max_delta_step, lower, upper): the gain of bounded weights."""
    GL, HL = np.float64(lg) * inv_scale_g, np.float64(lh) * inv_scale_h
    GR, HR = np.float64(tg - lg) * inv_scale_g, np.float64(th - lh) * inv_scale_h
    if not (HL >= min_child_weight and HR >= min_child_weight and HL + reg_lambda > 0
            and HR + reg_lambda > 0):
        return -np.inf
    return _split_terms(GL, HL, GR, HR, reg_lambda, reg_alpha, node)[0] - parent


def _split_terms(GL, HL, GR, HR, reg_lambda, reg_alpha, node=None):
    """The children's terms of a gain and their weights: (score L + score R, None, None), or
    with a node's (max_delta_step, lower, upper) (weight gain L + weight gain R, WL, WR) of
    their bounded weights. Scalars or arrays."""
    if node is None:
        return _score(GL, HL, reg_lambda, reg_alpha) + _score(GR, HR, reg_lambda, reg_alpha), \
            None, None
    WL = _bounded_weight(GL, HL, reg_lambda, reg_alpha, *node)
    WR = _bounded_weight(GR, HR, reg_lambda, reg_alpha, *node)
    return _weight_gain(GL, HL, reg_lambda, reg_alpha, WL) + \
        _weight_gain(GR, HR, reg_lambda, reg_alpha, WR), WL, WR


def quantile_tally(keys, groups, weights, prefix, shift, table):
    """One round of ``leaf_quantiles.weighted_quantiles``: add each row's weight into its
    (group, byte) slot, table[groups * 256 + byte], byte = (keys >> shift) & 255, counting only
    the rows whose higher bytes (keys >> (shift + 8)) equal their group's ``prefix`` (every row
    when shift is 56). keys: (n,) uint64; groups: (n,) int64 in [0, G); weights: (n,) int64
    >= 0, or None for ones; prefix: (G,) uint64; table: (G * 256,) int64, added into and
    returned. Integer sums: any order gives the same table."""
    if shift not in range(0, 64, 8):
        raise ValueError(f"quantile_tally: shift must be a multiple of 8 in [0, 56], got {shift}")
    shift = np.uint64(shift)
    take = np.ones(len(keys), dtype=bool) if shift == 56 else \
        (keys >> (shift + np.uint64(8))) == prefix[groups]
    slots = groups * 256 + ((keys >> shift) & np.uint64(255)).astype(np.int64)
    w = np.ones(len(keys), dtype=np.int64) if weights is None else weights.astype(np.int64)
    np.add.at(table, slots[take], w[take])
    return table


def quantile_select(table, remaining, prefix):
    """The choice after a round of ``quantile_tally`` (its table summed over every process):
    per group g the first byte b whose slots 0..b weigh at least ``remaining[g]`` (255 when
    none reach it: a group of no weight), in place: remaining[g] less the weight of the slots
    before b, prefix[g] = (prefix[g] << 8) | b. table: (G, 256) int64; remaining: (G,) int64;
    prefix: (G,) uint64. Returns nothing."""
    below = np.cumsum(table, axis=1)
    byte = np.minimum((below < remaining[:, None]).sum(axis=1), 255)
    remaining -= np.where(byte > 0, below[np.arange(len(byte)), np.maximum(byte - 1, 0)], 0)
    prefix[:] = (prefix << np.uint64(8)) | byte.astype(np.uint64)


def sparse_bin(indptr, entry_feature, entry_bin, common_bin, row, s):
    """The bin of row ``row`` in sparse feature ``s``: its stored entry, else the common bin.
    entry_feature int16 or int32 (0 <= s < S fits either)."""
    lo, hi = indptr[row], indptr[row + 1]
    e = lo + np.searchsorted(entry_feature[lo:hi], s)
    return entry_bin[e] if e < hi and entry_feature[e] == s else common_bin[s]


def split_column(bins_by_feature, indptr, entry_feature, entry_bin, common_bin, row_index,
                 seg_start, seg_count, dense_feature, sparse_feature, out, columns=None):
    """Every listed node's rows' bins of the node's split feature, gathered into one column.

    Node k splits on dense feature ``dense_feature[k]`` (a row of bins_by_feature, (D, n_rows))
    when it is >= 0, else on sparse feature ``sparse_feature[k]``. out: (n_rows,) bins, written
    at the rows of the listed segments only. The partition and margin kernels then read the
    split bins from ``out[None, :]`` with feature 0. The store's entry_feature: int16 or int32.
    columns: None, or the same entries indexed by feature (``stores.SparseColumns``), which a
    fast version may read instead; it never changes what is written. Returns ``out``.
    """
    for k in range(len(seg_start)):
        rows = row_index[seg_start[k] : seg_start[k] + seg_count[k]]
        if dense_feature[k] >= 0:
            out[rows] = bins_by_feature[dense_feature[k], rows]
        else:
            for row in rows:
                out[row] = sparse_bin(indptr, entry_feature, entry_bin, common_bin, row,
                                      sparse_feature[k])
    return out


def map_sides(bins_by_feature, row_index, seg_start, seg_count, ids, side_map, out):
    """Each listed node's rows' bins of its split feature, mapped through the node's side map.

    bins_by_feature: (k, n_rows) bins; node k's rows (row_index[seg_start[k]:][:seg_count[k]])
    read row ``ids[k]``. side_map: (n_nodes, n_bins) uint8 (0 missing, 1 left, 2 right;
    ``split.LevelSplits.side_map``). out: (n_rows,) bins, written at the listed rows only:
    out[row] = side_map[k, bins_by_feature[ids[k], row]]. Returns ``out``.
    """
    for k in range(len(seg_start)):
        rows = row_index[seg_start[k] : seg_start[k] + seg_count[k]]
        out[rows] = side_map[k, bins_by_feature[ids[k], rows].astype(np.int64)]
    return out


def predict_margins_csr(indptr, indices, data, feature, threshold, default_left, left, right,
                        value, tree_root, tree_group, out):
    """``predict_margins`` on a CSR matrix: absent entries are missing (NaN).

    indptr (n_rows + 1,) int64, indices (nnz,) int32 ascending within each row, data (nnz,)
    float32. The other arguments and the result as in ``predict_margins``.
    """
    n_rows = len(indptr) - 1
    for r in range(n_rows):
        lo, hi = indptr[r], indptr[r + 1]
        columns = indices[lo:hi]
        for t in range(len(tree_root)):
            node = tree_root[t]
            while feature[node] >= 0:
                f = feature[node]
                e = lo + np.searchsorted(columns, f)
                x = data[e] if e < hi and indices[e] == f else np.float32(np.nan)
                go_left = default_left[node] if np.isnan(x) else x < threshold[node]
                node = left[node] if go_left else right[node]
            out[r, tree_group[t]] += value[node]
    return out


# ---------------------------------------------------------------------------------------------
# Evaluation metrics (``gbflow.metrics``): exact sums of per-row values, and the AUC's tallies.

def fixed_point_words(values, scale, low_scale):
    """The sum of ``values`` in two-word fixed point: (2,) int64 [sum of rint(v * scale), sum of
    rint((v * scale - rint(v * scale)) * low_scale)] (``metrics.exact``: the words of every part
    and process add up exactly; scale and low_scale are powers of two chosen so that neither sum
    can overflow). values: (n,) float (any strides)."""
    scaled = np.asarray(values, dtype=np.float64) * scale
    high = np.rint(scaled)
    low = np.rint((scaled - high) * low_scale)
    return np.array([high.astype(np.int64).sum(), low.astype(np.int64).sum()], dtype=np.int64)


def sigmoid(x, out):
    """1 / (1 + exp(-x)) of (n,) float ``x`` into (n,) float64 ``out`` (``x`` itself allowed),
    NumPy's negative, exp, add and divide in this order; returns ``out``. The CPU's sigmoid:
    binary:logistic's predictions and what its metrics see."""
    x = np.asarray(x, dtype=np.float64)
    return sigmoid_with(np, x, check_column_out(x, out, "sigmoid"))


def logistic_gradients(margin, label, weight):
    """The logistic loss's (n,) float32 gradient and hessian (new arrays) at (n,) float64
    ``margin`` (``losses.logistic_gradients_with``: p = sigmoid's p, p - label and max(p (1 -
    p), MIN_HESSIAN), each times ``weight``, (n,) float64 or None). binary:logistic's training."""
    check_loss_arguments(margin, label, weight, 1, "logistic_gradients")
    return logistic_gradients_with(np, np.asarray(margin, dtype=np.float64), label, weight)


def softmax_gradients(margin, label, weight):
    """multi:softprob's (n, k) float32 gradient and hessian (new arrays) at (n, k) float64
    ``margin`` (``losses.softmax_gradients_with``: NumPy's row max, exp, row sum and quotient),
    label (n,) class ids, each row times its ``weight`` ((n,) float64 or None)."""
    check_loss_arguments(margin, label, weight, 2, "softmax_gradients")
    # row-major: NumPy sums a row of a column-major array in another order
    return softmax_gradients_with(np, np.ascontiguousarray(margin, dtype=np.float64), label,
                                  weight)


def any_infinite(X) -> bool:
    """Whether the (n, F) float32 matrix ``X`` (any layout) holds +inf or -inf (NaN does not
    count). Reads X only."""
    return bool(np.isinf(X).any())


def sketch_counts(values, feature, f0, weight, slot_of, table):
    """The quantile sketch's tally of one block into ``table`` (int64, in place; returned):
    each present float32 value's weight (integer-valued float64 ``weight``, (rows, 1) or (k,),
    or None for 1) at its bucket, or at its sub-bucket in its bucket's slot where ``slot_of``
    ((g * N_BUCKETS,) int32, -1 for no slot; no slot shared by two features) is given
    (``sketch_tallies.sketch_counts_with``). values: (rows, g) float32 of features f0..f0+g-1
    or a CSR's (k,) entries; feature: their feature ids ((1, g) or (k,) integers)."""
    check_sketch_arguments(values, feature, weight, slot_of, table, "sketch_counts")
    return sketch_counts_with(np, _bincount, values, feature, int(f0), weight, slot_of, table)


def _bincount(ids, size: int, weights):
    return np.bincount(ids, weights, minlength=size)


def sketch_selected(values, feature, f0, slot_of, wanted, out):
    """The quantile sketch's fine selection of one block: ``out`` (bool, values' shape, in
    place; returned) True where a value is present, its bucket has a slot s in ``slot_of``
    and ``wanted`` ((n_slots * N_SUB,) bool) marks s's sub-bucket of it
    (``sketch_tallies.sketch_selected_with``). values, feature, f0: as ``sketch_counts``."""
    check_sketch_arguments(values, feature, None, slot_of, None, "sketch_selected",
                           wanted=wanted, out=out)
    return sketch_selected_with(np, values, feature, int(f0), slot_of, wanted, out)


def prediction_keys(values):
    """(n,) or (n, k) int64 ordered keys, in [0, 2**32), of float ``values``' float32 values
    (``common.ordered_keys``; -0.0 as +0.0): the order auc ranks predictions in, as XGBoost
    ranks its float32 predictions. A new array of ``values``' shape."""
    return prediction_keys_with(np, np.asarray(values))


def key_buckets(keys, low, span, bits: int):
    """int64 bucket ids in [0, 2**bits) of int64 ``keys`` (any shape) in [low, low + span):
    (keys - low) * 2**bits // span, exact integers; a new array. low, span: ints or 0-d int64
    arrays (span >= 1; keys - low < 2**32 and bits <= 30 keep every product below 2**63)."""
    return key_buckets_with(np, np.asarray(keys, dtype=np.int64), integer_scalar(low, "low"),
                            integer_scalar(span, "span"), int(bits))


def auc_tally(bucket, label, weight, scale, out):
    """Add every row's fixed-point positive and negative weight into its bucket, in place.

    bucket: (n,) int64 bucket ids in 0..n_buckets-1. label: (n,) float64 in [0, 1] (a soft label
    is its share of positive weight). weight: (n,) float64 or None (weight 1). scale: the power of
    two of the weights' fixed point, small enough that a bucket's tally stays below 2**53 (float64
    bincounts are exact there). A row adds positive = rint(w * scale * y) to out[0, bucket] and
    rint(w * scale) - positive to out[1, bucket]. out: (2, n_buckets) int64. Returns ``out``."""
    w = np.full(len(bucket), scale) if weight is None else np.asarray(weight) * scale
    total = np.rint(w).astype(np.int64)
    positive = np.rint(w * np.asarray(label, dtype=np.float64)).astype(np.int64)
    n_buckets = out.shape[1]
    out[0] += np.bincount(bucket, weights=positive, minlength=n_buckets).astype(np.int64)
    out[1] += np.bincount(bucket, weights=total - positive, minlength=n_buckets).astype(np.int64)
    return out


def auc_words(table):
    """(..., 3) int64 of a (..., 2, n_buckets) int64 tally table (``auc_tally``), per table:
    [sum over buckets of positive * (2 * negative below + negative tied), total positive, total
    negative]; auc = first / (2 * second * third). Exact: every product and sum is an integer
    below 2**63 when the totals are below 2**30 (``metrics.tallies.WEIGHT_LIMIT``)."""
    positive, negative = table[..., 0, :], table[..., 1, :]
    below = np.cumsum(negative, axis=-1) - negative
    return np.stack([(positive * (2 * below + negative)).sum(axis=-1), positive.sum(axis=-1),
                     negative.sum(axis=-1)], axis=-1)


def occupied_keys(keys):
    """The compact table's entries of (n,) int64 keys in [0, 2**32) (an auc's float32
    prediction keys, or bucket ids): ((n,) int64 entry keys: the distinct keys in ascending
    order, then -1 for the entries no key needs; (n,) int64 each key's entry). A table of n
    entries whose unused ones stay empty tallies the same as one of the distinct keys alone.
    New arrays; nothing is read back (on the GPU, it records into a graph)."""
    return occupied_keys_with(np, np.asarray(keys, dtype=np.int64))


def auc_bucket_words(bucket, label, weight, scale, n_buckets: int):
    """(3,) int64 ``auc_words`` of the rows' tally into a table of ``n_buckets`` buckets
    (``auc_tally``'s arguments), for a caller that needs the words alone (one process: no
    table to add with others'). Returns a new array."""
    table = np.zeros((2, int(n_buckets)), dtype=np.int64)
    return auc_words(auc_tally(bucket, label, weight, scale, table))


def log_gamma(values):
    """(n,) float64 log Gamma(v) of (n,) float values (math.lgamma's; a new array)."""
    return np.array([math.lgamma(v) for v in np.asarray(values, dtype=np.float64).tolist()],
                    dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Level plans: what a level's split search decided, turned into the next steps' inputs on the
# device, so that growing a tree waits for the device once per tree instead of once per level
# (``gbflow.grow.planned`` on the GPU). A level's arrays are sized for its capacity: every node that
# could be there (``cap`` slots); which slots hold a node follows from the parent level's split
# count alone. The slots of a level made by n splits are laid out [sibling of split 0 .. of split
# n - 1, unused .., built child of split 0 at ``half``, .., unused ..]: slot k holds a node when
# k % half < n (the root level: one slot, half 1, n 1).

def plan_level(n_parent_split, half, gain, feature, bin_threshold, default_left, left_sum,
               totals, min_gain, n_split, split_node, split_feature, split_threshold,
               split_default_left, built_left, split_gain, child_totals, is_leaf):
    """The splits a level takes, listed in slot order, and its children's totals.

    n_parent_split: (1,) int64, the parent level's split count; half: int, the level's built
    half offset (slot k holds a node when k % half < n_parent_split[0]). gain .. left_sum: the
    split search's (cap,) results (``evaluate_splits``, global feature ids); totals: (cap, 2)
    int64 node sums. A node splits when it holds a node, has a split (feature >= 0) and its
    gain > min_gain (float).

    Outputs, written in place (cap = len(gain)): n_split (1,) int64; for split j < n_split, in
    slot order: split_node[j] int64 its slot, split_feature/split_threshold int32,
    split_default_left bool, split_gain float64, built_left bool (the left child has the smaller
    or equal hessian: it is the one built by the partition), child_totals (2 * cap, 2) int64:
    row j the sibling's [g, h], row cap + j the built child's (the next level's layout with
    half = cap). Every entry for j >= n_split is zero (False, 0.0). is_leaf (cap,) bool: the
    slot holds a node that does not split.
    """
    cap = len(gain)
    slot = np.arange(cap)
    holds = (slot % int(half)) < int(n_parent_split[0])
    splits = np.flatnonzero(holds & (np.asarray(feature) >= 0) & (np.asarray(gain) > min_gain))
    n = len(splits)
    for out in (split_node, split_feature, split_threshold, split_default_left, built_left,
                split_gain, child_totals):
        out[...] = 0
    is_leaf[...] = holds
    is_leaf[splits] = False
    n_split[0] = n
    split_node[:n] = splits
    split_feature[:n] = feature[splits]
    split_threshold[:n] = bin_threshold[splits]
    split_default_left[:n] = default_left[splits]
    split_gain[:n] = gain[splits]
    left = left_sum[splits]
    right = totals[splits] - left
    is_left = left[:, 1] <= right[:, 1]
    built_left[:n] = is_left
    child_totals[:n] = np.where(is_left[:, None], right, left)
    child_totals[cap: cap + n] = np.where(is_left[:, None], left, right)


def level_segments(n_rows, half, n_parent_split, parent_split_start, parent_split_count,
                   left_count, parent_built_left, n_split, split_node, rows_per_block, seg_start,
                   seg_count, split_start, split_count, work, n_work):
    """One shard's segments of a level's slots, and the work list of the nodes that split.

    n_rows: the shard's rows. half, n_parent_split: the level's layout (see ``plan_level``);
    half == 0 means the root (one slot, all rows; the parent arrays are not read). Slot k
    (k % half = j < n_parent_split[0]) is a child of the parent level's split j, whose segment
    was parent_split_start[j], parent_split_count[j] (int64) and whose left child got
    left_count[j] (int64) of its rows: the built child (k >= half) is the left one when
    parent_built_left[j], the sibling the other one. n_split (1,) int64, split_node (cap,)
    int64: this level's plan.

    Outputs, written in place: seg_start/seg_count (cap,) int64 (0 for unused slots);
    split_start/split_count (cap,) int64, the splits' segments in plan order (0 past n_split);
    work (max_blocks, 5) int64, the partition's work list over the splits (see
    ``work_list_rows``; rows past the list are zero); n_work (1,) int64 its length.
    """
    cap = len(seg_start)
    seg_start[...] = 0
    seg_count[...] = 0
    if half == 0:
        seg_count[0] = n_rows
    else:
        for k in range(cap):
            j = k % half
            if j >= int(n_parent_split[0]):
                continue
            start, count, left = parent_split_start[j], parent_split_count[j], left_count[j]
            child_is_left = bool(parent_built_left[j]) == (k >= half)
            seg_start[k] = start if child_is_left else start + left
            seg_count[k] = left if child_is_left else count - left
    n = int(n_split[0])
    split_start[...] = 0
    split_count[...] = 0
    split_start[:n] = seg_start[split_node[:n]]
    split_count[:n] = seg_count[split_node[:n]]
    rows = work_list_rows(split_start[:n], split_count[:n], rows_per_block)
    if len(rows) > len(work):
        raise ValueError(f"level_segments: the work list needs {len(rows)} rows, work has "
                         f"{len(work)}")
    work[...] = 0
    work[: len(rows)] = rows
    n_work[0] = len(rows)


def partition_planned(bins, bins_by_feature, gh, row_index, work, n_work, feature, bin_threshold,
                      default_left, small_is_left, n_bins, out, dest, n_value_bins=None):
    """``partition_and_histogram`` of the nodes of a planned work list (``level_segments``),
    into ``dest`` (required: the grower ping-pongs between two row arrays) and adding into
    ``out`` (required, (n_nodes, F, n_bins, 2)). n_nodes = len(feature); the work list's nodes
    index the split arrays. Returns left_count (n_nodes,) int64 (0 for nodes without rows)."""
    seg_start, seg_count = segments_of_work(work, n_work, len(feature))
    left_count, _ = partition_and_histogram(bins, bins_by_feature, gh, row_index, seg_start,
                                            seg_count, feature, bin_threshold, default_left,
                                            small_is_left, n_bins, out=out, dest=dest,
                                            n_value_bins=n_value_bins)
    return left_count


def grow_whole_tree(bins, bins_by_feature, gh, row_index, spare_index, n_value_bins, n_bins,
                    feature_allowed, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                    min_child_weight, min_gain, max_delta_step=None, features=None, sparse=None,
                    finish=None):
    """One depthwise tree grown whole on one shard's dense bins and, with ``sparse``, its sparse
    store: every level's split search (``evaluate_splits``, ``evaluate_sparse_splits``, each
    node's better result kept, a tie going to the lower feature id), partition with the smaller
    child's histograms (``partition_and_histogram``, reading ``split_column``'s gathered bins
    when a node of the level splits on a sparse feature; the sparse histograms of the moved
    rows, their common bins filled) and siblings (parent minus built child), in one call.

    bins (n, D) and bins_by_feature (D, n) uint8/uint16, gh (n, 2) int64, n_value_bins (D,)
    int32 as the kernels take them (D may be 0 with a sparse store); feature_allowed:
    (max_depth, D) bool, row d the features the nodes of depth d may split on (its length is
    the depth limit). features: (D,) int64 the dense features' ids in the caller's numbering
    (None: 0..D-1), which the tree's ``feature`` holds. sparse: None, or a ``SparseSide``
    (its column is overwritten). row_index: (n,) int32 ``arange(n)``, the root's rows, and
    spare_index (n,) int32 scratch: level d's segments are written to
    (row_index, spare_index)[d % 2] (both are overwritten). A node splits when its best gain
    exceeds ``min_gain``. max_delta_step: None (weights unbounded) or XGBoost's cap (0: none)
    with every node's bounds infinite (no monotone constraint). Returns a ``GrownTree``: the
    tree the level-by-level grower grows on the same data.

    finish: None, or a ``TreeFinish``: the ``GrownTree`` is finished (``finish_whole_tree``'s
    threshold, value and cover, its cut features the ids of ``features`` and the sparse
    side's), and where ``finish.margin`` is given, every row's leaf value is added to its
    column ``finish.group`` (a ``LeafRows`` update of the tree: ``add_leaf_values`` for the
    leaves whose rows were moved, ``add_split_leaf_values`` for the last level's splits,
    their split bins read as the partition reads them)."""
    n_rows, n_features = bins.shape
    max_depth = feature_allowed.shape[0]
    features = np.arange(n_features) if features is None else np.asarray(features)
    if finish is not None:
        finish.check(n_rows, features, None if sparse is None else sparse.features)
    last_splits = None  # the last level's splits: (rows, source, source_feature)
    rows = (row_index, spare_index)
    seg_start = np.zeros(1, dtype=np.int64)
    seg_count = np.full(1, n_rows, dtype=np.int64)
    hist = build_histograms(bins, gh, row_index, seg_start, seg_count, n_bins)
    totals = gh[row_index].sum(axis=0, dtype=_dtypes.FIXED)[None, :]
    if sparse is not None:
        sparse_hist = fill_common_bins(_sparse_histograms(sparse, gh, row_index, seg_start,
                                                          seg_count), totals,
                                       sparse.bin_offsets, sparse.common_bin)
    next_id = 1
    levels = []
    for depth in range(max_depth + 1):
        n = len(totals)
        no = np.zeros(n, dtype=bool)
        found = _with_ids((np.zeros(n), np.full(n, -1, dtype=np.int32),
                           np.zeros(n, dtype=np.int32), no, None), features)  # no split
        in_sparse, do_split = no, no
        if depth < max_depth:
            bounds = None if max_delta_step is None else \
                (max_delta_step, np.tile([-np.inf, np.inf], (n, 1)), None)
            constants = (inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, min_child_weight)
            if n_features:
                found = _with_ids(evaluate_splits(hist, n_value_bins, feature_allowed[depth],
                                                  *constants, bounds), features)
            else:  # no dense feature, no dense split
                found = (np.full(n, -np.inf),) + found[1:4] + \
                    (np.zeros((n, 2), _dtypes.FIXED), found[5])
            if sparse is not None:
                found, in_sparse = better_splits(found, _with_ids(evaluate_sparse_splits(
                    sparse_hist, sparse.bin_offsets, sparse.n_value_bins,
                    sparse.feature_allowed[depth], *constants, bounds,
                    padded_bins=sparse.padded_bins), sparse.features))
            do_split = (found[1] >= 0) & (found[0] > min_gain)
        # the feature as the caller numbers them, then each one's id in its store
        gain, feature_id, bin_threshold, default_left, left_sum, feature = found
        sp = np.flatnonzero(do_split)
        left = np.full(n, -1, dtype=np.int64)
        left[sp] = next_id + 2 * np.arange(len(sp))
        levels.append((totals, np.where(do_split, feature_id, -1),
                       np.where(do_split, bin_threshold, 0), default_left & do_split,
                       np.where(do_split, gain, 0.0), left, np.full(n, depth), seg_start,
                       seg_count))
        if not len(sp):
            break
        left_sum = left_sum[sp]
        right_sum = totals[sp] - left_sum
        child_totals = np.stack([left_sum, right_sum], axis=1).reshape(-1, 2)
        last = depth + 1 == max_depth
        source, source_feature = bins_by_feature, feature[sp]
        if in_sparse[sp].any() and (not last or finish is not None and
                                    finish.margin is not None):
            # every split node's bins gathered, as the level loop does (and, at the last
            # level, as a LeafRows update reads them: ShardSet.split_matrix)
            source = split_column(bins_by_feature, sparse.indptr, sparse.entry_feature,
                                  sparse.entry_bin, sparse.common_bin, rows[depth % 2],
                                  seg_start[sp], seg_count[sp],
                                  np.where(in_sparse[sp], -1, feature[sp]),
                                  np.where(in_sparse[sp], feature[sp], -1),
                                  sparse.column)[None, :]
            source_feature = np.zeros(len(sp), dtype=np.int32)
        if last:  # the children are leaves: their rows are not moved
            last_splits = (rows[depth % 2], source, source_feature)
            seg_start = np.full(2 * len(sp), -1, dtype=np.int64)
            seg_count = np.zeros(2 * len(sp), dtype=np.int64)
        else:
            built_left = left_sum[:, 1] <= right_sum[:, 1]
            left_count, built = partition_and_histogram(
                bins, source, gh, rows[depth % 2], seg_start[sp], seg_count[sp],
                source_feature, bin_threshold[sp], default_left[sp], built_left, n_bins,
                dest=rows[(depth + 1) % 2])
            built_at = 2 * np.arange(len(sp)) + np.where(built_left, 0, 1)
            hist = _children(hist, sp, built, built_at)
            seg_start = np.stack([seg_start[sp], seg_start[sp] + left_count], 1).reshape(-1)
            seg_count = np.stack([left_count, seg_count[sp] - left_count], 1).reshape(-1)
            if sparse is not None:
                built_sparse = fill_common_bins(
                    _sparse_histograms(sparse, gh, rows[(depth + 1) % 2], seg_start[built_at],
                                       seg_count[built_at]),
                    child_totals[built_at], sparse.bin_offsets, sparse.common_bin)
                sparse_hist = _children(sparse_hist, sp, built_sparse, built_at)
        totals = child_totals
        next_id += 2 * len(sp)
    columns = [np.concatenate(values) for values in zip(*levels)]
    dtypes = (_dtypes.FIXED, np.int32, np.int32, np.bool_, np.float64, np.int64, np.int32,
              np.int64, np.int64)
    grown = GrownTree(*(column.astype(dtype) for column, dtype in zip(columns, dtypes)))
    if finish is None:
        return grown
    _, grown.threshold, grown.value, grown.cover = finish_whole_tree(
        grown.feature, grown.bin_threshold, grown.totals, np.arange(len(finish.cut_offsets) - 1),
        finish.cut_values, finish.cut_offsets, *finish.leaf_constants)
    if finish.margin is not None:
        _add_grown_tree(finish.margin[:, finish.group], grown, rows, last_splits, max_depth)
    return grown


def grow_whole_round(bins, bins_by_feature, grad, hess, scales, gh, row_index, spare_index,
                     n_value_bins, n_bins, feature_allowed, split_constants, min_gain,
                     max_delta_step, features, cut_values, cut_offsets, leaf_constants, margin,
                     sparse=None):
    """A boosting round's trees on one shard's dense bins and, with ``sparse``, its sparse
    store, one per column of the float gradients, each grown whole, finished and added to the
    margins before the next:
    tree k is ``grow_whole_tree`` on ``quantise_gradients(grad[:, k], hess[:, k], *scales[k])``
    (written into ``gh``) from the rows in row order (written into ``row_index``), its feature
    mask ``feature_allowed[k]``, its split constants ``split_constants[k]`` and its finish
    ``TreeFinish(cut_values, cut_offsets, leaf_constants[k], margin, k)``.

    grad, hess: (n, K) float32 or float64. scales: (K, 2) float64 [g, h] fixed-point scales.
    gh (n, 2) int64 C-contiguous, row_index and spare_index (n,) int32: scratch, overwritten.
    feature_allowed: (K, max_depth, D) bool. split_constants: (K, 5) float64 (inv_scale_g,
    inv_scale_h, reg_lambda, reg_alpha, min_child_weight). leaf_constants: (K, 6) float64
    (``LeafRule.constants``). margin: (n, K) float64 C-contiguous, tree k added to column k in
    place. sparse: None, or a ``SparseSide`` whose feature_allowed is (K, max_depth, S) bool,
    tree k growing with its row k. The rest as ``grow_whole_tree`` takes them. Returns the K
    finished ``GrownTree``s."""
    n_trees = check_round(bins, grad, hess, scales, gh, row_index, spare_index, feature_allowed,
                          split_constants,
                          np.arange(bins.shape[1]) if features is None else features,
                          leaf_constants, margin, sparse)
    trees = []
    for k in range(n_trees):
        quantise_gradients(grad[:, k], hess[:, k], scales[k][0], scales[k][1], out=gh)
        row_index[:] = np.arange(len(row_index))
        trees.append(grow_whole_tree(
            bins, bins_by_feature, gh, row_index, spare_index, n_value_bins, n_bins,
            feature_allowed[k], *split_constants[k], min_gain, max_delta_step, features,
            sparse=None if sparse is None else dataclasses.replace(
                sparse, feature_allowed=np.asarray(sparse.feature_allowed)[k]),
            finish=TreeFinish(cut_values, cut_offsets, tuple(leaf_constants[k]), margin, k)))
    return trees


def _add_grown_tree(margin, grown, rows: tuple, last_splits, max_depth: int) -> None:
    """margin[row] += the value of the row's leaf in a finished ``GrownTree`` (the update a
    ``LeafRows`` of it makes): leaves by their segments, the last level's splits (their rows,
    bin source and features in ``last_splits``) by each row's split bin."""
    leaf = np.flatnonzero((grown.feature < 0) & (grown.seg_start >= 0))
    for parity in (0, 1):
        at = leaf[grown.depth[leaf] % 2 == parity]
        add_leaf_values(margin, rows[parity], grown.seg_start[at], grown.seg_count[at],
                        grown.value[at])
    split = np.flatnonzero((grown.feature >= 0) & (grown.depth == max_depth - 1))
    if len(split):
        row_index, source, source_feature = last_splits
        add_split_leaf_values(margin, source, row_index, grown.seg_start[split],
                              grown.seg_count[split], source_feature,
                              grown.bin_threshold[split], grown.default_left[split],
                              grown.value[grown.left[split]], grown.value[grown.left[split] + 1])


def _sparse_histograms(sparse, gh, row_index, seg_start, seg_count):
    """``build_sparse_histograms`` of a ``SparseSide``'s entries (common bins 0)."""
    return build_sparse_histograms(sparse.indptr, sparse.entry_feature, sparse.entry_bin,
                                   sparse.bin_offsets, gh, row_index, seg_start, seg_count,
                                   int(sparse.bin_offsets[-1]))


def _children(parent, sp, built, built_at):
    """The next level's histograms in (left, right) pairs: the built children at built_at, each
    sibling its parent (of ``sp``) minus the built one."""
    children = np.empty((2 * len(sp),) + parent.shape[1:], dtype=_dtypes.FIXED)
    children[built_at] = built
    children[built_at ^ 1] = parent[sp] - built
    return children


def _with_ids(found, ids):
    """A store's five search results as ``better_splits`` compares them: (gain, the feature's
    id in ``ids``' numbering or -1, bin threshold, default direction, left sums, the feature's
    id in the store)."""
    gain, feature, bin_threshold, default_left, left_sum = found
    ids = np.asarray(ids, dtype=np.int64)
    feature_id = np.where(feature >= 0, ids[np.maximum(feature, 0)] if len(ids) else 0, -1)
    return gain, feature_id, bin_threshold, default_left, left_sum, feature


def cut_thresholds(cut_values, cut_offsets, feature, bin_threshold):
    """float32 thresholds (``x < threshold`` goes left) of splits given by their global
    features and bin thresholds (int arrays of one shape): the t-th cut of the feature's
    (cut_values[cut_offsets[f]:cut_offsets[f + 1]]) for t >= 1, so that the value test and the
    bin test (bins 1..t left) agree; for t = 0 (the present values split from the missing ones)
    ``_dtypes.BELOW_EVERY_VALUE`` (``Cuts.split_thresholds``)."""
    feature = np.asarray(feature, dtype=np.int64)
    t = np.asarray(bin_threshold, dtype=np.int64)
    at = cut_offsets[feature] + t - 1
    cut = cut_values[np.clip(at, 0, max(len(cut_values) - 1, 0))] if len(cut_values) \
        else np.zeros(t.shape, dtype=_dtypes.CUT)
    return np.where(t > 0, cut, _dtypes.BELOW_EVERY_VALUE).astype(_dtypes.CUT)


def finish_whole_tree(feature, bin_threshold, totals, features, cut_values, cut_offsets,
                      inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                      max_delta_step=0.0):
    """The node arrays a whole grown tree (``grow_whole_tree``'s ``GrownTree``) needs beyond
    its own, in the model file's dtypes: (feature (n,) int32 global ids, ``_dtypes.LEAF`` on
    leaves; threshold (n,) float32, ``cut_thresholds`` of the splits, 0 on leaves; value (n,)
    float64 ``leaf_weights`` of every node; cover (n,) float64 the hessian sums).

    feature: (n,) int store-local split features (-1: leaf); bin_threshold (n,) int; totals
    (n, 2) int64; features: the store's (D,) int64 global ids; cut_values, cut_offsets: the
    cuts' arrays. The leaf constants as ``leaf_weights`` takes them. Host arrays, no side
    effects."""
    feature = np.asarray(feature)
    split = feature >= 0
    glob = np.where(split, np.asarray(features)[np.maximum(feature, 0)], _dtypes.LEAF)
    threshold = np.zeros(len(feature), dtype=_dtypes.CUT)
    threshold[split] = cut_thresholds(cut_values, cut_offsets, glob[split],
                                      np.asarray(bin_threshold)[split])
    value = leaf_weights(totals, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                         learning_rate, max_delta_step).astype(_dtypes.MARGIN, copy=False)
    return (glob.astype(_dtypes.NODE, copy=False), threshold, value,
            totals[:, 1] * inv_scale_h)


def leaf_weights(totals, inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                 max_delta_step=0.0, node_bounds=None):
    """(n,) float64 leaf weights -T_alpha(G) / (H + lambda) * learning_rate of (n, 2) int64
    fixed-point sums (G = g * inv_scale_g, H = h * inv_scale_h; 0 where H + lambda <= 0).
    max_delta_step (0: none) and node_bounds (None, or (n, 2) float64 [lower, upper]): the
    weights bounded as the split searches bound them (``_bounded_weight``) before the learning
    rate."""
    G = totals[:, 0].astype(np.float64) * inv_scale_g
    H = totals[:, 1].astype(np.float64) * inv_scale_h
    t = _l1_threshold(G, reg_alpha)
    denominator = H + reg_lambda
    with np.errstate(divide="ignore", invalid="ignore"):
        if node_bounds is None and max_delta_step == 0:
            w = -t / denominator
        else:
            lower, upper = (-np.inf, np.inf) if node_bounds is None else node_bounds.T
            w = _bounded_weight(G, H, reg_lambda, reg_alpha, max_delta_step, lower, upper)
        w = np.where(denominator > 0, w, 0.0)
    return w * learning_rate


def add_planned_leaf_values(margin, row_index, seg_start, seg_count, is_leaf, totals,
                            inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate,
                            max_delta_step=0.0):
    """A planned level's leaves into the margins: margin[row] += the leaf weight of its slot's
    totals (``leaf_weights``) for every row of every slot k with is_leaf[k].

    margin: (n_rows,) float64, may be a strided column view, updated in place. row_index: the
    level's row array; seg_start, seg_count (cap,) int64, is_leaf (cap,) bool, totals (cap, 2)
    int64: the level's (``level_segments``, ``plan_level``)."""
    values = leaf_weights(np.asarray(totals), inv_scale_g, inv_scale_h, reg_lambda, reg_alpha,
                          learning_rate, max_delta_step)
    for k in np.flatnonzero(np.asarray(is_leaf)):
        rows = row_index[seg_start[k]: seg_start[k] + seg_count[k]]
        margin[rows] += values[k]


def add_planned_split_values(margin, bins_by_feature, row_index, split_start, split_count,
                             n_split, split_feature, split_threshold, split_default_left,
                             built_left, child_totals, child_half, inv_scale_g, inv_scale_h,
                             reg_lambda, reg_alpha, learning_rate, max_delta_step=0.0):
    """The last level's leaves into the margins, without moving rows: for every row of split
    j < n_split[0] (its segment split_start[j], split_count[j] of row_index), margin[row] +=
    the weight of the child the row goes to (``partition_rows``' rule on bins_by_feature
    (D, n_rows)). The children's totals are child_totals (2 * child_half, 2): the built child
    of split j at child_half + j, its sibling at j; built_left[j] says which is the left one.
    The other arrays: the level's plan (``plan_level``) and split segments
    (``level_segments``)."""
    values = leaf_weights(np.asarray(child_totals), inv_scale_g, inv_scale_h, reg_lambda,
                          reg_alpha, learning_rate, max_delta_step)
    for j in range(int(n_split[0])):
        rows = row_index[split_start[j]: split_start[j] + split_count[j]]
        b = bins_by_feature[split_feature[j], rows]
        go_left = np.where(b == _dtypes.MISSING_BIN, bool(split_default_left[j]),
                           b <= split_threshold[j])
        built, sibling = values[child_half + j], values[j]
        left, right = (built, sibling) if built_left[j] else (sibling, built)
        margin[rows] += np.where(go_left, left, right)


def sort_segments(ptr, keys, weights=None):
    """Sort ``keys`` within each segment ptr[i]:ptr[i + 1], in place; ``weights`` follow them.

    ptr: (S + 1,) int64 ascending, ptr[0] = 0, ptr[-1] = len(keys). keys: (n,) uint32.
    weights: (n,) float64 or None. Equal keys keep their order (a stable sort), so the weights'
    order is defined too. Returns (keys, weights), the same arrays."""
    for lo, hi in zip(ptr[:-1], ptr[1:]):
        order = np.argsort(keys[lo:hi], kind="stable")
        keys[lo:hi] = keys[lo:hi][order]
        if weights is not None:
            weights[lo:hi] = weights[lo:hi][order]
    return keys, weights


def segment_sums(values, starts, out):
    """Each segment's rows of ``values`` summed column by column, one row after another.

    values: (n, k) float64; starts: (S + 1,) int64 ascending, starts[0] = 0, starts[-1] = n;
    out: (S, k) float64, overwritten with out[s] = 0.0 + values[starts[s]] + values[starts[s] + 1]
    + ... in row order: every backend gets the same bits, and a segment's sums depend on its own
    rows alone (not on the segments beside it: the ranking objective's sums per query are then
    the same on any partitioning). Returns out."""
    for s in range(len(starts) - 1):
        total = np.zeros(values.shape[1])
        for r in range(int(starts[s]), int(starts[s + 1])):
            total = total + values[r]
        out[s] = total
    return out


def pair_order_counts(values, starts, query_of, out):
    """Each place's pairs with the places before it in its segment, as XGBoost's ranking auc
    counts them: out[b] = the sum over a in [starts[q], b) of 2 where values[a] > values[b]
    and 1 where they are equal and finite (q = query_of[b]; NaN is neither, and XGBoost's
    difference of two equal infinities is NaN).

    values: (n,) float32, each segment's places in the order the pairs follow (a query's
    documents by label, best first); starts: (S + 1,) int64; query_of: (n,) int64 each place's
    segment; out: (n,) int64, overwritten. Integers: every backend gets the same. Returns out."""
    for q in range(len(starts) - 1):
        first, end = int(starts[q]), int(starts[q + 1])
        v = np.asarray(values[first:end])
        before = np.tri(end - first, k=-1, dtype=bool).T  # [a, b]: a before b
        above = (v[:, None] > v[None, :]) & before
        equal = (v[:, None] == v[None, :]) & np.isfinite(v)[None, :] & before
        out[first:end] = 2 * above.sum(axis=0) + equal.sum(axis=0)
    return out


# The ranking objectives' pair kinds (``lambda_pairs``' kind): the metric whose change weighs a pair
RANK_NDCG, RANK_MAP, RANK_PAIRWISE = 0, 1, 2


def _lambda_pair(y, s, e, gain, discount, inv_ideal, relevant, acc, q, first, last, kind,
                 score_normalize, a, b):
    """The pair of places a < b of one query (positions in the model's order): (gradient of
    place b, curvature of each, push); zeros when their labels are equal."""
    y_top, y_low = y[a], y[b]
    if y_top == y_low:
        return 0.0, 0.0, 0.0
    if kind == RANK_NDCG:
        delta = abs((gain[a] - gain[b]) * (discount[a - first] - discount[b - first])) * \
            inv_ideal[q]
    elif kind == RANK_MAP:
        r_h, r_l = a - first + 1.0, b - first + 1.0
        between = acc[b - 1] - acc[a]
        if y_top < y_low:
            change = relevant[b] / r_l - (relevant[a] + 1.0) / r_h - between
        else:
            change = relevant[a] / r_h - relevant[b] / r_l + between
        delta = abs(change / relevant[last])
    else:
        delta = 1.0
    if score_normalize and s[first] != s[last]:
        delta = delta / (abs(s[a] - s[b]) + 0.01)
    high, low = (a, b) if y_top > y_low else (b, a)
    total = e[high] + e[low]
    if total > 0.0:
        sig = e[high] / total
    else:  # both underflowed: scores far apart
        sig = 1.0 if s[high] > s[low] else (0.0 if s[high] < s[low] else 0.5)
    push = (1.0 - sig) * delta
    curvature = max(sig * (1.0 - sig), 1e-16) * delta * 2.0
    return (push if y_top > y_low else -push), curvature, push


def lambda_pairs(y, s, e, gain, discount, inv_ideal, relevant, acc, starts, query_of, kind,
                 top_k, score_normalize, own, top):
    """LambdaMART's pair sums (XGBoost's top-k pairs: each of a query's first ``top_k`` places
    with every place below it), every array in the model's order (a query's rows by score).

    y, s: (n,) float64 labels and scores; e: (n,) float64 exp(score - the query's first score)
    (so sigmoid(s_a - s_b) = e_a / (e_a + e_b) with no exp here: every backend's bits agree);
    gain: (n,) float64 NDCG gains; discount: (D,) float64 NDCG discount of each place (D >= the
    largest query); inv_ideal: (Q,) float64 1 / ideal DCG (0 for none); relevant, acc: (n,)
    float64 MAP's prefix statistics (relevant places so far, sum of label / place); arrays the
    kind does not read may be any (n,) or (Q,) float64. starts: (Q + 1,) int64; query_of: (n,)
    int64. kind: RANK_NDCG, RANK_MAP or RANK_PAIRWISE; score_normalize: divide each pair's weight
    by |s_a - s_b| + 0.01 unless the query's scores are all equal.

    Outputs (overwritten): own (n, 3) float64, each place's sums over its pairs with the places
    above it (gradient, hessian, push); top (Q, top_k, 2) float64, each top place's sums over
    its pairs with the places below it (gradient, hessian; 0 past the query's end). Sums run
    in place order from 0.0. Returns (own, top)."""
    for q in range(len(starts) - 1):
        first, end = int(starts[q]), int(starts[q + 1])
        args = (y, s, e, gain, discount, inv_ideal, relevant, acc, q, first, end - 1, kind,
                score_normalize)
        for b in range(first, end):
            g = h = p = 0.0
            for a in range(first, min(first + top_k, b)):
                dg, dh, dp = _lambda_pair(*args, a, b)
                g, h, p = g + dg, h + dh, p + dp
            own[b] = (g, h, p)
        for i in range(top_k):
            g = h = 0.0
            for b in range(first + i + 1, end):
                dg, dh, _ = _lambda_pair(*args, first + i, b)
                g, h = g - dg, h + dh
            top[q, i] = (g, h)
    return own, top
