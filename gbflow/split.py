"""Split finding for every node of a level at once, and leaf values (XGBoost's gain and weights)."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes


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


def find_splits(backend, hist, n_value_bins, feature_allowed, scale_g, scale_h, params) -> LevelSplits:
    """Evaluate every candidate of every node in ``hist`` and keep each node's best.

    hist: (n_nodes, F, B, 2) int64 on the backend's device. A split is taken when it improves the
    loss by more than ``gamma`` (and more than XGBoost's epsilon) and both children keep a hessian
    of at least ``min_child_weight``.
    """
    xp = backend.xp
    result = backend.kernels.evaluate_splits(
        hist, xp.asarray(n_value_bins), xp.asarray(feature_allowed), 1.0 / scale_g, 1.0 / scale_h,
        params.reg_lambda, params.reg_alpha, params.min_child_weight)
    gain, feature, bin_threshold, default_left, left_sum = backend.to_host_all(result)
    do_split = (feature >= 0) & (gain > max(params.gamma, _dtypes.MIN_SPLIT_IMPROVEMENT))
    return LevelSplits(gain, feature, bin_threshold, default_left, left_sum, do_split)


def leaf_values(totals: np.ndarray, scale_g: float, scale_h: float, params) -> np.ndarray:
    """(n,) float64 leaf weights -T_alpha(G) / (H + lambda) * learning_rate from (n, 2) int64 sums."""
    G = totals[:, 0].astype(np.float64) * (1.0 / scale_g)
    H = totals[:, 1].astype(np.float64) * (1.0 / scale_h)
    alpha = params.reg_alpha
    t = np.where(G > alpha, G - alpha, np.where(G < -alpha, G + alpha, 0.0))
    denominator = H + params.reg_lambda
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(denominator > 0, -t / denominator, 0.0)
    return w * params.learning_rate
