"""Losses: label checks, gradients and hessians, the link function and the base score."""
from __future__ import annotations

import math

import numpy as np

from . import _dtypes, fixed_point
from .collective import LOCAL


class Objective:
    """One loss. Arrays are in the ``xp`` namespace passed to each method.

    margin: (n_rows, n_groups) float64; label: (n_rows,) float64; weight: (n_rows,) or None.
    """

    name = ""
    default_metric = ""
    n_groups = 1

    def check_label(self, label: np.ndarray, where: str) -> None:
        """Raise ValueError naming ``where`` if the (host) label cannot be used with this loss."""

    def base_margin(self, xp, labels: list, weights: list | None, base_score,
                    collective=LOCAL) -> np.ndarray:
        """(n_groups,) float64 starting margin: from ``base_score`` if given, else estimated from
        every process's ``labels``/``weights`` (lists of per-shard arrays) through ``collective``
        with exact sums, so it does not depend on how rows are split. Every process must call it."""
        raise NotImplementedError

    def gradients(self, xp, margin, label, weight):
        """(n_rows, n_groups) float32 gradient and hessian (new arrays)."""
        raise NotImplementedError

    def transform(self, xp, margin):
        """Margins -> predictions: (n_rows,) for one group, (n_rows, n_groups) otherwise."""
        raise NotImplementedError

    def gradient_bounds(self, max_weight: float) -> np.ndarray | None:
        """(n_groups, 2) float64 bounds on |gradient| and |hessian| that hold for any margin,
        given the largest row weight (1.0 without weights), or None when the loss has none.
        Training takes its fixed-point scales from them instead of reducing max |g| and |h|
        over every process each round (a wait for the device, and a collective round trip on
        several workers). With row weights other than 1 the float32 gradients may exceed the
        bound by their rounding (one float32 ulp, a relative 6e-8), which the factor-of-two
        headroom of ``_dtypes.FIXED_SUM_LIMIT`` absorbs; anything more could overflow the int64
        sums."""
        return None


def _weighted_mean(xp, values: list, weights: list | None, collective) -> float:
    if weights is None:
        return fixed_point.exact_sum(xp, values, collective=collective) / \
            fixed_point.global_count(values, collective)
    total_weight = fixed_point.exact_sum(xp, weights, collective=collective)
    if total_weight <= 0:
        raise ValueError("the weights sum to zero: nothing to train on")
    return fixed_point.exact_sum(xp, [v * w for v, w in zip(values, weights)],
                               collective=collective) / total_weight


def _weighted(xp, grad, hess, weight):
    if weight is not None:
        grad = grad * weight[:, None]
        hess = hess * weight[:, None]
    return grad.astype(_dtypes.GRADIENT), hess.astype(_dtypes.GRADIENT)


class SquaredError(Objective):
    name = "reg:squarederror"
    default_metric = "rmse"

    def base_margin(self, xp, labels, weights, base_score, collective=LOCAL):
        if base_score is not None:
            return np.array([float(base_score)])
        return np.array([_weighted_mean(xp, labels, weights, collective)])

    def gradients(self, xp, margin, label, weight):
        grad = margin - label[:, None]
        return _weighted(xp, grad, xp.ones_like(grad), weight)

    def transform(self, xp, margin):
        return margin[:, 0]


def _sigmoid(xp, x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + xp.exp(-x))


class Logistic(Objective):
    name = "binary:logistic"
    default_metric = "logloss"

    def check_label(self, label, where):
        bad = (label < 0) | (label > 1)
        if bad.any():
            raise ValueError(f"binary:logistic needs labels in [0, 1]; {where} has "
                             f"{int(bad.sum())} outside, e.g. {float(label[bad][0]):g}")

    def base_margin(self, xp, labels, weights, base_score, collective=LOCAL):
        p = float(base_score) if base_score is not None else \
            _weighted_mean(xp, labels, weights, collective)
        if not 0 < p < 1:
            if base_score is not None:
                raise ValueError(f"base_score must lie in (0, 1) for binary:logistic, got {p}")
            p = min(max(p, 1e-7), 1 - 1e-7)  # a single-class label: a finite, very sure start
        return np.array([math.log(p / (1 - p))])

    def gradients(self, xp, margin, label, weight):
        p = _sigmoid(xp, margin)
        grad = p - label[:, None]
        hess = xp.maximum(p * (1.0 - p), _dtypes.MIN_HESSIAN)
        return _weighted(xp, grad, hess, weight)

    def transform(self, xp, margin):
        return _sigmoid(xp, margin[:, 0])

    def gradient_bounds(self, max_weight):
        # p in [0, 1] and labels in [0, 1]: |p - y| <= 1; p (1 - p) <= 1/4. Both exact in
        # floating point without weights (rounding cannot leave [0, 1], and float32 holds 1 and
        # 1/4); weighted, float32 rounding may exceed the bound by an ulp (see the base class).
        return np.array([[max_weight, max(0.25, _dtypes.MIN_HESSIAN) * max_weight]])


class Softprob(Objective):
    name = "multi:softprob"
    default_metric = "mlogloss"

    def __init__(self, num_class: int):
        self.n_groups = num_class

    def check_label(self, label, where):
        bad = (label < 0) | (label >= self.n_groups) | (label != np.floor(label))
        if bad.any():
            raise ValueError(f"multi:softprob with num_class={self.n_groups} needs integer labels "
                             f"0..{self.n_groups - 1}; {where} has {int(bad.sum())} others, "
                             f"e.g. {float(label[bad][0]):g}")

    def base_margin(self, xp, labels, weights, base_score, collective=LOCAL):
        # A common margin for every class leaves softmax unchanged: start from uniform.
        return np.full(self.n_groups, float(base_score) if base_score is not None else 0.0)

    def _softmax(self, xp, margin):
        shifted = margin - margin.max(axis=1, keepdims=True)
        e = xp.exp(shifted)
        return e / e.sum(axis=1, keepdims=True)

    def gradients(self, xp, margin, label, weight):
        p = self._softmax(xp, margin)
        onehot = (label[:, None] == xp.arange(self.n_groups)[None, :]).astype(xp.float64)
        grad = p - onehot
        hess = xp.maximum(2.0 * p * (1.0 - p), _dtypes.MIN_HESSIAN)
        return _weighted(xp, grad, hess, weight)

    def transform(self, xp, margin):
        return self._softmax(xp, margin)

    def gradient_bounds(self, max_weight):
        # softmax p in [0, 1], one-hot target: |p - t| <= 1; 2 p (1 - p) <= 1/2.
        return np.tile([[max_weight, max(0.5, _dtypes.MIN_HESSIAN) * max_weight]],
                       (self.n_groups, 1))


OBJECTIVES = ("reg:squarederror", "binary:logistic", "multi:softprob")


def get_objective(name: str, num_class: int | None) -> Objective:
    """The objective called ``name`` (validated by params beforehand)."""
    if name == "reg:squarederror":
        return SquaredError()
    if name == "binary:logistic":
        return Logistic()
    if name == "multi:softprob":
        return Softprob(int(num_class))
    raise ValueError(f"unknown objective {name!r}; known: {OBJECTIVES}")
