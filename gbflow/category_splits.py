"""The best categorical split of every node of a level (one-hot and sorted-partition splits).

Each (node, feature) is scored by the backend's ``categorical_splits`` kernel (its NumPy twin
defines the candidates; numba and CUDA give the same results bit for bit, so a model does not
depend on the device); the scores come to the host with the level's other split results, and
``Scores.best`` picks each node's best feature and writes its category set there (NumPy).

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

from .backend.arrays import to_host
from .histogram import node_totals


@dataclasses.dataclass(frozen=True)
class CategoryRule:
    """The categorical split parameters (``Params``' names and meanings)."""

    max_cat_to_onehot: int
    max_cat_threshold: int
    cat_smooth: float
    cat_l2: float


@dataclasses.dataclass
class Scores:
    """A level's categorical scores as the kernels left them: per group of features searched
    together (the one-hot ones, the others) their positions in ``usable`` and the
    ``categorical_splits`` results, and the nodes' (N, 2) int64 totals; device arrays until
    fetched (``arrays``), then read on the host by ``best``."""

    usable: list  # (store-local feature, category count) of the features searched, ascending
    groups: list  # (positions in usable, the kernel's five results)
    total: object
    node_allowed: np.ndarray | None = None  # (N, len(usable)) host bool: per-node samples

    def arrays(self) -> list:
        """Every array ``best`` reads, in its order (to fetch them with other results)."""
        return [self.total] + [a for _, result in self.groups for a in result]

    def best(self, fetched: list, n_bins: int) -> tuple:
        """Each node's best categorical split from the host copies of ``arrays()``: gain (N,)
        float64 (-inf: none), feature (N,) int32 store-local (-1: none), right_bins (N, n_bins)
        bool (the bins that go right), default_left (N,) bool, left_sum (N, 2) int64. A tie
        goes to the earlier feature (the first best of the gains in feature order)."""
        total, rest = np.asarray(fetched[0]), fetched[1:]
        results = [rest[5 * i: 5 * i + 5] for i in range(len(self.groups))]
        n_nodes = len(total)
        right_bins = np.zeros((n_nodes, n_bins), dtype=bool)
        default_left = np.zeros(n_nodes, dtype=bool)
        left_sum = np.zeros((n_nodes, 2), dtype=np.int64)
        if not self.usable:
            return (np.full(n_nodes, -np.inf), np.full(n_nodes, -1, dtype=np.int32),
                    right_bins, default_left, left_sum)
        gain_table = np.full((n_nodes, len(self.usable)), -np.inf)
        for (members, _), result in zip(self.groups, results):
            gain_table[:, members] = result[0]
        if self.node_allowed is not None:
            gain_table[~self.node_allowed] = -np.inf
        choice = np.argmax(gain_table, axis=1)
        gain = gain_table[np.arange(n_nodes), choice]
        split = gain > -np.inf
        feature = np.where(split, np.array([f for f, _ in self.usable], dtype=np.int32)[choice],
                           np.int32(-1))
        for (members, _), (_, missing_right, right_sum, size, order) in zip(self.groups,
                                                                            results):
            column_of = np.full(len(self.usable), -1)
            column_of[members] = np.arange(len(members))
            here = np.flatnonzero(split & (column_of[choice] >= 0))
            j = column_of[choice[here]]
            default_left[here] = ~missing_right[here, j]
            left_sum[here] = total[here] - right_sum[here, j]
            # the first size[n, j] categories of order[n, j] go right: their bins k + 1
            goes = np.arange(order.shape[2])[None, :] < size[here, j][:, None]
            r, c = np.nonzero(goes)
            right_bins[here[r], order[here, j][r, c] + 1] = True
        return gain, feature, right_bins, default_left, left_sum


def score(kernels, hist, features: np.ndarray, n_categories: np.ndarray, allowed,
          constants: tuple, rule: CategoryRule, bounds=None) -> Scores:
    """Score every (node, categorical feature) of a store's histograms: the kernels queued, no
    wait for the device.

    kernels: the backend's kernel module (``categorical_splits`` scores every (node, feature)).
    hist: (N, D, B, 2) int64 device histograms of the dense store (every row in one bin of each
    feature). features: (C,) host int store-local ids of its categorical features, ascending;
    n_categories: (C,) host int their category counts. allowed: (C,) host bool, the features
    this tree may use (the others are not searched), or (N, C) per node. constants:
    ``SplitRule.constants``. bounds: None, or (max_delta_step, (N, 2) device node bounds,
    None): gains of bounded weights (``weight_bounds``). One kernel call for the one-hot
    features and one for the others, whatever their number.
    """
    inv_g, inv_h, reg_lambda, reg_alpha, mcw = constants
    allowed = np.asarray(allowed, dtype=bool)
    anywhere = allowed.any(axis=0) if allowed.ndim == 2 else allowed
    kept = [i for i, (k, ok) in enumerate(zip(n_categories, anywhere)) if k >= 1 and ok]
    usable = [(int(features[i]), int(n_categories[i])) for i in kept]
    groups = []
    total = node_totals(hist)
    if hist.shape[0]:
        for onehot in (True, False):
            members = [i for i, (_, k) in enumerate(usable)
                       if (k < rule.max_cat_to_onehot) == onehot]
            if members:
                groups.append((members, kernels.categorical_splits(
                    hist, total,
                    np.array([usable[i][0] for i in members], dtype=np.int64),
                    np.array([usable[i][1] for i in members], dtype=np.int64), onehot,
                    rule.max_cat_threshold, inv_g, inv_h, reg_lambda, reg_alpha, mcw,
                    rule.cat_smooth, rule.cat_l2, bounds=bounds)))
    return Scores(usable, groups, total, allowed[:, kept] if allowed.ndim == 2 else None)


def search(kernels, hist, features, n_categories, allowed, constants: tuple,
           rule: CategoryRule) -> tuple:
    """``score`` then ``Scores.best`` in one call (the split search fetches the scores with its
    other results instead): each node's best categorical split, as host arrays."""
    scores = score(kernels, hist, features, n_categories, allowed, constants, rule)
    fetched = [to_host(a) for a in scores.arrays()]
    return scores.best(fetched, hist.shape[2])
