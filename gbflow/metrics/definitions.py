"""XGBoost's evaluation metrics by name: each one's per-row loss, its final value, and its traits.

A row metric is a ratio of two global sums: the weighted per-row losses and the weights (rmse takes
the square root of it, gamma-deviance doubles it). Its per-row loss is written once, against the
array namespace of the predictions (NumPy or CuPy), in float64, after XGBoost's definition
(src/metric in XGBoost; the same constants: 1e-16 clips the probabilities of logloss, mlogloss and
poisson-nloglik). "auc" and "aucpr" are computed from tallies instead (``metrics.tallies``). The
ranking metrics ("ndcg", "map", "pre", at k, "-" for XGBoost's score 0 of a query without
relevant documents) are ratios of exact sums of per-query values and of the queries' weights
(``gbflow.ranking``); cox-nloglik of per-event terms and the number of events
(``gbflow.survival``).
"""
from __future__ import annotations

import dataclasses
import math
import re

from .. import ranking, survival

_EPS = 1e-16  # XGBoost's clip of probabilities in logloss, mlogloss and poisson-nloglik


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric as named by the user ("error@0.7", "tweedie-nloglik@1.5", ...).

    kind: "row" (a ratio of sums of per-row losses and weights), "query" (of per-query values
    and query weights: ``loss`` is then (xp, queries, label, prediction, extra) -> (Q,) values
    times the queries' weights, for ``ranking.QueryGroups`` queries), "cox" (cox-nloglik: a
    ratio of an exact sum of per-row terms and the number of events; ``loss`` is then (xp,
    ``survival.RiskSets``, per-part predictions) -> per-part terms), "auc" or "aucpr"
    (tallies).
    multiclass: it takes (n, n_classes) probabilities and integer labels (its loss indexes
    them); else (n,) predictions and an elementwise loss (``Backend.fused`` makes it one
    kernel), which for the (n, k) outputs of several quantiles is taken per column against
    (n, 1) labels and averaged per row (``compute``). any_outputs: it takes either.
    maximize: larger is better (early stopping). loss: for row metrics, (xp, label, prediction,
    extra) -> (n,) float64 per-row losses, unweighted; ``extra`` holds what a set computes once
    (``precompute``). finish: (loss sum, weight sum) -> the value. bound: an upper bound of |loss|
    for any prediction (then no per-round maximum is needed for the exact sums), or None.
    """

    name: str
    kind: str
    multiclass: bool = False
    any_outputs: bool = False  # fits both kinds of objective (auc: one class against the rest)
    maximize: bool = False
    loss: object = None
    finish: object = None
    bound: float | None = None
    precompute: object = None  # (backend, label) -> extra, once per evaluation set part
    # "query" metrics: (xp, queries, label) -> (Q,) bool, the queries whose count is the
    # denominator (XGBoost's ranking auc and aucpr), or None: the sum of the queries' weights
    counted: object = None
    # The labels it is defined for: (low, high, low_included), checked on every evaluation set
    # before training starts; None for any label. whole_labels: where they must be whole
    # numbers too (as XGBoost checks ndcg's relevance degrees under its exponential gain, and
    # pre's and map's binary relevance), the rule in words for the error.
    labels: tuple | None = None
    whole_labels: str | None = None

    def label_problem(self, low: float, high: float, all_whole: bool = True) -> str | None:
        """Why labels ranging from ``low`` to ``high`` (``all_whole``: every one a whole
        number) do not fit this metric, or None."""
        if self.labels is None:
            return None
        lo, hi, lo_included = self.labels
        if self.whole_labels:  # whole numbers to XGBoost's tolerance (its labels are float32)
            lo, hi = lo - ranking.WHOLE_TOLERANCE, hi + ranking.WHOLE_TOLERANCE
        if (low >= lo if lo_included else low > lo) and high <= hi and \
                (all_whole or not self.whole_labels):
            return None
        span = f"{'[' if lo_included else '('}{lo:g}, {hi:g}]".replace("inf]", "inf)")
        return f"eval_metric {self.name!r} needs {self.whole_labels or f'labels in {span}'}"


def mean(total: float, weight: float) -> float:
    """A metric's value from its exact sum and its denominator (NaN for none)."""
    return total / weight if weight > 0 else float("nan")


def _root_mean(total: float, weight: float) -> float:
    return math.sqrt(total / weight) if weight > 0 else float("nan")


def _logloss(xp, y, p, extra):
    # XGBoost's: each log's argument floored at 1e-16, p itself never clipped, so a prediction
    # outside [0, 1] (binary:logitraw's margin, a regression's value) gives XGBoost's value,
    # a negative loss included
    return -y * xp.log(xp.maximum(p, _EPS)) - (1.0 - y) * xp.log(xp.maximum(1.0 - p, _EPS))


def _mlogloss(xp, y, p, extra):
    picked = p[xp.arange(len(y)), y.astype(xp.int64)]
    return -xp.log(xp.maximum(picked, _EPS))


def _merror(xp, y, p, extra):
    return (xp.argmax(p, axis=1) != y.astype(xp.int64)).astype(xp.float64)


def _poisson(xp, y, p, extra):
    p = xp.maximum(p, _EPS)
    return extra + p - xp.log(p) * y


def _label_log_gamma(backend, label):
    """log Gamma(y + 1) of every label (poisson-nloglik's constant term), once per set."""
    return backend.kernels.log_gamma(label + 1.0)


def _gamma_nloglik(xp, y, p, extra):
    # XGBoost's exponential-family form with the dispersion psi = 1: theta = -1 / p,
    # b(theta) = -log(-theta) = log(p), c = 0
    p = xp.maximum(p, 1e-6)
    return y / p + xp.log(p)


def _gamma_deviance(xp, y, p, extra):
    p, y = p + 1e-6, y + 1e-6
    return xp.log(p / y) + y / p - 1.0


def _tweedie(rho: float):
    def loss(xp, y, p, extra):
        a = y * xp.exp((1.0 - rho) * xp.log(p)) / (1.0 - rho)
        b = xp.exp((2.0 - rho) * xp.log(p)) / (2.0 - rho)
        return -a + b
    return loss


def _error(threshold: float):
    def loss(xp, y, p, extra):
        return xp.where(p > threshold, 1.0 - y, y)
    return loss


def _pseudo_huber(slope: float):
    def loss(xp, y, p, extra):
        z = (p - y) / slope
        return slope * slope * (xp.sqrt(1.0 + z * z) - 1.0)
    return loss


def _quantile(alpha):
    """The pinball loss at ``alpha``: a number, or a tuple of k quantiles for (n, k)
    predictions (their column j at alpha[j]; the labels then come as (n, 1))."""
    def loss(xp, y, p, extra):
        diff = y - p
        if not isinstance(alpha, tuple):
            return xp.where(diff >= 0, alpha * diff, (alpha - 1.0) * diff)
        # column by column with host scalars: no array made from the host's alphas, which a
        # recorded evaluation (``Evaluator.queue``) may not copy (the same float64 products)
        return xp.stack([xp.where(diff[:, j] >= 0, a * diff[:, j], (a - 1.0) * diff[:, j])
                         for j, a in enumerate(alpha)], axis=1)
    return loss


def _row(name, loss, finish=mean, bound=None, multiclass=False, precompute=None,
         labels=None) -> Metric:
    return Metric(name=name, kind="row", loss=loss, finish=finish, bound=bound,
                  multiclass=multiclass, precompute=precompute, labels=labels)


_PROBABILITY = (0.0, 1.0, True)
_NON_NEGATIVE = (0.0, math.inf, True)
_POSITIVE = (0.0, math.inf, False)


_LOG_EPS = -math.log(_EPS)  # 36.84: the largest loss the clipped log metrics give


def _probabilities(params) -> bool:
    """Whether the objective's predictions lie in [0, 1] (logloss then lies in [0, 36.84]; of
    other predictions its bound is found on the device each round)."""
    return getattr(params, "objective", None) in ("binary:logistic", "reg:logistic",
                                                  "binary:hinge")

# name -> how to make it from its "@" argument (None when there is none)
_MAKERS = {
    "rmse": lambda arg, p: _row("rmse", lambda xp, y, q, e: (q - y) ** 2, _root_mean),
    "rmsle": lambda arg, p: _row("rmsle", lambda xp, y, q, e: (xp.log1p(q) - xp.log1p(y)) ** 2,
                                 _root_mean, labels=(-1.0, math.inf, False)),
    "mae": lambda arg, p: _row("mae", lambda xp, y, q, e: xp.abs(q - y)),
    "mape": lambda arg, p: _row("mape", lambda xp, y, q, e: xp.abs((y - q) / y)),
    "mphe": lambda arg, p: _row("mphe", _pseudo_huber(p.huber_slope)),
    "logloss": lambda arg, p: _row("logloss", _logloss, labels=_PROBABILITY,
                                   bound=_LOG_EPS if _probabilities(p) else None),
    "error": lambda arg, p: _row("error" if arg is None else f"error@{arg:g}",
                                 _error(0.5 if arg is None else arg), bound=1.0,
                                 labels=_PROBABILITY),
    "poisson-nloglik": lambda arg, p: _row("poisson-nloglik", _poisson,
                                           precompute=_label_log_gamma, labels=_NON_NEGATIVE),
    "gamma-nloglik": lambda arg, p: _row("gamma-nloglik", _gamma_nloglik,
                                         labels=_POSITIVE),
    "gamma-deviance": lambda arg, p: _row("gamma-deviance", _gamma_deviance,
                                          lambda total, weight: 2.0 * total / max(weight, 1e-6),
                                          labels=_POSITIVE),
    "tweedie-nloglik": lambda arg, p: _row(f"tweedie-nloglik@{arg:g}", _tweedie(arg),
                                           labels=_NON_NEGATIVE),
    "quantile": lambda arg, p: _row("quantile", _quantile(p.quantile_alpha)),
    "mlogloss": lambda arg, p: _row("mlogloss", _mlogloss, bound=_LOG_EPS, multiclass=True),
    "merror": lambda arg, p: _row("merror", _merror, bound=1.0, multiclass=True),
    # XGBoost's: unweighted, the mean over events of log R(t) - log p (``survival``)
    "cox-nloglik": lambda arg, p: Metric(name="cox-nloglik", kind="cox",
                                          loss=survival.negative_log_likelihood, finish=mean),
    "auc": lambda arg, p: Metric(name="auc", kind="auc", maximize=True, any_outputs=True,
                                  labels=_PROBABILITY),
    "aucpr": lambda arg, p: Metric(name="aucpr", kind="aucpr", maximize=True, any_outputs=True,
                                    labels=_PROBABILITY),
}
# metrics taking an "@" argument: is it required, and what it must be
_ARGUMENTS = {"error": (False, "a threshold, e.g. error@0.7"),
              "tweedie-nloglik": (True, "the variance power rho in [1, 2), e.g. "
                                        "tweedie-nloglik@1.5")}

METRICS = tuple(_MAKERS) + ("ndcg", "map", "pre")
_RANKING = re.compile(r"(ndcg|map|pre)(?:@([^-]*))?(-?)")


def _ranking_metric(name: str, params) -> Metric | None:
    """XGBoost's ranking metric called ``name`` ("ndcg", "map@10", "ndcg@5-", "pre@3"), or
    None for another name. "ndcg" takes the gain of the parameter ndcg_exp_gain. Without '@'
    the first 32 places count, as in XGBoost (1.7 to 3.2 at least): "ndcg" is "ndcg@32", "map"
    "map@32", "pre" "pre@32"."""
    match = _RANKING.fullmatch(name)
    if match is None:
        return None
    kind, k, minus = match.group(1), match.group(2), match.group(3) == "-"
    if k is not None:
        if not k.isdigit() or int(k) < 1:
            raise ValueError(f"eval_metric {name!r}: the argument after '@' must be a positive "
                             f"whole number of places, e.g. {kind}@10")
        k = int(k)
    else:  # XGBoost's: a metric without '@' takes the top-k pair method's default k
        k = ranking.DEFAULT_TOP_K
    exp_gain = bool(getattr(params, "ndcg_exp_gain", True))

    def values(xp, queries, y, p, extra):
        return ranking.query_scores(xp, kind, k, minus, exp_gain, p, y, queries)

    if kind != "ndcg":
        labels, whole = _PROBABILITY, "binary relevance labels, 0 or 1"
    elif exp_gain:
        labels = (0.0, float(ranking.EXP_GAIN_LIMIT), True)
        whole = (f"whole relevance degrees 0..{ranking.EXP_GAIN_LIMIT} (its gain is "
                 f"2**label - 1; set ndcg_exp_gain=False for the label itself)")
    else:
        labels, whole = (0.0, math.inf, True), None
    return Metric(name=name, kind="query", maximize=True, loss=values, finish=mean, bound=1.0,
                  labels=labels, whole_labels=whole)


def metric(name: str, params=None) -> Metric:
    """The ``Metric`` called ``name`` (XGBoost's names; "error@t" and "tweedie-nloglik@rho"
    carry an argument). params: the training ``Params`` (mphe takes ``huber_slope``, quantile
    ``quantile_alpha``: one number, or a tuple for predictions of one column per quantile), or
    None for their defaults. Raises ValueError naming the metric."""
    if not isinstance(name, str):
        raise TypeError(f"a metric name must be a string, got {type(name).__name__} {name!r}")
    ranking_metric = _ranking_metric(name, params)
    if ranking_metric is not None:
        return ranking_metric
    base, at, arg = name.partition("@")
    if base not in _MAKERS:
        raise ValueError(f"eval_metric {name!r} is not supported (supported: "
                         f"{', '.join(METRICS)}; error@t and tweedie-nloglik@rho take an "
                         f"argument)")
    required, what = _ARGUMENTS.get(base, (False, None))
    value = None
    if at:
        if what is None:
            raise ValueError(f"eval_metric {name!r}: {base} takes no '@' argument")
        try:
            value = float(arg)
        except ValueError:
            raise ValueError(f"eval_metric {name!r}: the argument after '@' must be {what}") \
                from None
        if base == "tweedie-nloglik" and not 1.0 <= value < 2.0:
            raise ValueError(f"eval_metric {name!r}: rho must lie in [1, 2)")
    elif required:
        raise ValueError(f"eval_metric {name!r} needs an argument: {what}")
    return _MAKERS[base](value, params if params is not None else _Defaults)


class _Defaults:
    huber_slope = 1.0
    quantile_alpha = 0.5


def fits_objective(m: Metric, multiclass: bool, quantiles: int = 1) -> bool:
    """Whether the metric takes the predictions of an objective with (True) or without
    (False) one output per class. auc and aucpr take both (for classes, each class against the
    rest: auc's weighted by the classes' weights, aucpr's their mean, as XGBoost's); the
    ranking metrics only one output.
    quantiles: reg:quantileerror's outputs; several take only the row metrics of one output,
    each row's loss averaged over them (XGBoost's elementwise metrics on several outputs)."""
    if quantiles > 1:
        return m.kind == "row" and not m.multiclass
    return m.any_outputs or m.multiclass == multiclass


