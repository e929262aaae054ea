"""The best split of every node of a level, over every column store at once (XGBoost's gain)."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import category_splits
from .backend.common import better_splits


@dataclasses.dataclass
class LevelSplits:
    """Best split of each node of a level (host arrays, one entry per node).

    gain: float64 loss reduction (-inf: none). feature: int32 global id (-1: none).
    bin_threshold: int32, bins 1..t go left (0: no value bin does; the present values are split
    from the missing ones). default_left: bool, where missing values go. left_sum: (n, 2) int64
    fixed-point [g, h] of the left child. do_split: bool, the split is taken. right_bins:
    None without categorical features, else (n, n_bins) bool, on a category split (a set of
    categories, ``on_categories``) the bins that go right (bin_threshold is then 0 and not
    used). on_categories: None, or (n,) bool, the nodes whose split is a category set; a
    categorical feature may also split by value order (bins 1..t left), as a numeric one.
    """

    gain: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_sum: np.ndarray
    do_split: np.ndarray
    right_bins: np.ndarray | None = None
    on_categories: np.ndarray | None = None

    def take(self, nodes: np.ndarray) -> "LevelSplits":
        """The splits of the listed nodes (positions), in that order."""
        return LevelSplits(*(None if value is None else value[nodes] for value in
                             (getattr(self, f.name) for f in dataclasses.fields(self))))

    @classmethod
    def concatenate(cls, parts: list) -> "LevelSplits":
        """One ``LevelSplits`` of the nodes of every part, in order (parts of one training:
        all with category sets or none)."""
        return cls(*(None if values[0] is None else np.concatenate(values) for values in
                     zip(*([getattr(part, f.name) for f in dataclasses.fields(cls)]
                           for part in parts))))

    def category_sets(self, sp: np.ndarray):
        """None when no node of ``sp`` (split positions) splits by a category set; else
        (n_split, n_bins) bool, the bins going right of those that do (rows of False for the
        others)."""
        on = self._on_categories(sp)
        if on is None:
            return None
        sets = np.zeros((len(sp), self.right_bins.shape[1]), dtype=bool)
        sets[on] = self.right_bins[sp[on]]
        return sets

    def _on_categories(self, sp: np.ndarray):
        """(len(sp),) bool: which splits of ``sp`` are by category set; None when none is."""
        on = None if self.on_categories is None else self.on_categories[sp]
        return on if on is not None and on.any() else None

    def partition_sides(self, sp: np.ndarray, n_bins: int) -> tuple:
        """(side_map, thresholds) the partition reads the nodes of ``sp`` through: with category
        sets every split node's side comes from its bin map (``side_map``) at threshold 1; else
        no map and the bin thresholds."""
        side_map = self.side_map(sp, n_bins)
        return side_map, (self.bin_threshold[sp] if side_map is None else
                          np.ones(len(sp), dtype=np.int32))

    def orders_values(self, sp: np.ndarray) -> np.ndarray:
        """(n_split,) bool: the splits of ``sp`` that cut the values in order (a value bin to
        the left, not a category set); only those bound a monotone feature's subtrees."""
        ordered = self.bin_threshold[sp] > 0
        if self.on_categories is not None:
            ordered &= ~self.on_categories[sp]
        return ordered

    def side_map(self, sp: np.ndarray, n_bins: int):
        """None when no node of ``sp`` splits by a category set; else (n_split, n_bins) uint8,
        each split's bins mapped to 0 (missing), 1 (left) or 2 (right): the partition reads a
        node's side through it (with bin threshold 1), one rule for both kinds of split."""
        on = self._on_categories(sp)
        if on is None:
            return None
        if self.right_bins.shape[1] != n_bins:
            raise ValueError(f"side_map: the category sets are {self.right_bins.shape[1]} bins "
                             f"wide, the histograms {n_bins}")
        # bool, then the same bytes as uint8 (no int64 temporaries: the map is n_split x
        # n_bins, thousands of bins with many categories)
        right = np.arange(n_bins, dtype=np.int32)[None, :] > self.bin_threshold[sp][:, None]
        right[on] = self.right_bins[sp[on]]
        sides = right.view(np.uint8)
        sides += np.uint8(1)
        sides[:, 0] = 0
        return sides


def search_nodes(shardset, rules, constants: tuple, hist, allowed: np.ndarray, paths,
                 node_bounds, fetch: list = ()) -> tuple[LevelSplits, list]:
    """``find_splits`` for a tree's nodes under ``rules`` (a ``rules.TreeRules``): ``allowed``
    (F,) or (n, F) host bool and-ed with the interaction sets' rows of the nodes' ``paths``,
    each node's weight ``node_bounds`` ((n, 2), with rules.bounds), on ``shardset``'s stores."""
    if rules.interactions is not None:
        allowed = allowed & rules.interactions.allowed(paths)
    backend = shardset.backend
    return find_splits(backend, shardset.stores, hist, allowed, constants, rules.split.min_gain,
                       fetch=fetch, categorical=shardset.categorical,
                       category_rule=rules.category,
                       bounds=None if rules.bounds is None else
                       rules.bounds.search_bounds(backend.xp, node_bounds))


def find_splits(backend, stores: list, hist, feature_allowed: np.ndarray, constants: tuple,
                min_gain: float, fetch: list = (), categorical: np.ndarray | None = None,
                category_rule: category_splits.CategoryRule | None = None, bounds=None
                ) -> tuple[LevelSplits, list]:
    """Evaluate every candidate of every node in ``hist`` and keep each node's best.

    stores: the shard set's column stores; hist: ``histogram.Histograms`` in their order, on the
    device (common bins filled in). feature_allowed: host bool, the features the nodes may use:
    (F,) for all, or (n_nodes, F) one row per node in the level's order. constants:
    ``SplitRule.constants``. Each store is searched on its own and, per node, the better
    result kept, a tie going to the lower feature id: the choice one search over all
    features in order would make. A split is taken when its gain exceeds ``min_gain``.
    categorical: None, or (F,) host bool: those features (all in the dense store) are scored
    by ``category_splits.score`` with ``category_rule`` too (each node's best set chosen on the
    host by ``Scores.best``): a category set competes with
    their value-order splits (bins in the sorted value order, which a set must beat by the
    penalty its gain pays), the value-order split winning ties. bounds: None, or the level's
    bounded weights (``WeightBounds.search_bounds``: max_delta_step, (n_nodes, 2) device node
    bounds, (F,) host monotone signs or None), which every search takes.

    fetch: other arrays (host or device) the caller needs on the host; they come back in the
    same device-to-host copy as the split results (one wait for the device per level). Returns
    (the splits, host copies of ``fetch``).
    """
    if categorical is not None and not categorical.any():
        categorical = None
    searched = [store for store in stores if store.n_features]
    found = [store.search(array, store.allowed(feature_allowed), constants, bounds)
             for store, array in zip(stores, hist.arrays) if store.n_features]
    scores = None
    if categorical is not None:
        dense = stores[0]
        local = np.flatnonzero(categorical[dense.features])
        scores = category_splits.score(
            backend.kernels, hist.arrays[0], local, dense.n_value_bins_host[local],
            feature_allowed[..., dense.features[local]], constants, category_rule,
            None if bounds is None else bounds[:2] + (None,), dense.narrowest)
    extra = [] if scores is None else scores.arrays()
    on_host = backend.to_host_all([a for result in found for a in result] + list(fetch) + extra)
    results = [on_host[5 * i: 5 * i + 5] for i in range(len(found))]
    fetched = on_host[5 * len(found): 5 * len(found) + len(fetch)]
    right_bins = None
    if scores is not None:  # the category sets, chosen on the host: the last result
        gain, feature, right_bins, default_left, left_sum = scores.best(
            on_host[len(on_host) - len(extra):], hist.arrays[0].shape[2])
        results.append([gain, feature, np.zeros(len(gain), dtype=np.int32), default_left,
                        left_sum])
        searched.append(dense)
    best, on_categories = None, None
    for i, (store, result) in enumerate(zip(searched, results)):
        gain, feature, bin_threshold, default_left, left_sum = result
        feature = np.where(feature >= 0, store.features[np.maximum(feature, 0)],
                           -1).astype(feature.dtype)
        result = (gain, feature, bin_threshold, default_left, left_sum)
        if best is None:
            best = result
            continue
        best, take = better_splits(best, result)
        if right_bins is not None and i == len(searched) - 1:  # the category sets' result
            on_categories = take
    gain, feature, bin_threshold, default_left, left_sum = best
    do_split = (feature >= 0) & (gain > min_gain)
    return LevelSplits(gain, feature, bin_threshold, default_left, left_sum, do_split,
                       right_bins, on_categories), fetched
