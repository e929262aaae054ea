"""The metrics of every evaluation set, each round, computed where the predictions are.

Per round, whatever the number of sets and metrics: the row metrics' per-row losses and an auc
table per set are made on the predictions' device, then their words and a few integers a metric
are fetched in one copy, and one ``allreduce_sum`` adds the words. Everything summed is an
integer: the values do not depend on how a set is split into parts, workers or GPUs.

In one process nothing waits for the device until the values are read (``Pending.values``): a
loss without a bound has its fixed-point scale computed on the device, auc tables are filled
with atomics and compact tables sized by the rows. On several processes, a loss without a bound
and the range of the auc's keys need one wait and one ``allreduce_max``; dense auc tables are
summed in place where the collective sums on the device (NCCL), and otherwise each process's
occupied entries are gathered and merged (at most its rows, or 2**20 buckets).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import survival
from . import by_query, exact, tallies


@dataclasses.dataclass
class EvalData:
    """One evaluation set as this process holds it: per part the (n_i,) float64 labels and
    weights (or None) on the backend's device; n_rows and max_weight over every process (1.0
    without weights); n_classes: the predictions' columns (1: a (n_i,) vector); queries: per
    part its ``ranking.QueryGroups`` (weighted by query where the set is), or None: a set
    without query ids, which the ranking metrics cannot evaluate. query_auc: its auc and aucpr
    are XGBoost's ranking ones (``by_query``): it has query ids, the same on every process."""

    name: str
    labels: list
    weights: list | None
    n_rows: int
    max_weight: float
    n_classes: int = 1
    queries: list | None = None
    query_auc: bool = False  # auc and aucpr per query (``by_query``), as XGBoost's on query ids


def _row_term(backend, m, weighted: bool, columns: int = 1):
    """A row metric's weighted per-row loss as a function of (label, prediction[, extra][,
    weight]) device arrays: one kernel on the GPU (``Backend.fused``) for elementwise losses.
    columns: the predictions' (several quantiles' outputs): an elementwise loss is then each
    row's mean over them (XGBoost's sum over rows and outputs over their weight)."""
    xp, loss = backend.xp, m.loss
    if columns > 1 and not m.multiclass:
        loss = _column_mean(m.loss, columns)
    if m.precompute is not None:
        function = (lambda y, p, e, w: loss(xp, y, p, e) * w) if weighted else \
            (lambda y, p, e: loss(xp, y, p, e))
    else:
        function = (lambda y, p, w: loss(xp, y, p, None) * w) if weighted else \
            (lambda y, p: loss(xp, y, p, None))
    name = "gbflow_" + "".join(c if c.isalnum() else "_" for c in m.name) + \
        ("_weighted" if weighted else "")
    return function if m.multiclass or columns > 1 else backend.fused(function, name)


def _column_mean(loss, columns: int):
    """An elementwise loss of (n, columns) predictions as the (n,) mean over the columns,
    added column by column from the first: the same float64 value on every device (a
    reduction's order could differ between NumPy and CuPy)."""
    def mean(xp, y, p, extra):
        values = loss(xp, y[:, None], p, None if extra is None else extra[:, None])
        total = values[:, 0]
        for j in range(1, columns):
            total = total + values[:, j]
        return total / columns
    return mean


def _scalar(value) -> float:
    """A fetched 0-d (or one-element) array as a float."""
    return float(np.asarray(value).reshape(-1)[0])


class Pending:
    """A round's metric values on their way from the device: ``values()`` waits for them (and
    makes the round's last collective call, ``allreduce_sum``)."""

    def __init__(self, evaluator, copies, layout):
        self._evaluator, self._copies, self._layout = evaluator, copies, layout

    def values(self) -> list[list[float]]:
        """Per set, the metrics' values in the evaluator's order."""
        return self._evaluator._finish(self._copies.wait(), *self._layout)


class Evaluator:
    """``metrics`` (``definitions.Metric``) of every set in ``sets``, through ``collective``.
    Made once per training run (the weight totals and the label terms some metrics use are
    computed here, once: one exact sum and its reductions)."""

    def __init__(self, backend, metrics: list, sets: list[EvalData], collective):
        self.backend, self.metrics, self.sets, self.collective = backend, metrics, sets, collective
        # per set its metrics: auc and aucpr of a set with query ids are per query
        self.set_metrics = [[by_query.per_query(m) if s.query_auc and m.kind in ("auc", "aucpr")
                             else m for m in metrics] for s in sets]
        self.extras = [[[m.precompute(backend, y) if m.precompute is not None else None
                         for y in s.labels] for s in sets] for m in metrics]
        self.terms = {(mi, weighted, columns): _row_term(backend, m, weighted, columns)
                      for mi, m in enumerate(metrics) if m.kind == "row"
                      for weighted, columns in {(s.weights is not None, s.n_classes)
                                                for s in sets}}
        self.weight_scales = [tallies.weight_scale(s.n_rows, s.max_weight) for s in sets]
        # per set the tallies its metrics need (auc's, aucpr's)
        self.kinds = [{m.kind for m in ms} & {"auc", "aucpr"} for ms in self.set_metrics]
        self._dense_tables: dict = {}  # set -> its dense tally table, reused every round
        weighted = [s for s in sets if s.weights is not None]
        totals = exact.sums(backend, [s.weights for s in weighted], [s.n_rows for s in weighted],
                            [float(s.max_weight) for s in weighted], collective)
        by_set = dict(zip(map(id, weighted), totals))
        self.weight_totals = [by_set.get(id(s), float(s.n_rows)) for s in sets]
        self.query_totals = self._query_totals() \
            if any(m.kind == "query" for m in metrics) else []
        self.query_counts = self._query_counts()
        # cox-nloglik's risk sets: each set's rows ranked by time, once
        self.risk_sets = [survival.RiskSets(backend, s.labels, collective) for s in sets] \
            if any(m.kind == "cox" for m in metrics) else []

    def _query_totals(self) -> list[float]:
        """Per set, the sum of its queries' weights over every process (their count without
        weights): the ranking metrics' denominators."""
        for s in self.sets:
            if s.queries is None:
                raise ValueError(f"evaluation set {s.name!r} has no query ids (qid): the "
                                 f"ranking metrics rank rows within queries")
        counts = self.collective.allreduce_sum(np.array(
            [sum(q.n_queries for q in s.queries) for s in self.sets], dtype=np.int64))
        weighted = [s for s in self.sets if s.weights is not None]
        totals = exact.sums(self.backend, [[q.raw_weight for q in s.queries if q.n_queries]
                                           for s in weighted],
                            [s.n_rows for s in weighted], [float(s.max_weight) for s in weighted],
                            self.collective)
        by_set = dict(zip(map(id, weighted), totals))
        return [by_set.get(id(s), float(count)) for s, count in zip(self.sets, counts)]

    def _query_counts(self) -> dict:
        """(set, metric) -> the number of queries over every process that a "query" metric
        with ``counted`` averages over (XGBoost's ranking auc and aucpr)."""
        xp = self.backend.xp
        wanted = [(si, mi) for si, ms in enumerate(self.set_metrics)
                  for mi, m in enumerate(ms) if m.counted is not None]
        if not wanted:
            return {}
        local = np.array([sum(int(xp.count_nonzero(self.set_metrics[si][mi].counted(
            xp, q, y))) for q, y in zip(self.sets[si].queries, self.sets[si].labels))
            for si, mi in wanted], dtype=np.int64)
        return dict(zip(wanted, (float(c) for c in self.collective.allreduce_sum(local))))

    def values(self, predictions: list[list]) -> list[list[float]]:
        """``begin(predictions).values()``."""
        return self.begin(predictions).values()

    def begin(self, predictions: list[list]) -> Pending:
        """Start computing every metric of every set. predictions: per set, per part, the
        (n_i,) or (n_i, n_classes) float64 predictions (transformed: probabilities for the
        classification objectives) on the device. Every process calls it at the same round
        (and ``values()`` of the results in the same order)."""
        return self.fetch(self.queue(predictions))

    @property
    def recordable(self) -> bool:
        """Whether ``queue`` reads nothing back and copies nothing from the host, so that a
        ``Backend.recorder`` can record it: one process (several exchange maxima and tables
        between processes), and only row and auc metrics (the ranking and cox metrics' work
        is not vetted for it)."""
        return self.collective.size == 1 and \
            all(m.kind in ("row", "auc", "aucpr") for ms in self.set_metrics for m in ms)

    def fetch(self, queued: tuple) -> Pending:
        """``queue``'s results on their way to the host (a copy queued after the work)."""
        fetch, layout = queued
        return Pending(self, self.backend.to_host_later(fetch), layout)

    def queue(self, predictions: list[list]) -> tuple:
        """``begin``'s device work (the same ``predictions``): what ``fetch`` copies and how it
        is read. Side effect: work queued on the device."""
        xp = self.backend.xp
        columns, counts, bounds, row_at = [], [], [], {}
        for si, (s, preds) in enumerate(zip(self.sets, predictions)):
            weights = s.weights if s.weights is not None else [None] * len(s.labels)
            for mi, m in enumerate(self.set_metrics[si]):
                if m.kind == "row":
                    term = self.terms[mi, s.weights is not None, s.n_classes]
                    parts = [term(y, p, *(() if e is None else (e,)),
                                  *(() if w is None else (w,)))
                             for y, w, p, e in zip(s.labels, weights, preds, self.extras[mi][si])]
                elif m.kind == "query":
                    parts = [m.loss(xp, q, y, p, None)
                             for y, p, q in zip(s.labels, preds, s.queries)]
                elif m.kind == "cox":  # the risk sets' sums: a collective call on several
                    parts = m.loss(xp, self.risk_sets[si], preds)
                else:
                    continue
                row_at[si, mi] = len(columns)
                columns.append(parts)
                counts.append(s.n_rows)
                # (a weighted loss's bound scales with the weights; the values of a metric
                # averaged over counted queries are not weighted)
                bounds.append(None if m.bound is None else
                              float(m.bound * (1.0 if m.counted is not None else s.max_weight)))
        keys = [[self.backend.kernels.prediction_keys(p) for p in preds] if kinds else None
                for preds, kinds in zip(predictions, self.kinds)]
        ranges = self._bounds_and_ranges(columns, bounds, keys)
        column_words, grids = exact.words(self.backend, columns, counts, bounds)
        fetch = [w for column in column_words for w in column]
        fetch += [b for b in bounds if not isinstance(b, float)]  # device maxima: finite?
        fetch += [scale for scale, _ in grids if not isinstance(scale, float)]
        table_at = {}
        for si in range(len(self.sets)):
            if self.kinds[si]:
                table_at[si] = len(fetch)
                fetch += self._table_results(si, keys[si], ranges[si])
        layout = ([len(c) for c in column_words], grids, bounds, row_at, table_at)
        return fetch, layout

    def _finish(self, fetched: list, n_words: list, grids: list, bounds: list, row_at: dict,
                table_at: dict) -> list[list[float]]:
        at = iter(fetched)
        words = [[next(at) for _ in range(k)] for k in n_words]
        host_bounds = [b if isinstance(b, float) else _scalar(next(at)) for b in bounds]
        host_grids = [(scale if isinstance(scale, float) else _scalar(next(at)), low)
                      for scale, low in grids]
        sums = exact.totals(words, host_grids, host_bounds, self.collective)
        out = []
        for si, s in enumerate(self.sets):
            row = []
            for mi, m in enumerate(self.set_metrics[si]):
                if m.kind in ("row", "query", "cox"):
                    denominator = self.weight_totals[si] if m.kind == "row" else \
                        self.query_counts[si, mi] if m.counted is not None else \
                        self.query_totals[si] if m.kind == "query" else \
                        self.risk_sets[si].n_events
                    row.append(float(m.finish(sums[row_at[si, mi]], denominator)))
                    continue
                auc_words = fetched[table_at[si]]
                if m.kind == "auc":
                    row.append(tallies.auc_value(auc_words))
                else:
                    row.append(tallies.aucpr_value(
                        fetched[table_at[si] + 1], *exact.scales(1.0, tallies.n_terms(s.n_rows)),
                        np.reshape(auc_words, (-1, 3))[:, 1:]))
            out.append(row)
        return out

    def _bounds_and_ranges(self, columns: list, bounds: list, keys: list) -> list:
        """Fill the unknown ``bounds`` (in place) with the global max |value| of their columns,
        and return per set the (low, span) of its prediction keys where its auc buckets need
        them (else None). In one process both stay on the device (0-d arrays: nothing waits);
        on several, one wait for the device and one ``allreduce_max`` bring host values."""
        xp, backend, collective = self.backend.xp, self.backend, self.collective
        unknown = [j for j, b in enumerate(bounds) if b is None]
        local = [exact.local_max_abs(xp, columns[j]) for j in unknown]
        ranged = [si for si, s in enumerate(self.sets)
                  if keys[si] is not None and not tallies.by_value(s.n_rows)]
        if collective.size == 1:
            for j, value in zip(unknown, local):
                bounds[j] = value
            out = [None] * len(self.sets)
            for si in ranged:  # on the device: the keys' lowest value and span
                present = [k for k in keys[si] if k.size]
                low = present[0].min() if len(present) == 1 else \
                    xp.stack([k.min() for k in present]).min()
                high = present[0].max() if len(present) == 1 else \
                    xp.stack([k.max() for k in present]).max()
                out[si] = (low, high - low + 1)
            return out
        local += [r for si in ranged for r in tallies.key_range(xp, keys[si])]
        largest = np.atleast_1d(collective.allreduce_max(np.asarray(
            backend.to_host_all([xp.stack(local)])[0], dtype=np.float64))) if local else []
        for j, value in zip(unknown, largest):
            bounds[j] = float(value)
        out = [None] * len(self.sets)
        pairs = np.reshape(largest[len(unknown):], (-1, 2))
        for si, (high, minus_low) in zip(ranged, pairs):  # keys lie in [-minus_low, high]
            out[si] = (-int(minus_low), int(high) + int(minus_low) + 1)
        return out

    def _table_results(self, si: int, keys: list, key_range) -> list:
        """Set ``si``'s tally table's device results: auc's (n_classes, 3) words, and aucpr's
        areas' (n_classes, 2) words. A table a class for multi-class predictions (one class
        against the rest); by value (compact) or dense (``tallies``), summed over every
        process."""
        xp, kernels = self.backend.xp, self.backend.kernels
        s, scale = self.sets[si], self.weight_scales[si]
        weights = s.weights if s.weights is not None else [None] * len(s.labels)
        parts = [(y, w, k) for y, w, k in zip(s.labels, weights, keys) if len(y)]

        def targets(y, c):
            return y if s.n_classes == 1 else (y == c).astype(xp.float64)

        def column(b, c):
            return b if s.n_classes == 1 else b[:, c]

        if not tallies.by_value(s.n_rows):
            low, span = key_range
            parts = [(y, w, kernels.key_buckets(k, low, span, tallies.DENSE_BITS))
                     for y, w, k in parts]
        if tallies.by_value(s.n_rows) or (self.collective.size > 1 and
                                          not self.collective.sums_on_device):
            # keys or buckets as the entries of compact tables: in one process the dense
            # table is cheaper for large sets; between processes over the host, each process's
            # occupied buckets travel instead of the whole table (at most its rows)
            tables = [self._value_table([(targets(y, c), w, column(k, c)) for y, w, k in parts],
                                        scale) for c in range(s.n_classes)]
        elif self.collective.size == 1 and parts and "aucpr" not in self.kinds[si]:
            # one process and auc alone: the words straight from the rows (no table to add
            # with other processes'; on the CPU the occupied buckets alone, not 16 MB a round)
            def joined(arrays):
                return arrays[0] if len(arrays) == 1 else xp.concatenate(arrays)
            n_buckets = 1 << tallies.DENSE_BITS
            return [xp.stack([kernels.auc_bucket_words(
                joined([column(b, c) for _, _, b in parts]),
                joined([targets(y, c) for y, _, _ in parts]),
                None if parts[0][1] is None else joined([w for _, w, _ in parts]), scale,
                n_buckets) for c in range(s.n_classes)])]
        else:
            table = self._dense_tables.get(si)
            if table is None:  # kept: a fresh 16 MB table a round costs its page faults
                table = self._dense_tables[si] = xp.empty(
                    (s.n_classes, 2, 1 << tallies.DENSE_BITS), dtype=xp.int64)
            table.fill(0)  # after the previous round's results were made from it (stream order)
            for y, w, b in parts:
                for c in range(s.n_classes):
                    kernels.auc_tally(column(b, c), targets(y, c), w, scale, table[c])
            self.collective.allreduce_sum_inplace([table])
            tables = list(table)
        results = [xp.stack([kernels.auc_words(t) for t in tables])]
        if "aucpr" in self.kinds[si]:  # (n_classes, 2): a class's areas against the rest each
            results.append(xp.stack([kernels.fixed_point_words(
                tallies.aucpr_terms(xp, t)[0], *exact.scales(1.0, tallies.n_terms(s.n_rows)))
                for t in tables]))
        return results

    def _value_table(self, parts: list, scale: float):
        """The (2, m) int64 compact table, on the device, of (target, weight, key) parts (keys:
        float32 prediction keys, or bucket ids): in one process an entry per row
        (``occupied_keys``: the distinct keys first, in order); several processes gather
        their tables (a wait for the device; at most the set's rows, and at most 2**20 entries
        a process for buckets) and merge them into one per distinct key. The same tallies, in
        the same order, as a dense table's occupied buckets."""
        xp, backend = self.backend.xp, self.backend
        if parts:
            y = xp.concatenate([y for y, _, _ in parts])
            w = None if parts[0][1] is None else xp.concatenate([w for _, w, _ in parts])
            entries, position = backend.kernels.occupied_keys(
                xp.concatenate([k for _, _, k in parts]))
            table = backend.kernels.auc_tally(position, y, w, scale,
                                              xp.zeros((2, len(entries)), dtype=xp.int64))
        else:
            entries, table = xp.zeros(0, dtype=xp.int64), xp.zeros((2, 0), dtype=xp.int64)
        if self.collective.size == 1:
            return table
        merged = tallies.merge(self.collective.allgather(tuple(
            backend.to_host_all([entries, table]))))
        return backend.asarray(merged)
