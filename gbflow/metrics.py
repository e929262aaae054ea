"""Evaluation metrics (rmse, logloss, auc, mlogloss; weighted, XGBoost's meanings) from sums that
reduce exactly across shards and processes.

Why exact: ``best_score`` and ``best_iteration`` (early stopping) are part of the model, and the
model must not depend on how an evaluation set is split into partitions or workers. So a metric is
never a float sum in some order:

- rmse, logloss, mlogloss are ratios of two global sums (weighted losses, weights). Each sum is
  taken in *two-word fixed point* (``exact_totals``): every value becomes an integer high word on a
  grid fine enough for the global total plus an integer low word 2**30 or more times finer, both
  summed as int64 through the collective, then converted to float once, correctly rounded. The
  result is the sum correctly rounded up to an error of about n * 2**-63 of the largest value
  (far below float64's rounding of the total), whatever the order.
- auc needs the ranking of all predictions. Each process makes a table of its distinct predictions
  with the fixed-point positive and negative weight at each (``auc_table``); the tables are
  gathered, merged exactly (sorted, integer totals) and the area is computed from the merged
  table, which is the same for any split of the rows. This sends the distinct predictions of the
  evaluation set to every process (about 24 bytes per distinct prediction) on every evaluation.

``collective`` arguments are ``gbflow.collective.Collective``s (``LOCAL`` in one process). Arrays
are
host NumPy arrays: label (n,), prediction (n,) or (n, n_classes) (transformed, not margins), weight
(n,) or None.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import fixed_point
from .collective import LOCAL

METRICS = ("rmse", "logloss", "auc", "mlogloss")
MAXIMIZE = {"auc"}
_EPS = 1e-15


def _weights(label, weight):
    return np.ones(len(label)) if weight is None else np.asarray(weight, dtype=np.float64)


def _loss_terms(name: str, label, prediction, weight) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (weighted loss, weight) whose global sums give metric ``name`` (not auc)."""
    w = _weights(label, weight)
    if name == "rmse":
        return w * (prediction - label) ** 2, w
    if name == "logloss":
        p = np.clip(prediction, _EPS, 1 - _EPS)
        return -(w * (label * np.log(p) + (1 - label) * np.log(1 - p))), w
    if name == "mlogloss":
        p = np.clip(prediction[np.arange(len(label)), label.astype(np.int64)], _EPS, 1)
        return -(w * np.log(p)), w
    raise ValueError(f"unknown metric {name!r}; known: {METRICS}")


def _from_sums(name: str, loss: float, weight: float) -> float:
    value = loss / weight if weight > 0 else float("nan")
    return float(math.sqrt(value)) if name == "rmse" else float(value)


def _exponent(power_of_two: float) -> int:
    return math.frexp(power_of_two)[1] - 1


def exact_totals(columns: list[list[np.ndarray]], collective=LOCAL) -> list[float]:
    """The grand total of each column (a list of float64 arrays, one per part) over every process.

    Two-word fixed point (see the module docstring): independent of how values are split into
    parts and processes and of their order. Three reductions whatever the number of columns.
    """
    if not columns:
        return []
    n = collective.allreduce_sum(np.array([sum(a.size for a in col) for col in columns],
                                          dtype=np.int64))
    big = collective.allreduce_max(np.array(
        [fixed_point.local_max_abs(np, col) for col in columns], dtype=np.float64))
    words, grids = [], []
    for col, count, max_abs in zip(columns, n, big):
        scale = fixed_point.fixed_point_scale(float(max_abs), int(count))
        # |residual| <= 0.5, so count values of it scaled by `low` stay below 2**62 as well.
        low = fixed_point.fixed_point_scale(0.5, int(count))
        high_sum = low_sum = 0
        for a in col:
            scaled = a * scale  # a power of two: exact
            high = np.rint(scaled)
            high_sum += int(high.astype(np.int64).sum())
            low_sum += int(np.rint((scaled - high) * low).astype(np.int64).sum())  # exact residual
        words += [high_sum, low_sum]
        grids.append((_exponent(scale), _exponent(low)))
    words = collective.allreduce_sum(np.array(words, dtype=np.int64))
    totals = []
    for j, (scale_bits, low_bits) in enumerate(grids):
        high, low = int(words[2 * j]), int(words[2 * j + 1])
        # The total is ((high << low_bits) + low) units of 2**-(scale_bits + low_bits), exactly;
        # float(int) rounds correctly and ldexp by a power of two is exact (barring underflow).
        totals.append(math.ldexp(float((high << low_bits) + low), -(scale_bits + low_bits)))
    return totals


@dataclasses.dataclass
class AucTable:
    """Distinct predictions of some rows with their fixed-point positive and negative weight.

    prediction: (m,) float64, ascending and unique. positive, negative: (m,) int64 sums of
    round(w * y * scale) and round(w * (1 - y) * scale), with one ``scale`` for all tables merged.
    """

    prediction: np.ndarray
    positive: np.ndarray
    negative: np.ndarray


def _grouped(prediction, positive, negative, presorted_runs: bool = False) -> AucTable:
    # Tied predictions are totalled, so the sort need not be stable; a concatenation of sorted
    # tables is merged by the run-aware stable sort (timsort), unsorted rows by quicksort.
    order = np.argsort(prediction, kind="stable" if presorted_runs else "quicksort")
    p = prediction[order]
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]]) if len(p) else np.zeros(0, np.intp)
    if not len(p):
        return AucTable(p, np.zeros(0, np.int64), np.zeros(0, np.int64))
    return AucTable(p[starts], np.add.reduceat(positive[order], starts),
                    np.add.reduceat(negative[order], starts))


def auc_table(label, prediction, weight, scale: float) -> AucTable:
    """This process's table (host arrays in, see ``AucTable``)."""
    w = _weights(label, weight)
    positive = np.rint(w * label * scale).astype(np.int64)
    negative = np.rint(w * (1 - label) * scale).astype(np.int64)
    return _grouped(np.asarray(prediction, dtype=np.float64), positive, negative)


def _local_auc_table(parts: list[tuple], scale: float) -> AucTable:
    """One table for all of this process's parts (one sort over their rows)."""
    if not parts:
        return AucTable(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    weights = None if any(w is None for _, _, w in parts) else \
        np.concatenate([w for _, _, w in parts])
    return auc_table(np.concatenate([y for y, _, _ in parts]),
                     np.concatenate([p for _, p, _ in parts]), weights, scale)


def merge_auc_tables(tables: list[AucTable]) -> AucTable:
    """One table for the union of the tables' rows (exact; the order of ``tables`` does not
    matter)."""
    if len(tables) == 1:
        return tables[0]
    return _grouped(np.concatenate([t.prediction for t in tables]),
                    np.concatenate([t.positive for t in tables]),
                    np.concatenate([t.negative for t in tables]), presorted_runs=True)


def auc_from_table(table: AucTable) -> float:
    """Area under the ROC curve; tied predictions count half (the trapezoid rule). NaN when one
    class has no weight."""
    total_pos, total_neg = int(table.positive.sum()), int(table.negative.sum())
    if total_pos == 0 or total_neg == 0:
        return float("nan")
    negative_below = np.cumsum(table.negative) - table.negative  # exact int64
    area = np.sum(table.positive.astype(np.float64)
                  * (negative_below.astype(np.float64) + 0.5 * table.negative))
    return float(area / (float(total_pos) * float(total_neg)))


def evaluate_many(requests: list[tuple[list[str], list[tuple]]],
                  collective=LOCAL) -> list[list[float]]:
    """Several metrics over several evaluation sets, each set split into parts and processes.

    requests: per evaluation set, (metric names, parts), a part being (label, prediction, weight)
    host arrays. Returns the values per set, in the order of the names. Every process passes
    the same names (its parts may be empty lists) and gets the same values. At most five
    reductions in all: counts and maxima, the two-word sums, and one gather of the auc tables.
    """
    columns, plans, auc_inputs = [], [], []
    for names, parts in requests:
        for name in names:
            if name == "auc":
                auc_inputs.append(parts)
                plans.append(("auc", len(auc_inputs) - 1))
                continue
            terms = [_loss_terms(name, *part) for part in parts]
            columns += [[t[0] for t in terms], [t[1] for t in terms]]
            plans.append((name, len(columns) - 2))
    totals = exact_totals(columns, collective)
    aucs = []
    if auc_inputs:
        # One weight grid for each set's tables: the global count and largest weight.
        n = collective.allreduce_sum(np.array(
            [sum(len(p[0]) for p in parts) for parts in auc_inputs], dtype=np.int64))
        big = collective.allreduce_max(np.array(
            [max((float(_weights(label, weight).max())
                  for label, _, weight in parts if len(label)), default=0.0)
             for parts in auc_inputs], dtype=np.float64))
        local = [_local_auc_table(parts, fixed_point.fixed_point_scale(float(m), int(c)))
                 for parts, c, m in zip(auc_inputs, n, big)]
        gathered = collective.allgather(local)
        aucs = [auc_from_table(merge_auc_tables([g[j] for g in gathered]))
                for j in range(len(auc_inputs))]
    values, at = [], 0
    for names, _ in requests:
        values.append([])
        for _ in names:
            name, index = plans[at]
            at += 1
            values[-1].append(aucs[index] if name == "auc" else
                              _from_sums(name, totals[index], totals[index + 1]))
    return values


def evaluate(name: str, label, prediction, weight=None) -> float:
    """Metric ``name`` of predictions (transformed, not margins) against labels, on one process."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; known: {METRICS}")
    return evaluate_many([([name], [(np.asarray(label, dtype=np.float64),
                                     np.asarray(prediction, dtype=np.float64), weight)])])[0][0]


def rmse(label, prediction, weight=None):
    """Root mean squared error (weighted)."""
    return evaluate("rmse", label, prediction, weight)


def logloss(label, prediction, weight=None):
    """Binary cross-entropy (weighted), predictions clipped to [1e-15, 1 - 1e-15]."""
    return evaluate("logloss", label, prediction, weight)


def mlogloss(label, prediction, weight=None):
    """Multi-class cross-entropy (weighted); prediction (n, n_classes), labels 0..n_classes-1."""
    return evaluate("mlogloss", label, prediction, weight)


def auc(label, prediction, weight=None):
    """Area under the ROC curve; tied predictions count half (the trapezoid rule)."""
    return evaluate("auc", label, prediction, weight)
