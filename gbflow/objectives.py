"""Losses: label checks, gradients and hessians, the link function and the base score."""
from __future__ import annotations

import math

import numpy as np

from . import _dtypes, ranking, survival
from .backend.losses import (
    logistic_gradients_with,
    sigmoid_of,
    softmax_gradients_with,
    softmax_with,
    weighted_rows,
)
from .collective import LOCAL
from .objective_base import (
    ElementwiseLoss,
    Objective,
    class_weights,
    log_base_score,
    newton_step_from_zero,
    weighted,
    weighted_mean,
)

# count:poisson's own max_delta_step default (XGBoost's): its hessian's factor is exp(0.7)
POISSON_MAX_DELTA_STEP = 0.7
# added to each class's share before the log of the multiclass intercepts (XGBoost's kRtEps)
MULTICLASS_SHARE_EPS = 1e-6
# XGBoost's kRtEps: a logistic base score (given, or the mean label) is kept this far inside
# (0, 1) before its logit, so a single-class label starts at a finite margin
LOGISTIC_BASE_EPS = 1e-6
# the bounds as float32s, as XGBoost keeps them (its margins of 300 base scores in (0, 1):
# _logit's within 3 float32 ulps, most equal)
_LOW, _HIGH = np.float32(LOGISTIC_BASE_EPS), np.float32(1.0) - np.float32(LOGISTIC_BASE_EPS)


def _logit(p: float) -> float:
    """The margin of a logistic base score as XGBoost computes it: the score a float32, kept
    within [LOGISTIC_BASE_EPS, 1 - it] (as float32s), -log(1/x - 1) in float32 (whose steps
    near 1 are coarse: the upper bound's margin is +13.7452, the lower's -13.8155)."""
    x = min(max(np.float32(p), _LOW), _HIGH)
    return float(-np.log(np.float32(1.0) / x - np.float32(1.0)))


class SquaredError(Objective):
    name = "reg:squarederror"
    default_metric = "rmse"

    def __init__(self, scale_pos_weight: float = 1.0):
        self.scale_pos_weight = float(scale_pos_weight)

    def _positive_weight(self, xp, label, weight):
        """The row weights with rows of label 1 scaled by ``scale_pos_weight`` (XGBoost's rule
        for its regression-family losses), or ``weight`` itself when the scale is 1."""
        if self.scale_pos_weight == 1.0:
            return weight
        scaled = xp.where(label == 1.0, self.scale_pos_weight, 1.0)
        return scaled if weight is None else scaled * weight

    def kernel_weight(self, xp, label, weight):
        return self._positive_weight(xp, label, weight)

    def _largest_weight(self, max_weight: float) -> float:
        """The largest row weight once ``scale_pos_weight`` is applied."""
        return max_weight * max(self.scale_pos_weight, 1.0)

    # XGBoost's start for the losses of this family without a closed form (squared log error,
    # pseudo-Huber): one Newton step from margin 0 instead of the weighted mean label
    newton_start = False

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        # (with scale_pos_weight the Newton step is the mean with positive rows scaled, as
        # XGBoost 3.2 estimates it)
        if self.newton_start or self.scale_pos_weight != 1.0:
            return np.array([newton_step_from_zero(self, xp, labels, weights, collective)])
        return np.array([weighted_mean(xp, labels, weights, collective)])

    def gradients(self, xp, margin, label, weight):
        grad = margin - label[:, None]
        return weighted(xp, grad, xp.ones_like(grad),
                         self._positive_weight(xp, label, weight))

    def transform(self, xp, margin):
        return margin[:, 0]


class Logistic(ElementwiseLoss, SquaredError):
    """binary:logistic, and XGBoost's variants of it: reg:logistic (a target in [0, 1], rmse by
    default) and binary:logitraw (predictions are the margins; its default metric, logloss, is
    then computed on margins, as XGBoost does)."""

    _DEFAULT_METRIC = {"binary:logistic": "logloss", "reg:logistic": "rmse",
                       "binary:logitraw": "logloss"}

    def __init__(self, name: str = "binary:logistic", scale_pos_weight: float = 1.0):
        super().__init__(scale_pos_weight)
        self.name = name
        self.default_metric = self._DEFAULT_METRIC[name]
        self.link_kernel = None if name == "binary:logitraw" else "sigmoid"  # sigmoid_of's

    def check_label(self, label, where):
        bad = (label < 0) | (label > 1)
        if bad.any():
            raise ValueError(f"{self.name} needs labels in [0, 1]; {where} has "
                             f"{int(bad.sum())} outside, e.g. {float(label[bad][0]):g}")

    def base_score_margin(self, base_score):
        p = float(base_score)
        if self.name == "binary:logitraw":  # XGBoost's: its predictions are margins, and so is
            return p                        # its base score
        if not 0 <= p <= 1:
            raise ValueError(f"parameter base_score must lie in [0, 1] for {self.name} (it is a "
                             f"probability), got {base_score!r}")
        return _logit(p)

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        # XGBoost 3.2's: with scale_pos_weight one Newton step from margin 0 (its positive rows
        # scaled); else the weighted mean label, a margin for binary:logitraw (whose base score
        # is one) and a probability for the others
        if self.scale_pos_weight != 1.0:
            return np.array([newton_step_from_zero(self, xp, labels, weights, collective)])
        p = weighted_mean(xp, labels, weights, collective)
        if self.name == "binary:logitraw":
            return np.array([p])
        return np.array([_logit(p)])

    gradient_kernel = "logistic_gradients"  # logistic_gradients_with's

    def row_gradients(self, xp, margin, label, weight):
        return logistic_gradients_with(xp, margin, label,
                                       self._positive_weight(xp, label, weight))

    def transform(self, xp, margin):
        if self.name == "binary:logitraw":
            return margin[:, 0]
        return sigmoid_of(xp, margin[:, 0])

    def gradient_bounds(self, max_weight):
        # p in [0, 1] and labels in [0, 1]: |p - y| <= 1; p (1 - p) <= 1/4. Both exact in
        # floating point without weights (rounding cannot leave [0, 1], and float32 holds 1 and
        # 1/4); weighted, float32 rounding may exceed the bound by an ulp (see the base class).
        max_weight = self._largest_weight(max_weight)
        return np.array([[max_weight, max(0.25, _dtypes.MIN_HESSIAN) * max_weight]])


class Softprob(Objective):
    name = "multi:softprob"
    default_metric = "mlogloss"

    def __init__(self, num_class: int):
        self.n_groups = num_class

    def check_label(self, label, where):
        bad = (label < 0) | (label >= self.n_groups) | (label != np.floor(label))
        if bad.any():
            raise ValueError(f"{self.name} with num_class={self.n_groups} needs integer labels "
                             f"0..{self.n_groups - 1}; {where} has {int(bad.sum())} others, "
                             f"e.g. {float(label[bad][0]):g}")

    # A common margin for every class leaves softmax unchanged: a base_score is that common
    # margin. The default start is XGBoost 3.2's intercepts (below).

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        # XGBoost 3.2's: each class's log weighted share, plus 1e-6 (its kRtEps: a class
        # without rows starts at log 1e-6, not -inf), less their mean
        totals = class_weights(xp, labels, weights, self.n_groups, collective)
        if not totals.sum() > 0:
            raise ValueError("the weights sum to zero: nothing to train on")
        log_share = np.log(totals / totals.sum() + MULTICLASS_SHARE_EPS)
        return log_share - log_share.mean()

    gradient_kernel = "softmax_gradients"  # softmax_gradients_with's

    def gradients(self, xp, margin, label, weight):
        return softmax_gradients_with(xp, margin, label, weight)

    def transform(self, xp, margin):
        return softmax_with(xp, margin)

    def gradient_bounds(self, max_weight):
        # softmax p in [0, 1], one-hot target: |p - t| <= 1; 2 p (1 - p) <= 1/2.
        return np.tile([[max_weight, max(0.5, _dtypes.MIN_HESSIAN) * max_weight]],
                       (self.n_groups, 1))


class Softmax(Softprob):
    """multi:softprob's training; predictions are the most probable class (as float), metrics
    see the probabilities (XGBoost's)."""

    name = "multi:softmax"
    n_outputs = 1

    def transform(self, xp, margin):
        return xp.argmax(margin, axis=1).astype(xp.float64)

    def eval_transform(self, xp, margin):
        return softmax_with(xp, margin)


def _exp(xp, x):
    with np.errstate(over="ignore"):
        return xp.exp(x)


class _LogLink(Objective):
    """Losses of a non-negative target with a log link (predictions exp(margin)); the default
    base margin is XGBoost's, the log of the weighted mean label (each loss's best constant)."""

    strictly_positive = False

    def base_score_margin(self, base_score):
        return log_base_score(self.name, base_score)

    def check_label(self, label, where):
        bad = (label <= 0) if self.strictly_positive else (label < 0)
        if bad.any():
            rule = "> 0" if self.strictly_positive else ">= 0"
            raise ValueError(f"{self.name} needs labels {rule}; {where} has "
                             f"{int(bad.sum())} others, e.g. {float(label[bad][0]):g}")

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        mean = weighted_mean(xp, labels, weights, collective)
        return np.array([math.log(max(mean, 1e-7))])  # all-zero labels: a very low start

    def transform(self, xp, margin):
        return _exp(xp, margin[:, 0])


class Poisson(ElementwiseLoss, _LogLink):
    """XGBoost's count:poisson: its hessian is exp(margin + max_delta_step), the objective's
    own parameter (default ``POISSON_MAX_DELTA_STEP``), which keeps the first Newton steps of
    rare counts from running away."""

    name = "count:poisson"
    default_metric = "poisson-nloglik"

    def __init__(self, max_delta_step: float = POISSON_MAX_DELTA_STEP):
        self.max_delta_step = float(max_delta_step)

    def row_gradients(self, xp, margin, label, weight):
        rate = _exp(xp, margin)
        return weighted_rows(xp, rate - label, rate * math.exp(self.max_delta_step), weight)


class Gamma(ElementwiseLoss, _LogLink):
    name = "reg:gamma"
    default_metric = "gamma-deviance"
    strictly_positive = True

    def row_gradients(self, xp, margin, label, weight):
        ratio = label * _exp(xp, -margin)
        return weighted_rows(xp, 1.0 - ratio, ratio, weight)


class Tweedie(ElementwiseLoss, _LogLink):
    name = "reg:tweedie"

    def __init__(self, variance_power: float):
        self.rho = float(variance_power)
        self.default_metric = f"tweedie-nloglik@{self.rho:g}"

    def row_gradients(self, xp, margin, label, weight):
        a = label * _exp(xp, (1.0 - self.rho) * margin)
        b = _exp(xp, (2.0 - self.rho) * margin)
        return weighted_rows(xp, b - a, (2.0 - self.rho) * b - (1.0 - self.rho) * a, weight)


class SquaredLogError(ElementwiseLoss, SquaredError):
    name = "reg:squaredlogerror"
    default_metric = "rmsle"
    newton_start = True

    def check_label(self, label, where):
        bad = label <= -1
        if bad.any():
            raise ValueError(f"reg:squaredlogerror needs labels > -1 (log1p of the label); "
                             f"{where} has {int(bad.sum())} others, e.g. "
                             f"{float(label[bad][0]):g}")

    def row_gradients(self, xp, margin, label, weight):
        p = xp.maximum(margin, -1.0 + 1e-6)  # log1p's domain, as XGBoost
        gap = xp.log1p(p) - xp.log1p(label)
        grad = gap / (p + 1.0)
        hess = xp.maximum((1.0 - gap) / (p + 1.0) ** 2, 1e-6)
        return weighted_rows(xp, grad, hess, self._positive_weight(xp, label, weight))


class PseudoHuber(ElementwiseLoss, SquaredError):
    name = "reg:pseudohubererror"
    default_metric = "mphe"
    newton_start = True

    def __init__(self, slope: float = 1.0, scale_pos_weight: float = 1.0):
        super().__init__(scale_pos_weight)
        self.slope = float(slope)

    def row_gradients(self, xp, margin, label, weight):
        z = margin - label
        scale = 1.0 + (z / self.slope) ** 2
        root = xp.sqrt(scale)
        return weighted_rows(xp, z / root, 1.0 / (scale * root),
                         self._positive_weight(xp, label, weight))

    def gradient_bounds(self, max_weight):
        # |z| / sqrt(1 + (z / slope)^2) < slope; the hessian 1 / scale^1.5 <= 1
        max_weight = self._largest_weight(max_weight)
        return np.array([[self.slope * max_weight, max_weight]])


class QuantileError(Objective):
    """reg:quantileerror (the pinball loss at ``alpha``) and reg:absoluteerror (its alpha 0.5,
    the absolute error): gradients of the loss, hessians the weights, and after each tree a
    line search: every leaf's value becomes the learning rate times the alpha quantile of its
    rows' residuals (``leaf_alphas``; ``gbflow.leaf_quantiles``), XGBoost's way. The base score
    is the labels' alpha quantile (their median for the absolute error).

    Several quantiles (``alpha`` a tuple of k, XGBoost's list) are k outputs, in their order:
    output j is the loss at alpha[j] on its own margins, with its own base score and line
    search; nothing is shared between outputs but the rows (XGBoost's one tree per output)."""

    def __init__(self, name: str = "reg:quantileerror", alpha: float | tuple = 0.5):
        self.name = name
        alphas = (0.5,) if name == "reg:absoluteerror" else \
            tuple(float(a) for a in alpha) if isinstance(alpha, tuple) else (float(alpha),)
        self.leaf_alphas = alphas
        self.n_groups = len(alphas)
        self.default_metric = "mae" if name == "reg:absoluteerror" else "quantile"

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        from .backend import backend_for, get_backend
        from .leaf_quantiles import integer_weights, interpolated_quantile, weighted_quantiles
        backend = backend_for(labels[0]) if labels else get_backend("cpu")
        if weights is None:  # XGBoost 3.2 interpolates between the labels without weights
            start = [interpolated_quantile(backend, list(labels), alpha, collective)
                     for alpha in self.leaf_alphas]
            return np.nan_to_num(np.array(start, dtype=np.float64), nan=0.0)
        largest = float(collective.allreduce_max(
            max([float(xp.max(w)) if len(w) else 0.0 for w in weights] + [0.0])))
        n_total = int(collective.allreduce_sum(np.array([sum(len(y) for y in labels)]))[0])
        weights = [integer_weights(xp, w, largest, n_total) for w in weights]
        groups = [xp.zeros(len(y), dtype=np.int64) for y in labels]
        start = [weighted_quantiles(backend, groups, list(labels), weights, 1, alpha,
                                    collective)[0] for alpha in self.leaf_alphas]
        return np.nan_to_num(np.array(start, dtype=np.float64), nan=0.0)

    def gradients(self, xp, margin, label, weight):
        diff = margin - label[:, None]
        if self.name == "reg:absoluteerror":
            grad = xp.sign(diff)
        else:
            # one alpha: the number itself; several: a (1, k) row, column j at alpha[j]
            alpha = self.leaf_alphas[0] if self.n_groups == 1 else \
                xp.asarray(self.leaf_alphas, dtype=np.float64)[None, :]
            grad = xp.where(diff >= 0, 1.0 - alpha, -alpha)
        return weighted(xp, grad, xp.ones_like(diff), weight)

    def transform(self, xp, margin):
        return margin[:, 0] if self.n_groups == 1 else margin

    def gradient_bounds(self, max_weight):
        # |g| <= max(alpha, 1 - alpha) * w <= w; h = w
        return np.tile([[max_weight, max_weight]], (self.n_groups, 1)).astype(np.float64)


class Hinge(Objective):
    name = "binary:hinge"
    default_metric = "error"

    def check_label(self, label, where):
        bad = (label != 0) & (label != 1)
        if bad.any():
            raise ValueError(f"binary:hinge needs labels 0 or 1; {where} has {int(bad.sum())} "
                             f"others, e.g. {float(label[bad][0]):g}")

    def gradients(self, xp, margin, label, weight):
        sign = 2.0 * label[:, None] - 1.0
        inside = margin * sign < 1.0
        grad = xp.where(inside, -sign, 0.0)
        hess = xp.where(inside, 1.0, _dtypes.MIN_HESSIAN)
        return weighted(xp, grad, hess, weight)

    def transform(self, xp, margin):
        return (margin[:, 0] > 0).astype(xp.float64)

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        # XGBoost 3.2's: one Newton step from margin 0, stored through the prediction's
        # transform (1 when the step is positive, else 0), which is the starting margin
        step = newton_step_from_zero(self, xp, labels, weights, collective)
        return np.array([1.0 if step > 0 else 0.0])

    def gradient_bounds(self, max_weight):
        return np.array([[max_weight, max(1.0, _dtypes.MIN_HESSIAN) * max_weight]])


RANKING = tuple(ranking.OBJECTIVES)
OBJECTIVES = ("reg:squarederror", "reg:squaredlogerror", "reg:pseudohubererror",
              "reg:absoluteerror", "reg:quantileerror", "reg:logistic", "binary:logistic",
              "binary:logitraw", "binary:hinge", "count:poisson", "reg:gamma", "reg:tweedie",
              "multi:softprob", "multi:softmax", "survival:cox") + RANKING
MULTICLASS = ("multi:softprob", "multi:softmax")
# XGBoost's objectives gbflow does not have yet: said so by name, not as unknown.
NOT_YET = ("survival:aft",)


def get_objective(name: str, num_class: int | None = None, *, scale_pos_weight: float = 1.0,
                  huber_slope: float = 1.0, tweedie_variance_power: float = 1.5,
                  quantile_alpha: float | tuple = 0.5,
                  poisson_delta_step: float = POISSON_MAX_DELTA_STEP,
                  lambda_params: ranking.LambdaParams | None = None) -> Objective:
    """The objective called ``name`` (validated by params beforehand), with its parameters
    (XGBoost's names and defaults; quantile_alpha: one quantile, or a tuple of several, one
    output each; lambda_params: the ranking objectives')."""
    if name in RANKING:
        return ranking.LambdaRank(name, lambda_params)
    if name == "reg:squarederror":
        return SquaredError(scale_pos_weight)
    # (XGBoost 3.2 takes scale_pos_weight for the squared and logistic losses only: these two
    # leave it unused, as it says in a warning)
    if name == "reg:squaredlogerror":
        return SquaredLogError()
    if name == "reg:pseudohubererror":
        return PseudoHuber(huber_slope)
    if name in ("binary:logistic", "reg:logistic", "binary:logitraw"):
        return Logistic(name, scale_pos_weight)
    if name in ("reg:absoluteerror", "reg:quantileerror"):
        return QuantileError(name, quantile_alpha)
    if name == "binary:hinge":
        return Hinge()
    if name == "count:poisson":
        return Poisson(poisson_delta_step)
    if name == "reg:gamma":
        return Gamma()
    if name == "reg:tweedie":
        return Tweedie(tweedie_variance_power)
    if name == "survival:cox":
        return survival.Cox()
    if name == "multi:softprob":
        return Softprob(int(num_class))
    if name == "multi:softmax":
        return Softmax(int(num_class))
    raise ValueError(f"unknown objective {name!r}; known: {OBJECTIVES}")
