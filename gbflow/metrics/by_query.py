"""auc and aucpr of data with query ids: per query, as XGBoost evaluates them for ranking.

On data with query ids XGBoost computes "auc" and "aucpr" query by query and reports the plain
mean over the queries it can count (query weights do not weigh the mean):

- auc: a query's documents are put in label order, best first (equal labels in row order), and
  every pair of them counts 1 where the earlier one's prediction is larger, 1/2 where the two
  are equal, over the number of pairs. Pairs of equal labels count too, in row order, as in
  XGBoost. Queries of fewer than 3 documents are not counted; a query of weight 0 counts 0.
- aucpr: a query's own binary area under the precision-recall curve (its weight on each of its
  rows; labels in [0, 1]); a query without weight on both sides is not counted.

Each query's value depends on its own rows alone (integer pair counts; its curve's sums in
place order) and the mean is an exact sum (``exact``) over a count of queries, so the value is
the same on any partitioning, as every gbflow metric's.
"""
from __future__ import annotations

import dataclasses

from ..backend.segments import pair_order_counts
from . import tallies
from .definitions import Metric, mean

_MIN_DOCUMENTS = 3  # XGBoost's: with 2 documents a query has one pair, so one side is empty
# aucpr's labels in fixed point, so that the prefix sums along a query are exact integers
# (rows of a part < 2**31: the sums stay below 2**61)
_LABEL_SCALE = 2.0 ** 30


def _sizes(xp, queries):
    return (queries.starts[1:] - queries.starts[:-1]).astype(xp.float64)


def _weighed(xp, queries, values):
    """A query of weight 0 counts 0 (XGBoost weighs each pair by the squared query weight)."""
    if queries.raw_weight is None:
        return values
    return xp.where(queries.raw_weight != 0, values, 0.0)


def auc_values(xp, queries, label, prediction, extra=None):
    """(Q,) float64 each query's pairwise auc (0 where it is not counted: ``auc_counted``).
    label, prediction: (n,) float64 by row; predictions are compared as float32, as
    XGBoost's."""
    by_label = queries.label_order(label)
    counts = pair_order_counts(xp, prediction[by_label].astype(xp.float32), queries.starts,
                               queries.query_of)
    twice_pairs = queries.sums(counts.astype(xp.float64))  # 2 a larger, 1 an equal
    sizes = _sizes(xp, queries)
    counted = sizes >= _MIN_DOCUMENTS
    pairs = xp.where(counted, sizes * (sizes - 1.0), 1.0)  # twice the number of pairs
    return _weighed(xp, queries, xp.where(counted, twice_pairs / pairs, 0.0))


def auc_counted(xp, queries, label):
    """(Q,) bool: the queries auc's mean counts (3 documents or more)."""
    return _sizes(xp, queries) >= _MIN_DOCUMENTS


def _prefix(xp, queries, values):
    """(n,) int64 inclusive prefix sums of (n,) int64 ``values`` restarted at every query."""
    total = xp.cumsum(values)
    first = queries.starts[queries.query_of]
    return total - (total[first] - values[first])


def _class_weights(xp, label):
    """(positive, negative): (n,) int64 each row's label and 1 - label in fixed point
    (``_LABEL_SCALE``), for (n,) labels. The query's weight is left out: it scales every row of
    the query alike, which leaves the query's curve as it is."""
    positive = xp.rint(label * _LABEL_SCALE).astype(xp.int64)
    negative = int(_LABEL_SCALE) - positive
    return positive, negative


def aucpr_values(xp, queries, label, prediction, extra=None):
    """(Q,) float64 each query's aucpr (0 where it is not counted: ``aucpr_counted``): its rows
    by prediction (as float32), best first, equal predictions one step of the curve."""
    n = len(prediction)
    if n == 0:
        return xp.zeros(queries.n_queries, dtype=xp.float64)
    ranked = queries.ranked(prediction)
    score = prediction[ranked].astype(xp.float32)
    positive, negative = _class_weights(xp, label[ranked])
    tp, fp = _prefix(xp, queries, positive), _prefix(xp, queries, negative)
    last = queries.starts[1:][queries.query_of] - 1  # each position's query's last place
    place = xp.arange(n)
    ends = xp.flatnonzero((place == last) | xp.concatenate(
        [score[1:] != score[:-1], xp.ones(1, dtype=bool)]))
    query = queries.query_of[ends]
    # the step before each step end within its query (0 at a query's first step)
    follows = xp.concatenate([xp.zeros(1, dtype=bool), query[1:] == query[:-1]])
    tp_end, fp_end = tp[ends], fp[ends]
    tp_before = xp.where(follows, xp.concatenate([xp.zeros(1, dtype=xp.int64), tp_end[:-1]]), 0)
    fp_before = xp.where(follows, xp.concatenate([xp.zeros(1, dtype=xp.int64), fp_end[:-1]]), 0)
    # each query's totals are its last place's prefix sums (``aucpr_counted``'s, from them)
    positives, negatives = tp[queries.starts[1:] - 1], fp[queries.starts[1:] - 1]
    areas = tallies.pr_areas(xp, (tp_end - tp_before).astype(xp.float64),
                             (fp_end - fp_before).astype(xp.float64),
                             tp_end.astype(xp.float64), fp_end.astype(xp.float64),
                             xp.maximum(positives[query], 1).astype(xp.float64))
    by_place = xp.zeros(n, dtype=xp.float64)
    by_place[ends] = areas
    values = queries.sums(by_place)
    return _weighed(xp, queries, xp.where((positives > 0) & (negatives > 0), values, 0.0))


def aucpr_counted(xp, queries, label):
    """(Q,) bool: the queries aucpr's mean counts (weight on both sides)."""
    positive, negative = _class_weights(xp, label[queries.order])
    counted = (queries.sums(positive.astype(xp.float64)) > 0) & \
        (queries.sums(negative.astype(xp.float64)) > 0)
    if queries.raw_weight is not None:
        counted &= queries.raw_weight != 0
    return counted


def per_query(m: Metric) -> Metric:
    """The per-query form of ``m`` ("auc" or "aucpr"): a "query" metric whose mean is over the
    queries it counts (``Metric.counted``)."""
    if m.kind == "auc":
        return dataclasses.replace(m, kind="query", loss=auc_values, counted=auc_counted,
                                   finish=mean, bound=1.0, labels=None, any_outputs=False)
    return dataclasses.replace(m, kind="query", loss=aucpr_values, counted=aucpr_counted,
                               finish=mean, bound=1.0, any_outputs=False)
