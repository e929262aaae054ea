"""The best split of every node of a level, over every column store at once (XGBoost's gain)."""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class LevelSplits:
    """Best split of each node of a level (host arrays, one entry per node).

    gain: float64 loss reduction (-inf: none). feature: int32 global id (-1: none).
    bin_threshold: int32, bins 1..t go left (0: no value bin does; the present values are split
    from the missing ones). default_left: bool, where missing values go. left_sum: (n, 2) int64
    fixed-point [g, h] of the left child. do_split: bool, the split is taken.
    """

    gain: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_sum: np.ndarray
    do_split: np.ndarray


def find_splits(backend, stores: list, hist, feature_allowed: np.ndarray, constants: tuple,
                min_gain: float, fetch: list = ()) -> tuple[LevelSplits, list]:
    """Evaluate every candidate of every node in ``hist`` and keep each node's best.

    stores: the shard set's column stores; hist: ``histogram.Histograms`` in their order, on the
    device (common bins filled in). feature_allowed: (F,) host bool, the features this tree may
    use. constants: ``SplitRule.constants``. Each store is searched on its own and, per node, the
    better result kept, a tie going to the lower feature id: the choice one search over all
    features in order would make. A split is taken when its gain exceeds ``min_gain``.

    fetch: other arrays (host or device) the caller needs on the host; they come back in the
    same device-to-host copy as the split results (one wait for the device per level). Returns
    (the splits, host copies of ``fetch``).
    """
    searched = [store for store in stores if store.n_features]
    found = [store.search(array, store.allowed(feature_allowed), constants)
             for store, array in zip(stores, hist.arrays) if store.n_features]
    on_host = backend.to_host_all([a for result in found for a in result] + list(fetch))
    fetched = on_host[5 * len(found):]
    best = None
    for i, store in enumerate(searched):
        gain, feature, bin_threshold, default_left, left_sum = on_host[5 * i: 5 * i + 5]
        feature = np.where(feature >= 0, store.features[np.maximum(feature, 0)],
                           -1).astype(feature.dtype)
        if best is None:
            best = [gain, feature, bin_threshold, default_left, left_sum]
            continue
        take = (feature >= 0) & ((gain > best[0]) | ((gain == best[0]) & (feature < best[1])))
        for j, values in enumerate((gain, feature, bin_threshold, default_left, left_sum)):
            best[j] = np.where(take.reshape((-1,) + (1,) * (values.ndim - 1)), values, best[j])
    gain, feature, bin_threshold, default_left, left_sum = best
    do_split = (feature >= 0) & (gain > min_gain)
    return LevelSplits(gain, feature, bin_threshold, default_left, left_sum, do_split), fetched
