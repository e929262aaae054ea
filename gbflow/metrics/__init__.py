"""Evaluation metrics with XGBoost's names and meanings, computed on the predictions' device.

Why exact: ``best_score`` and ``best_iteration`` (early stopping) are part of the model, and the
model must not depend on how an evaluation set is split into partitions, workers or GPUs. So a
metric is never a float sum in some order: row metrics are ratios of exact fixed-point sums
(``exact``), auc and aucpr come from integer tallies summed across processes (``tallies``).
``definitions`` names every metric; ``compute.Evaluator`` evaluates sets each round.

The functions below evaluate host arrays in this process (labels (n,), predictions (n,) or
(n, n_classes): transformed, probabilities for classification; weights (n,) or None), with the
same definitions training uses.
"""
from __future__ import annotations

import numpy as np

from ..backend import get_backend
from ..collective import LOCAL
from ..ranking import QueryGroups, whole_numbers
from .by_query import per_query
from .compute import EvalData, Evaluator
from .definitions import METRICS, Metric, fits_objective, metric

__all__ = ["METRICS", "EvalData", "Evaluator", "Metric", "auc", "evaluate",
           "fits_objective", "logloss", "metric", "mlogloss", "rmse"]


def evaluate(name: str, label, prediction, weight=None, params=None, qid=None) -> float:
    """Metric ``name`` of host predictions against labels, in this process; qid: (n,) query
    ids for the ranking metrics (weights are then per query, constant within one; None: all
    rows are one query, as in XGBoost), which make auc and aucpr XGBoost's per-query ones
    (``by_query``). params: training's ``Params`` (``make_params``), for
    the metrics they shape (huber_slope, quantile_alpha, the objective's outputs)."""
    label = np.asarray(label, dtype=np.float64)
    prediction = np.asarray(prediction, dtype=np.float64)
    chosen = metric(name, params)
    if prediction.ndim not in (1, 2) or len(prediction) != len(label):
        raise ValueError(f"evaluate: predictions of shape {prediction.shape} for "
                         f"{len(label)} labels: give (n,) or (n, n_classes)")
    several = prediction.ndim == 2
    # (n, k) predictions are k classes' probabilities, or k quantiles' where params say so
    outputs = several and not getattr(params, "multiclass", True) and \
        getattr(params, "n_groups", 1) == prediction.shape[1]
    if not fits_objective(chosen, several and not outputs,
                          prediction.shape[1] if outputs else 1):  # training's rule
        wanted = "(n, n_classes) class probabilities" if chosen.multiclass else \
            "one prediction a row ((n,))"
        raise ValueError(f"evaluate: {name!r} takes {wanted}, got {prediction.shape}")
    # with query ids, auc and aucpr are per query (XGBoost's on data with groups)
    query_auc = qid is not None and chosen.kind in ("auc", "aucpr")
    if query_auc:
        if prediction.ndim == 2:
            raise ValueError(f"evaluate: {name!r} with query ids takes one prediction a row "
                             f"((n,)), got {prediction.shape} (as XGBoost, no multi-output "
                             f"ranking auc)")
        chosen = per_query(chosen)
    whole = whole_numbers(np, label)
    if several and not outputs and len(label) and not (whole and label.min() >= 0 and
                                                       label.max() < prediction.shape[1]):
        raise ValueError(f"evaluate: {name!r} of {prediction.shape[1]} classes needs class "
                         f"labels 0..{prediction.shape[1] - 1}; the labels range from "
                         f"{label.min():g} to {label.max():g}")
    problem = chosen.label_problem(float(label.min()), float(label.max()), whole) \
        if len(label) and (outputs or not several) else None
    if problem is not None:
        raise ValueError(f"{problem}; the labels range from {label.min():g} to {label.max():g}"
                         f"{'' if whole else ', not all whole numbers'}")
    weights = None if weight is None else [np.asarray(weight, dtype=np.float64)]
    max_weight = 1.0 if weight is None or not len(label) else float(np.max(weights[0]))
    n_classes = prediction.shape[1] if prediction.ndim == 2 else 1
    queries = [QueryGroups(np, np.zeros(len(label), np.int64) if qid is None else
                           np.asarray(qid), None if weights is None else weights[0],
                           "the metric's rows")] \
        if chosen.kind == "query" else None
    data = EvalData("", [label], weights, len(label), max_weight, n_classes, queries, query_auc)
    evaluator = Evaluator(get_backend("cpu"), [metric(name, params)], [data], LOCAL)
    return evaluator.values([[prediction]])[0][0]


def rmse(label, prediction, weight=None) -> float:
    """Root mean squared error (weighted)."""
    return evaluate("rmse", label, prediction, weight)


def logloss(label, prediction, weight=None) -> float:
    """Binary cross-entropy (weighted); probabilities clipped to [1e-16, 1 - 1e-16]."""
    return evaluate("logloss", label, prediction, weight)


def mlogloss(label, prediction, weight=None) -> float:
    """Multi-class cross-entropy (weighted); prediction (n, n_classes), labels 0..n_classes-1."""
    return evaluate("mlogloss", label, prediction, weight)


def auc(label, prediction, weight=None) -> float:
    """Area under the ROC curve from the predictions' bucket tallies (``tallies``)."""
    return evaluate("auc", label, prediction, weight)
