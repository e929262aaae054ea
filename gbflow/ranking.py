"""Learning to rank: rows grouped by query, LambdaMART's gradients, and the ranking metrics.

XGBoost's definitions (its lambdarank objective and rank metrics): within each query the documents
are ranked by the model's scores (ties in row order); the top-k pair method pairs each of the first
k documents with every document ranked below it; a pair of different labels pushes the better
labelled document up and the other down by (1 - sigmoid(s_high - s_low)) |delta| (the change of
NDCG or MAP if the two swapped places, or 1 for rank:pairwise), divided by |s_high - s_low| + 0.01
unless every score of the query is equal; each query's gradients are then scaled by
log2(1 + S) / S (S: twice the sum of its pairs' pushes) and by its weight.

Why per query and in order: a query's rows lie in one part (checked), and every sum over a
query's rows runs in place order from 0.0 (the ``lambda_pairs`` kernel's loops, ``segment_sums``),
so a row's gradient depends on its query alone: the same on any partitioning and number of
processes. Prefix sums along a query (MAP's) are exact integers.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import fixed_point
from .backend import to_host
from .backend.numpy_kernels import RANK_MAP, RANK_NDCG, RANK_PAIRWISE
from .backend.segments import lambda_pairs, segment_sums, sort_segments
from .objective_base import Objective
from .sketch.keys import ordered_keys

# the ranking objectives and the metric change that weighs each of their pairs
OBJECTIVES = {"rank:ndcg": "ndcg", "rank:map": "map", "rank:pairwise": "pairwise"}
_KERNEL_KIND = {"ndcg": RANK_NDCG, "map": RANK_MAP, "pairwise": RANK_PAIRWISE}
EXP_GAIN_LIMIT = 31  # XGBoost's: with the gain 2**label - 1, labels are at most 31
DEFAULT_TOP_K = 32  # XGBoost's lambdarank_num_pair_per_sample for the top-k pair method
_MAP_SCALE = 2.0 ** 32  # fixed point of MAP's prefix sums (terms <= 1; parts < 2**30 rows)
# XGBoost's kRtEps: a relevance label within it of a whole number counts as that number (its
# labels are float32: float64 noise such as 3.0000000000000004 is a degree of 3)
WHOLE_TOLERANCE = 1e-6


def not_whole(xp, label):
    """(n,) bool: the labels farther than ``WHOLE_TOLERANCE`` from a whole number."""
    return xp.abs(label - xp.round(label)) > WHOLE_TOLERANCE


def whole_numbers(xp, label) -> bool:
    """Whether every label is a whole number to ``WHOLE_TOLERANCE`` (one device reduction)."""
    return not bool(not_whole(xp, label).any())


@dataclasses.dataclass(frozen=True)
class LambdaParams:
    """XGBoost's LambdaMART parameters. kind: the swapped pair's metric change, "ndcg", "map"
    or "pairwise" (1); top_k: lambdarank_num_pair_per_sample (the top-k pair method's k);
    normalize: lambdarank_normalization; score_normalize: lambdarank_score_normalization;
    exp_gain: ndcg_exp_gain (NDCG's gain 2**label - 1, else the label)."""

    kind: str  # (the objective's: ``LambdaRank`` sets it)
    top_k: int = DEFAULT_TOP_K
    normalize: bool = True
    score_normalize: bool = True
    exp_gain: bool = True


class QueryGroups:
    """The rows of one part grouped by query (XGBoost's qid), on the part's device.

    order: (n,) int64 row numbers sorted by (query id, row). starts: (Q + 1,) int64 where each
    query begins in ``order`` (host_starts: the same on the host). query_of: (n,) int64 each
    position's query, 0..Q-1 in id order; rank: (n,) int64 each position's place in its query
    (0 first). ids: (Q,) host int64 query ids. discount: (largest query,) float64 NDCG's
    discount of each place. raw_weight: (Q,)
    float64 each query's weight (XGBoost's group weights), or None; weight: the same times the
    normalisation ``set_norm`` gives (the gradients'), or None.
    """

    def __init__(self, xp, qid, row_weight=None, what: str = "the training data"):
        self.xp = xp
        n = len(qid)
        qid = xp.asarray(qid).astype(xp.int64)
        positions = xp.arange(n, dtype=xp.int64)
        self.order = xp.lexsort(xp.stack([positions, qid])).astype(xp.int64) if n else positions
        sorted_ids = qid[self.order]
        new = sorted_ids[1:] != sorted_ids[:-1]
        self.starts = xp.concatenate([xp.zeros(1 if n else 0, dtype=xp.int64),
                                      xp.flatnonzero(new).astype(xp.int64) + 1,
                                      xp.full(1, n, dtype=xp.int64)])
        self.query_of = xp.concatenate([xp.zeros(1 if n else 0, dtype=xp.int64),
                                        xp.cumsum(new, dtype=xp.int64)])
        self.host_starts = np.asarray(to_host(self.starts), dtype=np.int64)
        self.rank = positions - self.starts[self.query_of]
        self.ids = np.asarray(to_host(sorted_ids[self.starts[:-1]]), dtype=np.int64)
        largest = int(np.diff(self.host_starts).max()) if n else 1
        self.discount = _discount(xp, xp.arange(largest))
        self.raw_weight = self.weight = None
        if row_weight is not None:
            w = xp.asarray(row_weight, dtype=xp.float64)[self.order]
            first = w[self.starts[:-1]]
            differs = xp.flatnonzero(w != first[self.query_of])
            if len(differs):
                query = self.ids[int(to_host(self.query_of[differs[:1]])[0])]
                raise ValueError(f"weight of {what}: ranking weights belong to queries "
                                 f"(XGBoost's group weights), but the rows of query {query} "
                                 f"have different weights; give every row of a query its "
                                 f"query's weight")
            self.raw_weight = self.weight = first
        self._ideal: dict = {}  # (k, exp_gain) -> (Q,) ideal DCG
        self._tops: dict = {}  # k -> the top places' positions and where they are real
        self._label_order = None  # the rows by label (``label_order``), made once

    @property
    def n_queries(self) -> int:
        return len(self.host_starts) - 1

    def set_norm(self, factor: float) -> None:
        """Scale the gradients' query weights by ``factor`` (XGBoost's: the number of queries
        over the sum of their weights, both over every process)."""
        if self.raw_weight is not None:
            self.weight = self.raw_weight * factor

    def ranked(self, score):
        """(n,) int64 row numbers, queries in id order, each query's rows by ``score``
        ((n,) float64) descending as float32 (XGBoost ranks its float32 predictions), equal
        ones in row order: one segmented sort of ordered uint32 keys (a third of the time of a
        lexsort of the float64 scores)."""
        xp = self.xp
        if not len(self.order):
            return self.order
        keys = ordered_keys(xp, (-score[self.order]).astype(xp.float32))
        _, places = sort_segments(xp, self.starts, keys,
                                  xp.arange(len(self.order), dtype=xp.float64))
        return self.order[places.astype(xp.int64)]

    def row_ids(self) -> np.ndarray:
        """(n,) host int64 each row's query id, in row order."""
        out = np.empty(len(self.order), dtype=np.int64)
        out[to_host(self.order)] = self.ids[to_host(self.query_of)]
        return out

    def label_order(self, label):
        """``ranked(label)``: each query's rows by label, best first, equal labels in row
        order; computed at the first call (the labels of a set do not change)."""
        if self._label_order is None:
            self._label_order = self.ranked(label)
        return self._label_order

    def top_places(self, k: int):
        """((Q, k) bool: query q has a place i, (m,) int64 the positions of those places, in
        (query, place) order), made once per k."""
        if k not in self._tops:
            places = self.xp.arange(k)
            inside = places[None, :] < (self.starts[1:] - self.starts[:-1])[:, None]
            self._tops[k] = (inside, (self.starts[:-1][:, None] + places[None, :])[inside])
        return self._tops[k]

    def sums(self, values):
        """(Q,) float64 per query sums of (n,) float64 ``values`` given in position order."""
        return segment_sums(self.xp, self.starts, values[:, None])[:, 0]

    def ideal_dcg(self, label, k: int | None, exp_gain: bool):
        """(Q,) float64 each query's best DCG over its first ``k`` places (None: all), for the
        labels ``label`` ((n,) float64 by row); computed once per (k, exp_gain)."""
        key = (k, exp_gain)
        if key not in self._ideal:
            best = self.ranked(label)
            terms = _gain(self.xp, label[best], exp_gain) * _discount(self.xp, self.rank)
            if k is not None:
                terms = self.xp.where(self.rank < k, terms, 0.0)
            self._ideal[key] = self.sums(terms)
        return self._ideal[key]


def _gain(xp, label, exp_gain: bool):
    return xp.exp2(label) - 1.0 if exp_gain else label


def _discount(xp, rank):
    return 1.0 / xp.log2(rank.astype(xp.float64) + 2.0)


def _within_query_prefix(xp, queries, values):
    """(n,) inclusive prefix sums of ``values`` (exact integers as float64, in position order)
    restarted at every query."""
    total = xp.cumsum(values)
    first = queries.starts[queries.query_of]
    return total - (total[first] - values[first])


def _map_prefixes(xp, queries, y, rank):
    """MAP's per-position statistics in the model's order: the relevant documents up to and
    including each place, and the sum of label / place over those places (exact: integers,
    and a fixed-point sum)."""
    relevant = _within_query_prefix(xp, queries, y)
    terms = xp.rint(y / (rank + 1.0) * _MAP_SCALE)
    return relevant, _within_query_prefix(xp, queries, terms) / _MAP_SCALE


def lambda_gradients(xp, score, label, queries: QueryGroups, lp: LambdaParams):
    """LambdaMART's (n, 1) float32 gradient and hessian of one part.

    score: (n,) float64 margins; label: (n,) float64 relevance (binary for "map"); queries:
    the part's ``QueryGroups`` (their ``weight``, if any, scales each query). Pairs: the
    top-k method (each of a query's first ``lp.top_k`` places with every place below it),
    summed by the ``lambda_pairs`` kernel."""
    # (a k past the largest query pairs no more: capped, the (Q, k) arrays stay small when
    # k stands for "all pairs")
    n, k = len(score), min(lp.top_k, len(queries.discount))
    grad, hess = xp.zeros(n), xp.zeros(n)
    if n == 0:
        return grad[:, None].astype(np.float32), hess[:, None].astype(np.float32)
    ranked = queries.ranked(score)
    y, s = label[ranked], score[ranked]
    starts, query_of = queries.starts, queries.query_of
    # exp(s - the query's best score) <= 1: each pair's sigmoid is a ratio of two of them
    e = xp.exp(s - s[starts[:-1]][query_of])
    gain = inverse_ideal = relevant = acc = y  # (what the pair kind does not read)
    if lp.kind == "ndcg":
        gain = _gain(xp, y, lp.exp_gain)
        ideal = queries.ideal_dcg(label, k, lp.exp_gain)
        inverse_ideal = xp.where(ideal > 0, 1.0 / xp.where(ideal > 0, ideal, 1.0), 0.0)
    elif lp.kind == "map":
        relevant, acc = _map_prefixes(xp, queries, y, queries.rank)
    own, top = lambda_pairs(xp, y, s, e, gain, queries.discount, inverse_ideal, relevant, acc,
                            starts, query_of, _KERNEL_KIND[lp.kind], k, lp.score_normalize,
                            xp.empty((n, 3)), xp.empty((queries.n_queries, k, 2)))
    g, h = own[:, 0].copy(), own[:, 1].copy()
    inside, targets = queries.top_places(k)
    g[targets] += top[:, :, 0][inside]
    h[targets] += top[:, :, 1][inside]
    factor = xp.ones(queries.n_queries)
    if lp.normalize:
        push_total = 2.0 * queries.sums(xp.ascontiguousarray(own[:, 2]))
        positive = push_total > 0
        safe = xp.where(positive, push_total, 1.0)
        factor = xp.where(positive, xp.log2(1.0 + safe) / safe, 1.0)
    if queries.weight is not None:
        factor = factor * queries.weight
    grad[ranked] = g * factor[query_of]
    hess[ranked] = h * factor[query_of]
    return grad[:, None].astype(np.float32), hess[:, None].astype(np.float32)


def query_scores(xp, kind: str, k: int | None, minus: bool, exp_gain: bool, score, label,
                 queries: QueryGroups):
    """(Q,) float64 each query's XGBoost metric "ndcg", "map" or "pre" at ``k`` (None: the
    whole list) for scores ``score`` and labels ``label`` ((n,) float64 by row), times the
    query's weight (``queries.raw_weight``). A query whose ideal is 0 (no relevant document)
    scores 1, or 0 with ``minus`` (XGBoost's "ndcg-"). XGBoost leaves that 1 of "ndcg"
    unweighted, so that its weighted NDCG can pass 1 (and then stops with an error): here it is
    weighted like every query's value, a weighted mean."""
    ranked = queries.ranked(score)
    y, rank = label[ranked], queries.rank
    shown = rank < k if k is not None else xp.ones(len(rank), dtype=bool)
    empty = 0.0 if minus else 1.0
    weight = 1.0 if queries.raw_weight is None else queries.raw_weight
    if kind == "ndcg":
        dcg = queries.sums(xp.where(shown, _gain(xp, y, exp_gain) * _discount(xp, rank), 0.0))
        ideal = queries.ideal_dcg(label, k, exp_gain)
        return xp.where(ideal > 0, dcg / xp.where(ideal > 0, ideal, 1.0), empty) * weight
    if kind == "map":
        hits = _within_query_prefix(xp, queries, y)
        precision_sum = queries.sums(xp.where(shown, hits / (rank + 1.0) * y, 0.0))
        relevant = queries.sums(y)
        relevant_shown = relevant if k is None else xp.minimum(relevant, float(k))
        return xp.where(relevant > 0, precision_sum / xp.where(relevant > 0, relevant_shown, 1.0),
                        empty) * weight
    sizes = (queries.starts[1:] - queries.starts[:-1]).astype(xp.float64)
    shown_count = sizes if k is None else xp.minimum(sizes, float(k))
    return queries.sums(xp.where(shown, y, 0.0)) / shown_count * weight


class LambdaRank(Objective):
    """rank:ndcg, rank:map and rank:pairwise (XGBoost's LambdaMART, top-k pairs): predictions
    are the margins, scores to sort each query by. The start is margin 0 (XGBoost's estimate,
    one Newton step from 0, is 0 too up to rounding: a query's pushes cancel). Row weights
    are the queries' (constant within one, as XGBoost's group weights)."""

    by_query = True
    row_wise = False

    def __init__(self, name: str, lambda_params: LambdaParams | None = None):
        self.name = name
        self.lambda_params = dataclasses.replace(lambda_params or LambdaParams(""),
                                                 kind=OBJECTIVES[name])
        self.default_metric = \
            f"{'map' if name == 'rank:map' else 'ndcg'}@{self.lambda_params.top_k}"

    def check_label(self, label, where):
        if self.lambda_params.kind == "map":
            bad = (np.abs(label) > WHOLE_TOLERANCE) & (np.abs(label - 1) > WHOLE_TOLERANCE)
            rule = "binary relevance labels, 0 or 1"
        elif self.lambda_params.kind == "ndcg" and self.lambda_params.exp_gain:
            bad = (label < -WHOLE_TOLERANCE) | (label > EXP_GAIN_LIMIT + WHOLE_TOLERANCE) | \
                not_whole(np, label)
            rule = (f"whole relevance degrees 0..{EXP_GAIN_LIMIT} (its gain is 2**label - 1; "
                    f"set ndcg_exp_gain=False for the label itself)")
        else:
            return
        if bad.any():
            raise ValueError(f"{self.name} needs {rule}; {where} has {int(bad.sum())} others, "
                             f"e.g. {float(label[bad][0]):g}")

    def gradients(self, xp, margin, label, weight):
        raise TypeError(f"{self.name}'s gradients need the rows' queries (query_gradients)")

    def query_gradients(self, xp, margin, label, queries):
        return lambda_gradients(xp, margin[:, 0], label, queries, self.lambda_params)

    def transform(self, xp, margin):
        return margin[:, 0]


def part_queries(xp, qids: list, weights: list | None, collective, what: str,
                 normalize: bool = True, n_rows: list | None = None) -> list[QueryGroups]:
    """Each part's ``QueryGroups`` from its (n_i,) query ids and row weights (or None), checked
    across every process: every part has ids, and no query spans parts (``check_apart``). With
    ``normalize``, the query weights are scaled by XGBoost's factor, the number of queries over
    the sum of their weights (both over every process: exact). Every process calls it.

    Without ids anywhere, where the data is one part in all (``n_rows``: each part's rows;
    None: ids are required), its rows are one query, as XGBoost ranks data without ids; over
    several parts that query would span them, and a ValueError says so."""
    lacking, n_parts = (int(v) for v in collective.allreduce_sum(np.array(
        [sum(q is None for q in qids), len(qids)], dtype=np.int64)))
    if lacking == n_parts == 1 and n_rows is not None:
        qids = [xp.zeros(int(n), dtype=xp.int64) for n in n_rows]  # the one part's
        what += " (no qid: its rows are one query, which takes one weight)"
    elif lacking == n_parts and n_rows is not None:
        raise ValueError(f"{what} has no query ids (qid) and lies in {n_parts} parts (its "
                         f"rows on several Dask workers): XGBoost then ranks all its rows as one "
                         f"query, which gbflow ranks only within one part; give each row's "
                         f"query id (qid), or the data in one partition")
    elif lacking:
        raise ValueError(f"{what} has no query ids (qid): ranking needs each row's query; give "
                         f"the qid column (or array) for it too")
    groups = [QueryGroups(xp, q, None if weights is None else w, what)
              for q, w in zip(qids, weights if weights is not None else [None] * len(qids))]
    id_sets = [ids for process in collective.allgather([g.ids for g in groups])
               for ids in process]
    check_apart(id_sets, what)
    if normalize and weights is not None:
        total = fixed_point.exact_sum(xp, [g.raw_weight for g in groups], collective=collective)
        if not total > 0:
            raise ValueError(f"weight of {what}: every query's weight is zero")
        for g in groups:
            g.set_norm(sum(len(ids) for ids in id_sets) / total)
    return groups


def check_apart(id_sets: list, what: str) -> None:
    """ValueError when a query id occurs in more than one of ``id_sets`` (each part's or
    process's (Q_i,) host query ids): a query's rows must lie in one part (one Dask
    partition), where its gradients are computed."""
    if len(id_sets) < 2:
        return
    every = np.concatenate([np.asarray(i, dtype=np.int64) for i in id_sets])
    values, counts = np.unique(every, return_counts=True)
    shared = values[counts > 1]
    if len(shared):
        shown = ", ".join(str(int(v)) for v in shared[:5])
        raise ValueError(f"qid of {what}: the rows of query {shown}"
                         f"{' ...' if len(shared) > 5 else ''} lie in more than one partition; "
                         f"a query's rows must lie in one (for a Dask DataFrame: set_index or "
                         f"shuffle on the query column, or repartition at query boundaries)")
