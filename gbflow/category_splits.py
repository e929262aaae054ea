"""The best categorical split of every node of a level (one-hot and sorted-partition splits).

Written once against the array namespace: the same operations on NumPy and CuPy arrays, whose
results agree exactly (integer sums, IEEE float64 arithmetic without fused multiply-adds, stable
sorts), so a model does not depend on the device.

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

Ties are broken by position in the candidate order (feature, kind, set size, missing side) and
the sort by category: the first candidate of the best gain wins, on every device.
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


def _score(xp, G, H, reg_lambda, reg_alpha):
    t = xp.where(G > reg_alpha, G - reg_alpha, xp.where(G < -reg_alpha, G + reg_alpha, 0.0))
    return t * t / (H + reg_lambda)


def _gains(xp, right, total, inv_g, inv_h, lam, alpha, mcw, valid):
    """Gains of candidates whose right children hold ``right`` (..., 2) int64 (the left ones the
    rest of their node's ``total``, broadcast), -inf where not ``valid`` or a child is lighter
    than ``mcw``. lam: reg_lambda (+ cat_l2), broadcastable."""
    left = total - right
    GL, HL = left[..., 0] * inv_g, left[..., 1] * inv_h
    GR, HR = right[..., 0] * inv_g, right[..., 1] * inv_h
    GP, HP = total[..., 0] * inv_g, total[..., 1] * inv_h
    ok = valid & (HL >= mcw) & (HR >= mcw) & (HL + lam > 0) & (HR + lam > 0)
    safe = xp.where(ok, 1.0, 0.0)  # keeps the dropped candidates' arithmetic finite
    gain = (_score(xp, GL * safe, xp.where(ok, HL, 1.0), lam, alpha)
            + _score(xp, GR * safe, xp.where(ok, HR, 1.0), lam, alpha)) \
        - _score(xp, GP * safe, xp.where(ok, HP, 1.0), lam, alpha)
    return xp.where(ok, gain, -np.inf)


def search(xp, hist, features: np.ndarray, n_categories: np.ndarray, allowed, constants: tuple,
           rule: CategoryRule) -> tuple:
    """Each node's best categorical split in a store's histograms.

    hist: (N, D, B, 2) int64 device histograms of the dense store (every row in one bin of each
    feature). features: (C,) host int store-local ids of its categorical features;
    n_categories: (C,) host int their category counts. allowed: (C,) host bool, the features
    this tree may use (the others are not searched).
    constants: ``SplitRule.constants``. Returns device arrays: gain (N,) float64 (-inf: none),
    feature (N,) int32 store-local (-1: none), right_bins (N, B) bool (the bins that go right),
    default_left (N,) bool, left_sum (N, 2) int64. Features are searched one at a time, each
    over its own categories; a tie goes to the earlier feature. No side effects.
    """
    n_nodes, _, n_bins, _ = hist.shape
    total = hist[:, 0, :, :].sum(axis=1)  # (N, 2)
    gain = xp.full(n_nodes, -np.inf)
    feature = xp.full(n_nodes, -1, dtype=np.int32)
    right_bins = xp.zeros((n_nodes, n_bins), dtype=bool)
    default_left = xp.zeros(n_nodes, dtype=bool)
    left_sum = xp.zeros((n_nodes, 2), dtype=np.int64)
    for f, count, usable in zip(features, n_categories, allowed):
        if count < 1 or not usable:
            continue
        found = _feature_search(xp, hist[:, int(f), : int(count) + 1], total, constants, rule)
        take = found[0] > gain
        gain = xp.where(take, found[0], gain)
        feature = xp.where(take, np.int32(f), feature)
        right_bins[:, : int(count) + 1] = xp.where(take[:, None], found[1],
                                                   right_bins[:, : int(count) + 1])
        right_bins[:, int(count) + 1:] &= ~take[:, None]
        default_left = xp.where(take, found[2], default_left)
        left_sum = xp.where(take[:, None], found[3], left_sum)
    return gain, feature, right_bins, default_left, left_sum


def _feature_search(xp, hist, total, constants: tuple, rule: CategoryRule) -> tuple:
    """One categorical feature's best split per node: hist (N, K + 1, 2) int64 (missing bin,
    then its K categories), total (N, 2) int64. Returns gain
    (N,), right_bins (N, K + 1) bool, default_left (N,), left_sum (N, 2)."""
    inv_g, inv_h, reg_lambda, reg_alpha, mcw = constants
    n_nodes, width, _ = hist.shape
    K = width - 1
    cats = hist[:, 1:, :]  # (N, K, 2)
    missing = hist[:, 0:1, :]  # (N, 1, 2)
    node_total = total[:, None, None, :]  # (N, 1, 1, 2)
    position = xp.arange(K)[None, :]
    held = (cats[..., 0] != 0) | (cats[..., 1] != 0)
    candidates = []  # gains (N, m, 2 sides) and right sums (N, m, 2 sides, 2)

    def add(right, valid, lam):
        with_missing = xp.stack([right, right + missing], axis=2)  # missing left, then right
        candidates.append((_gains(xp, with_missing, node_total, inv_g, inv_h, lam, reg_alpha,
                                  mcw, valid[..., None]), with_missing))

    onehot = K < rule.max_cat_to_onehot
    if onehot:
        add(cats, held, reg_lambda)
        order, prefix = None, 0
    else:
        H = cats[..., 1] * inv_h
        eligible = held & (H > 0) & (H >= rule.cat_smooth)
        key = xp.where(eligible, cats[..., 0] * inv_g, 0.0) / \
            xp.where(eligible, H + rule.cat_smooth, 1.0)
        n_eligible = eligible.sum(axis=1)[:, None]  # (N, 1)
        prefix = min(K, rule.max_cat_threshold)
        order = []
        for sign in (1.0, -1.0):  # ascending keys, then descending: a prefix from each end
            sorted_at = xp.argsort(xp.where(eligible, sign * key, np.inf), axis=1, kind="stable")
            order.append(sorted_at)
            ordered = xp.take_along_axis(cats, sorted_at[:, :prefix, None], axis=1)
            # at least one sorted category stays left: the light ones never form a side alone
            add(xp.cumsum(ordered, axis=1), position[:, :prefix] + 1 < n_eligible,
                reg_lambda + rule.cat_l2)
    gain = xp.concatenate([g.reshape(n_nodes, -1) for g, _ in candidates], axis=1)
    right = xp.concatenate([r.reshape(n_nodes, -1, 2) for _, r in candidates], axis=1)
    best = xp.argmax(gain, axis=1)
    nodes = xp.arange(n_nodes)
    best_gain = gain[nodes, best]
    found = best_gain > -np.inf
    right_sum = right[nodes, best]
    missing_right = (best % 2) == 1
    if onehot:
        right_cats = position == (best // 2)[:, None]
    else:  # the first ``size`` categories of the chosen order
        descending = best >= 2 * prefix
        size = xp.where(descending, best - 2 * prefix, best) // 2 + 1
        chosen = xp.where(descending[:, None], order[1], order[0])
        right_cats = xp.zeros((n_nodes, K), dtype=bool)
        right_cats[nodes[:, None], chosen] = position < size[:, None]
    right_bins = xp.concatenate([xp.zeros((n_nodes, 1), dtype=bool), right_cats & found[:, None]],
                                axis=1)
    return (best_gain, right_bins, found & ~missing_right,
            xp.where(found[:, None], total - right_sum, 0).astype(np.int64))
