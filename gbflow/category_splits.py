"""The best categorical split of every node of a level (one-hot and sorted-partition splits).

Each (node, feature) is scored by the backend's ``categorical_splits`` kernel (its NumPy twin
defines the candidates; numba and CUDA give the same results bit for bit); this module picks
each node's best feature and forms its category set with array-namespace code, the same on
NumPy and CuPy, so a model does not depend on the device.

A categorical feature of K categories has bins 1..K (category k at bin k + 1 in the sorted
value list) and the missing bin 0. A split sends a set S of categories right and the others
left (XGBoost's convention); missing values go left or right, whichever is better, as for
numeric splits.

- K < ``max_cat_to_onehot``: S is one category (every category is tried).
- Otherwise (LightGBM's and XGBoost's sorted partition): the categories holding at least
  ``cat_smooth`` hessian are sorted by G / (H + cat_smooth), and S is a prefix of that order,
  read from either end, of at most ``max_cat_threshold`` categories and never all of them; the
  categories left out of the sort stay left (with at least one sorted category). These gains
  are regularised with reg_lambda + ``cat_l2`` (LightGBM's cat_l2), which keeps
  high-cardinality columns from winning on noise.

Ties are broken by position in the candidate order (feature, direction, set size, missing side)
and the sort by category: the first candidate of the best gain wins, on every device.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class CategoryRule:
    """The categorical split parameters (``Params``' names and meanings)."""

    max_cat_to_onehot: int
    max_cat_threshold: int
    cat_smooth: float
    cat_l2: float


def search(xp, kernels, hist, features: np.ndarray, n_categories: np.ndarray, allowed,
           constants: tuple, rule: CategoryRule) -> tuple:
    """Each node's best categorical split in a store's histograms.

    kernels: the backend's kernel module (``categorical_splits`` scores every (node, feature)).
    hist: (N, D, B, 2) int64 device histograms of the dense store (every row in one bin of each
    feature). features: (C,) host int store-local ids of its categorical features, ascending;
    n_categories: (C,) host int their category counts. allowed: (C,) host bool, the features
    this tree may use (the others are not searched).
    constants: ``SplitRule.constants``. Returns device arrays: gain (N,) float64 (-inf: none),
    feature (N,) int32 store-local (-1: none), right_bins (N, B) bool (the bins that go right),
    default_left (N,) bool, left_sum (N, 2) int64. A tie goes to the earlier feature. No side
    effects. One kernel call for the one-hot features and one for the others, whatever their
    number: a handful of device operations a level.
    """
    inv_g, inv_h, reg_lambda, reg_alpha, mcw = constants
    n_nodes, _, n_bins, _ = hist.shape
    total = hist[:, 0, :, :].sum(axis=1)  # (N, 2)
    usable = [(int(f), int(k)) for f, k, ok in zip(features, n_categories, allowed)
              if k >= 1 and ok]
    right_bins = xp.zeros((n_nodes, n_bins), dtype=bool)
    if not usable or not n_nodes:
        return (xp.full(n_nodes, -np.inf), xp.full(n_nodes, -1, dtype=np.int32), right_bins,
                xp.zeros(n_nodes, dtype=bool), xp.zeros((n_nodes, 2), dtype=np.int64))
    groups = []  # (positions in ``usable``, the kernel's results)
    for onehot in (True, False):
        members = [i for i, (_, k) in enumerate(usable) if (k < rule.max_cat_to_onehot) == onehot]
        if members:
            groups.append((members, kernels.categorical_splits(
                hist, total, np.array([usable[i][0] for i in members], dtype=np.int64),
                np.array([usable[i][1] for i in members], dtype=np.int64), onehot,
                rule.max_cat_threshold, inv_g, inv_h, reg_lambda, reg_alpha, mcw,
                rule.cat_smooth, rule.cat_l2)))
    # every usable feature's gains in feature order: the first best is the earliest feature
    placed = np.concatenate([members for members, _ in groups])
    gain_table = xp.concatenate([result[0] for _, result in groups], axis=1)
    if not np.array_equal(placed, np.arange(len(usable))):
        gain_table = gain_table[:, xp.asarray(np.argsort(placed))]
    choice = xp.argmax(gain_table, axis=1)
    nodes = xp.arange(n_nodes)
    gain = gain_table[nodes, choice]
    split = gain > -np.inf
    feature = xp.where(split, xp.asarray(np.array([f for f, _ in usable], np.int32))[choice],
                       np.int32(-1))
    default_left = xp.zeros(n_nodes, dtype=bool)
    left_sum = xp.zeros((n_nodes, 2), dtype=np.int64)
    for members, (_, missing_right, right_sum, size, order) in groups:
        column_of = np.full(len(usable), -1, dtype=np.int64)
        column_of[members] = np.arange(len(members))
        column = xp.asarray(column_of)[choice]  # the chosen feature's column here, -1: none
        here = split & (column >= 0)
        column = xp.maximum(column, 0)
        default_left = xp.where(here, ~missing_right[nodes, column], default_left)
        left_sum = xp.where(here[:, None], total - right_sum[nodes, column], left_sum)
        # the chosen categories' bins (k + 1) go right; every other write is False to bin 0
        goes = here[:, None] & (xp.arange(order.shape[2])[None, :] < size[nodes, column][:, None])
        right_bins[nodes[:, None], xp.where(goes, order[nodes, column] + 1, 0)] = goes
    return gain, feature, right_bins, default_left, left_sum
