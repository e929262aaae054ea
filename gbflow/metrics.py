"""Evaluation metrics on host arrays: rmse, logloss, auc, mlogloss (weighted, XGBoost's meanings)."""
from __future__ import annotations

import numpy as np

METRICS = ("rmse", "logloss", "auc", "mlogloss")
MAXIMIZE = {"auc"}
_EPS = 1e-15


def _weights(label, weight):
    return np.ones(len(label)) if weight is None else weight


def rmse(label, prediction, weight=None):
    w = _weights(label, weight)
    return float(np.sqrt(np.sum(w * (prediction - label) ** 2) / np.sum(w)))


def logloss(label, prediction, weight=None):
    w = _weights(label, weight)
    p = np.clip(prediction, _EPS, 1 - _EPS)
    return float(-np.sum(w * (label * np.log(p) + (1 - label) * np.log(1 - p))) / np.sum(w))


def mlogloss(label, prediction, weight=None):
    w = _weights(label, weight)
    p = np.clip(prediction[np.arange(len(label)), label.astype(np.int64)], _EPS, 1)
    return float(-np.sum(w * np.log(p)) / np.sum(w))


def auc(label, prediction, weight=None):
    """Area under the ROC curve; tied predictions count half (the trapezoid rule)."""
    w = _weights(label, weight)
    order = np.argsort(prediction, kind="stable")
    p, y, w = prediction[order], label[order], w[order]
    pos = w * y
    neg = w * (1 - y)
    # group ties: per distinct prediction, the positive and negative weight
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    pos_g = np.add.reduceat(pos, starts)
    neg_g = np.add.reduceat(neg, starts)
    neg_below = np.cumsum(neg_g) - neg_g
    total_pos, total_neg = pos_g.sum(), neg_g.sum()
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    return float(np.sum(pos_g * (neg_below + 0.5 * neg_g)) / (total_pos * total_neg))


def evaluate(name: str, label, prediction, weight=None) -> float:
    """Metric ``name`` of predictions (transformed, not margins) against labels."""
    return {"rmse": rmse, "logloss": logloss, "auc": auc, "mlogloss": mlogloss}[name](
        label, prediction, weight)
