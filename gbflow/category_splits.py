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
  are regularised with reg_lambda + ``cat_l2`` (LightGBM's cat_l2).

A sorted partition is chosen among the 2^m sets of a node's m sorted categories by the same
gradients it is scored on, so it finds gain in pure noise, and the more categories the more:
on a column of thousands of categories that carry no signal it would beat every real split.
Each sorted-partition gain therefore pays ``cat_noise_penalty`` x D x ``noise_gain(m, P)``:
``noise_gain`` is the gain the best prefix of m categories finds where every category's true
effect is equal (in units of one category's gradient variance per unit of hessian), and D
(``CategoryRule.dispersion``) is that variance per unit of hessian over the tree's rows,
sum(g^2) / sum(h) (``gradient_dispersions``: 1 for a calibrated logistic loss). What is left
is the gain beyond what noise alone would give, which competes with the feature's value-order
split and the other features: a set must find signal to win. The penalty is the same for every
candidate of a (node, feature), so it never changes which set a feature offers, only whether
it is taken; one-hot features (fewer than ``max_cat_to_onehot`` categories) pay none.

Ties are broken by position in the candidate order (feature, direction, set size, missing side)
and the sort by category: the first candidate of the best gain wins, on every device.
"""
from __future__ import annotations

import dataclasses
import functools
from statistics import NormalDist

import numpy as np

from .backend.arrays import to_host
from .fixed_point import fixed_point_scale, to_fixed
from .histogram import node_totals


@dataclasses.dataclass(frozen=True)
class CategoryRule:
    """The categorical split parameters (``Params``' names and meanings)."""

    max_cat_to_onehot: int
    max_cat_threshold: int
    cat_smooth: float
    cat_l2: float
    cat_noise_penalty: float = 1.0
    # the tree's gradient variance per unit of hessian (``gradient_dispersions``), set per tree
    dispersion: float = 1.0

    def penalises(self, n_categories) -> bool:
        """Whether sorted-partition gains pay a noise penalty for features of these category
        counts (then each tree needs its ``dispersion``)."""
        return self.cat_noise_penalty > 0 and \
            any(int(k) >= self.max_cat_to_onehot for k in n_categories)

    def penalty(self, eligible: np.ndarray) -> np.ndarray:
        """The gain a sorted partition pays at ``eligible`` (any shape, int) sorted categories:
        cat_noise_penalty x dispersion x ``noise_gain``, float64 of the same shape."""
        eligible = np.asarray(eligible, dtype=np.int64)
        largest = int(eligible.max()) if eligible.size else 0
        table = _noise_gains(self.max_cat_threshold, largest + 1)
        return self.cat_noise_penalty * self.dispersion * table[eligible]


_NOISE_TABLES: dict = {}  # max_cat_threshold -> the largest table of noise_gain made so far


def _noise_gains(max_cat_threshold: int, size: int) -> np.ndarray:
    """(at least size,) float64, read only: ``noise_gain(m, max_cat_threshold)`` at m = 0, 1,
    ..., made once per threshold and grown to the next power of two when a larger count comes
    (instead of a lookup per value every level)."""
    table = _NOISE_TABLES.get(max_cat_threshold)
    if table is None or len(table) < size:
        size = 1 << max(int(size) - 1, 0).bit_length()
        table = np.array([noise_gain(m, max_cat_threshold) for m in range(size)],
                         dtype=np.float64)
        table.flags.writeable = False
        _NOISE_TABLES[max_cat_threshold] = table
    return table


@functools.lru_cache(maxsize=1 << 16)
def noise_gain(m: int, max_cat_threshold: int) -> float:
    """The gain the best sorted-partition split of ``m`` categories finds when they differ by
    noise alone (float, in units of a category's gradient variance per unit of hessian; 0 for
    m < 2).

    Each category's standardised mean is then a standard normal draw; a set of r of the m sorted
    categories (r <= max_cat_threshold, at most half, as the search reads prefixes from both
    ends) separates a between-group sum of squares S_r^2 m / (r (m - r)), S_r the sum of the r
    largest draws' deviations from their mean. With the expected order statistics as a
    continuous quantile function, S_r = m pdf(t), t = the (1 - r/m) quantile, so the gain is
    m pdf(t)^2 / (q (1 - q)) at q = r/m; it grows with q up to one half (2m/pi there), so it
    is about 2m/pi up to m = 2 max_cat_threshold and grows slowly beyond (m = 1,000 at the
    default 64: 262). Against a Monte Carlo of the search's both-ended scan it is within 10%
    for m >= 5 (5-9% low where max_cat_threshold binds hard, e.g. 1 or 8) and 22% high at
    m = 2; tests/test_categorical.py compares it with the search itself."""
    if m < 2:
        return 0.0
    q = min(max_cat_threshold, m - 1, m / 2) / m
    normal = NormalDist()
    return m * normal.pdf(normal.inv_cdf(1.0 - q)) ** 2 / (q * (1.0 - q))


def gradient_dispersions(backend, collective, grad_hess: list, largest: np.ndarray,
                         n_rows: int) -> np.ndarray:
    """(n_groups,) float64: per output k, sum(g^2) / sum(h) over every row of every process
    (``CategoryRule.dispersion``; 1.0 where the hessians sum to 0).

    grad_hess: per row set the (n, n_groups) float gradients and hessians (rows sampled out hold
    0); largest: (n_groups, 2) the global bounds on |g| and |h| (``boosting``'s); n_rows: the
    global row count. Both sums are exact integer sums of fixed-point values (``fixed_point``),
    so the result does not depend on how the rows are split into parts or processes. One copy
    from the device and one reduction, for every output at once."""
    xp = backend.xp
    n_groups = largest.shape[0]
    scales = [(fixed_point_scale(float(largest[k, 0]) ** 2, n_rows),
               fixed_point_scale(float(largest[k, 1]), n_rows)) for k in range(n_groups)]
    local = backend.to_host_all([
        xp.stack([xp.stack([to_fixed(xp, g[:, k].astype(xp.float64) ** 2, s2).sum(),
                            to_fixed(xp, h[:, k], sh).sum()])
                  for k, (s2, sh) in enumerate(scales)])
        for g, h in grad_hess if len(g)])
    sums = np.zeros(2 * n_groups, dtype=np.int64)
    for part in local:  # each part's sums, and their total, stay below 2**62 (the scales')
        sums += np.asarray(part, dtype=np.int64).reshape(-1)
    # (NCCL sums on the device: to_host takes either)
    sums = to_host(collective.allreduce_sum(sums)).reshape(n_groups, 2)
    return np.array([(int(s) / s2) / (int(h) / sh) if h > 0 else 1.0
                     for (s, h), (s2, sh) in zip(sums, scales)], dtype=np.float64)


@dataclasses.dataclass
class Scores:
    """A level's categorical scores as the kernels left them: per group of features searched
    together (the one-hot ones, the others) their positions in ``usable`` and the
    ``categorical_splits`` results, and the nodes' (N, 2) int64 totals; device arrays until
    fetched (``arrays``), then read on the host by ``best``."""

    usable: list  # (store-local feature, category count) of the features searched, ascending
    groups: list  # (positions in usable, the kernel's six results)
    total: object
    node_allowed: np.ndarray | None = None  # (N, len(usable)) host bool: per-node samples
    rule: CategoryRule | None = None  # with the tree's dispersion: the noise penalty

    def arrays(self) -> list:
        """Every array ``best`` reads, in its order (to fetch them with other results)."""
        return [self.total] + [a for _, result in self.groups for a in result]

    def best(self, fetched: list, n_bins: int) -> tuple:
        """Each node's best categorical split from the host copies of ``arrays()``: gain (N,)
        float64 (-inf: none), feature (N,) int32 store-local (-1: none), right_bins (N, n_bins)
        bool (the bins that go right), default_left (N,) bool, left_sum (N, 2) int64. A tie
        goes to the earlier feature (the first best of the gains in feature order)."""
        total, rest = np.asarray(fetched[0]), fetched[1:]
        results = [rest[6 * i: 6 * i + 6] for i in range(len(self.groups))]
        n_nodes = len(total)
        right_bins = np.zeros((n_nodes, n_bins), dtype=bool)
        default_left = np.zeros(n_nodes, dtype=bool)
        left_sum = np.zeros((n_nodes, 2), dtype=np.int64)
        if not self.usable:
            return (np.full(n_nodes, -np.inf), np.full(n_nodes, -1, dtype=np.int32),
                    right_bins, default_left, left_sum)
        gain_table = np.full((n_nodes, len(self.usable)), -np.inf)
        penalised = self.rule is not None and self.rule.cat_noise_penalty > 0
        for (members, _), result in zip(self.groups, results):
            gain_table[:, members] = result[0]
            # the gain beyond what noise alone finds (module docstring); one-hot features
            # sort nothing (n_sorted 0) and pay noise_gain(0) = 0
            if penalised and result[5].any():
                gain_table[:, members] -= self.rule.penalty(result[5])
        if self.node_allowed is not None:
            gain_table[~self.node_allowed] = -np.inf
        choice = np.argmax(gain_table, axis=1)
        gain = gain_table[np.arange(n_nodes), choice]
        split = gain > -np.inf
        feature = np.where(split, np.array([f for f, _ in self.usable], dtype=np.int32)[choice],
                           np.int32(-1))
        for (members, _), (_, missing_right, right_sum, size, order, _) in zip(self.groups,
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
          constants: tuple, rule: CategoryRule, bounds=None, narrowest: tuple = (0, None)
          ) -> Scores:
    """Score every (node, categorical feature) of a store's histograms: the kernels queued, no
    wait for the device.

    kernels: the backend's kernel module (``categorical_splits`` scores every (node, feature)).
    hist: (N, D, B, 2) int64 device histograms of the dense store (every row in one bin of each
    feature). features: (C,) host int store-local ids of its categorical features, ascending;
    n_categories: (C,) host int their category counts. allowed: (C,) host bool, the features
    this tree may use (the others are not searched), or (N, C) per node. constants:
    ``SplitRule.constants``. bounds: None, or (max_delta_step, (N, 2) device node bounds,
    None): gains of bounded weights (``weight_bounds``). narrowest: (store-local feature, bins)
    whose bins the nodes' totals are summed from (``DenseStore.narrowest``). One kernel call
    for the one-hot features and one for the others, whatever their number.
    """
    inv_g, inv_h, reg_lambda, reg_alpha, mcw = constants
    allowed = np.asarray(allowed, dtype=bool)
    anywhere = allowed.any(axis=0) if allowed.ndim == 2 else allowed
    kept = [i for i, (k, ok) in enumerate(zip(n_categories, anywhere)) if k >= 1 and ok]
    usable = [(int(features[i]), int(n_categories[i])) for i in kept]
    groups = []
    total = node_totals(hist, *narrowest)
    if hist.shape[0]:
        for onehot in (True, False):
            members = [i for i, (_, k) in enumerate(usable)
                       if (k < rule.max_cat_to_onehot) == onehot]
            if not members:
                continue
            groups.append((members, kernels.categorical_splits(
                hist, total,
                np.array([usable[i][0] for i in members], dtype=np.int64),
                np.array([usable[i][1] for i in members], dtype=np.int64), onehot,
                rule.max_cat_threshold, inv_g, inv_h, reg_lambda, reg_alpha, mcw,
                rule.cat_smooth, rule.cat_l2, bounds=bounds)))
    return Scores(usable, groups, total, allowed[:, kept] if allowed.ndim == 2 else None,
                  rule)


def search(kernels, hist, features, n_categories, allowed, constants: tuple,
           rule: CategoryRule) -> tuple:
    """``score`` then ``Scores.best`` in one call (the split search fetches the scores with its
    other results instead): each node's best categorical split, as host arrays."""
    scores = score(kernels, hist, features, n_categories, allowed, constants, rule)
    fetched = [to_host(a) for a in scores.arrays()]
    return scores.best(fetched, hist.shape[2])
