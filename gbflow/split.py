"""Split finding for every node of a level at once, and leaf values (XGBoost's gain and weights)."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend import numpy_kernels


@dataclasses.dataclass
class LevelSplits:
    """Best split of each node of a level (host arrays, one entry per node).

    gain: float64 loss reduction (-inf: none). feature: int32 (-1: none). bin_threshold: int32,
    bins 1..t go left. default_left: bool, where missing values go. left_sum: (n, 2) int64 fixed-point
    [g, h] of the left child. do_split: bool, the split is taken.
    """

    gain: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_sum: np.ndarray
    do_split: np.ndarray


def find_splits(backend, hist, routing, allowed, scale_g, scale_h, params,
                fetch: list = ()) -> tuple[LevelSplits, list]:
    """Evaluate every candidate of every node in ``hist`` and keep each node's best.

    hist: ``histogram.Histograms`` on the backend's device (sparse common bins filled in).
    routing: ``routing.DeviceRouting``. allowed: (dense, sparse) bool device masks of the
    features this tree may use. Features come back as global ids. The dense and the sparse
    features are searched separately and the better result kept, a tie going to the lower
    feature id: the same choice as one search over all features in order. A split is taken when
    it improves the loss by more than ``gamma`` (and more than XGBoost's epsilon) and both
    children keep a hessian of at least ``min_child_weight``.

    fetch: other arrays (host or device) the caller needs on the host; they come back in the
    same device-to-host copy as the split results (one wait for the device per level). Returns
    (the splits, host copies of ``fetch``).
    """
    r = routing.routing
    constants = (1.0 / scale_g, 1.0 / scale_h, params.reg_lambda, params.reg_alpha,
                 params.min_child_weight)
    found = []
    if len(r.dense):
        found.append(backend.kernels.evaluate_splits(hist.dense, routing.n_value_bins_dense,
                                                     allowed[0], *constants))
    if r.has_sparse:
        # the host offsets: the CUDA wrapper needs their widest feature, which would otherwise
        # cost a device-to-host copy per level
        found.append(backend.kernels.evaluate_sparse_splits(
            hist.sparse, r.bin_offsets, routing.n_value_bins_sparse, allowed[1], *constants))
    on_host = backend.to_host_all([a for result in found for a in result] + list(fetch))
    fetched = on_host[5 * len(found):]
    results = [on_host[i : i + 5] for i in range(0, 5 * len(found), 5)]
    stores = ([r.dense] if len(r.dense) else []) + ([r.sparse] if r.has_sparse else [])
    best = None
    for (gain, feature, bin_threshold, default_left, left_sum), ids in zip(results, stores):
        feature = np.where(feature >= 0, ids[np.maximum(feature, 0)], -1).astype(feature.dtype)
        if best is None:
            best = [gain, feature, bin_threshold, default_left, left_sum]
            continue
        take = (feature >= 0) & ((gain > best[0]) | ((gain == best[0]) & (feature < best[1])))
        for i, values in enumerate((gain, feature, bin_threshold, default_left, left_sum)):
            best[i] = np.where(take.reshape((-1,) + (1,) * (values.ndim - 1)), values, best[i])
    gain, feature, bin_threshold, default_left, left_sum = best
    do_split = (feature >= 0) & (gain > max(params.gamma, _dtypes.MIN_SPLIT_IMPROVEMENT))
    return LevelSplits(gain, feature, bin_threshold, default_left, left_sum, do_split), fetched


def leaf_values(totals: np.ndarray, scale_g: float, scale_h: float, params) -> np.ndarray:
    """(n,) float64 leaf weights -T_alpha(G) / (H + lambda) * learning_rate from (n, 2) int64
    host sums (the formula of ``numpy_kernels.leaf_weights``, which the GPU's margin kernels
    follow to the bit)."""
    return numpy_kernels.leaf_weights(totals, *leaf_constants(scale_g, scale_h, params))


def leaf_constants(scale_g: float, scale_h: float, params) -> tuple:
    """(inv_scale_g, inv_scale_h, reg_lambda, reg_alpha, learning_rate): ``leaf_weights``'
    constants for a tree's fixed-point scales."""
    return (1.0 / scale_g, 1.0 / scale_h, params.reg_lambda, params.reg_alpha,
            params.learning_rate)
