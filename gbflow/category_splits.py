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
    n_categories: (C,) host int their category counts. allowed: (C,) device bool.
    constants: ``SplitRule.constants``. Returns device arrays: gain (N,) float64 (-inf: none),
    feature (N,) int32 store-local (-1: none), right_bins (N, B) bool (the bins that go right),
    default_left (N,) bool, left_sum (N, 2) int64. No side effects.
    """
    inv_g, inv_h, reg_lambda, reg_alpha, mcw = constants
    n_nodes, _, n_bins, _ = hist.shape
    n_cat = len(features)
    K = n_bins - 1
    feats = xp.asarray(np.asarray(features, dtype=np.int64))
    cats = hist[:, feats, 1:, :]  # (N, C, K, 2)
    missing = hist[:, feats, 0, :][:, :, None, :]  # (N, C, 1, 2)
    total = hist[:, 0, :, :].sum(axis=1)[:, None, None, :]  # (N, 1, 1, 2)
    count = xp.asarray(np.asarray(n_categories, dtype=np.int64))[None, :, None]
    position = xp.arange(K)[None, None, :]
    held = (cats[..., 0] != 0) | (cats[..., 1] != 0)
    allowed = xp.asarray(allowed)[None, :, None]
    onehot = count < rule.max_cat_to_onehot
    candidates = []  # (gain (N, C, m, 2 sides), right sums (N, C, m, 2 sides, 2))

    def add(right, valid, lam):
        with_missing = xp.stack([right, right + missing], axis=3)  # missing left, then right
        gain = _gains(xp, with_missing, total[:, :, :, None, :], inv_g, inv_h, lam, reg_alpha,
                      mcw, (valid & allowed)[..., None])
        candidates.append((gain, with_missing))

    n_onehot = max(0, min(K, rule.max_cat_to_onehot - 1))
    add(cats[:, :, :n_onehot], onehot & held[:, :, :n_onehot] & (position[:, :, :n_onehot] <
                                                                  count), reg_lambda)
    # sorted partitions: the sort keys of the categories with enough hessian
    H = cats[..., 1] * inv_h
    eligible = held & (position < count) & (H > 0) & (H >= rule.cat_smooth) & ~onehot
    key = xp.where(eligible, cats[..., 0] * inv_g, 0.0) / xp.where(eligible, H + rule.cat_smooth,
                                                                   1.0)
    n_eligible = eligible.sum(axis=2)[..., None]  # (N, C, 1)
    prefix = min(K, rule.max_cat_threshold)
    orders = []
    for sign in (1.0, -1.0):  # ascending keys, then descending: the prefix read from each end
        order = xp.argsort(xp.where(eligible, sign * key, np.inf), axis=2, kind="stable")
        orders.append(order)
        ordered = xp.take_along_axis(cats, order[..., :prefix, None], axis=2)
        # at least one sorted category stays left: the light ones never form a side alone
        add(xp.cumsum(ordered, axis=2), position[:, :, :prefix] + 1 < n_eligible,
            reg_lambda + rule.cat_l2)
    gain = xp.concatenate([g.reshape(n_nodes, n_cat, -1) for g, _ in candidates], axis=2)
    flat = gain.reshape(n_nodes, -1)
    best = xp.argmax(flat, axis=1)
    nodes = xp.arange(n_nodes)
    best_gain = flat[nodes, best]
    found = best_gain > -np.inf
    per_feature = gain.shape[2]
    c, at = best // per_feature, best % per_feature
    sizes = [2 * n_onehot, 2 * prefix, 2 * prefix]
    right = xp.concatenate([r.reshape(n_nodes, n_cat, -1, 2) for _, r in candidates], axis=2)
    right_sum = right[nodes, c, at]  # (N, 2)
    missing_right = (at % 2) == 1
    # the chosen set, as bins: one-hot (its category), or the first ``size`` of an order
    kind_onehot = at < sizes[0]
    in_desc = at >= sizes[0] + sizes[1]
    size = xp.where(in_desc, at - sizes[0] - sizes[1], at - sizes[0]) // 2 + 1
    chosen_order = xp.where(in_desc[:, None], orders[1][nodes, c], orders[0][nodes, c])  # (N, K)
    in_set = xp.arange(K)[None, :] < size[:, None]
    right_cats = xp.zeros((n_nodes, K), dtype=bool)
    right_cats[nodes[:, None], chosen_order] = in_set
    onehot_cats = xp.arange(K)[None, :] == (at // 2)[:, None]
    right_cats = xp.where(kind_onehot[:, None], onehot_cats, right_cats) & found[:, None]
    right_bins = xp.concatenate([xp.zeros((n_nodes, 1), dtype=bool), right_cats], axis=1)
    return (best_gain.astype(np.float64),
            xp.where(found, xp.asarray(np.asarray(features, dtype=np.int32))[c], -1)
            .astype(np.int32),
            right_bins,
            found & ~missing_right,
            xp.where(found[:, None], total[:, 0, 0, :] - right_sum, 0).astype(np.int64))
