"""Cox proportional hazards (survival:cox): risk sets by time rank, the loss and cox-nloglik.

Labels are XGBoost's: |label| is a row's time, an event where label > 0, censored where it is
<= 0. The loss is the negative log partial likelihood with Breslow's rule for tied times: the
risk set of time t holds every row whose time is >= t, with hazard p = exp(margin).

Why by rank: every row's gradient depends on sums over the whole training set (every part,
page and process), in the order of time. ``RiskSets`` ranks the rows once among the set's
distinct times; each round every process adds its rows' hazards per rank as two-word fixed
point (``metrics.exact``'s grid: integer sums, the same in any order), one ``allreduce_sum``
adds the (n_times, 2) tables, and the risk-set sums are suffix sums of the table, exact integers
converted once. So the risk sets, and the model, do not depend on how rows are split. Nothing
here waits for the device in one process.
"""
from __future__ import annotations

import math

import numpy as np

from . import _dtypes, fixed_point
from .collective import LOCAL
from .metrics import exact
from .objective_base import Objective, log_base_score, newton_step


def _last_of_runs(xp, ascending):
    """(n,) bool: True at the last element of each run of equal values of a sorted array."""
    last = xp.ones(len(ascending), dtype=bool)
    last[:-1] = ascending[1:] != ascending[:-1]
    return last


def _distinct(xp, values):
    """The distinct values of a 1-D array, ascending (a sort; NumPy's unique hashes, slower
    here)."""
    ascending = xp.sort(values)
    return ascending[_last_of_runs(xp, ascending)]


class _Part:
    """One part's rows in time order: ``order`` (n,) int64 row positions sorted by rank,
    ``ends`` the last sorted position of each rank present, ``present`` those ranks, ``rank``
    (n,) int64 each row's rank, ``event`` (n,) bool label > 0; all on the labels' device."""

    def __init__(self, xp, label, times):
        self.rank = xp.searchsorted(times, xp.abs(label)).astype(xp.int64)
        self.order = xp.argsort(self.rank, kind="stable")
        sorted_rank = self.rank[self.order]
        last = _last_of_runs(xp, sorted_rank)
        self.ends = xp.flatnonzero(last)
        self.present = sorted_rank[self.ends]
        self.distinct = len(self.present) == len(self.rank)  # no two rows share a time
        self.event = label > 0

    def per_rank(self, xp, in_order):
        """(len(present),) int64 sums per present rank of (n,) int64 values already in time
        order (``order``): exact (integer cumulative sums, differences at the ranks' last
        rows)."""
        if self.distinct:
            return in_order
        running = xp.cumsum(in_order)
        out = running[self.ends]
        out[1:] -= running[self.ends[:-1]]
        return out


class RiskSets:
    """One data set's rows ranked by time among its distinct times over every process of
    ``collective``; made once (one ``allgather`` of the distinct times, one ``allreduce_sum``
    of the event counts on several processes). labels: this process's parts' (n_i,) float64
    labels on ``backend``'s device. Between processes only host arrays travel."""

    def __init__(self, backend, labels: list, collective):
        xp = backend.xp
        self.xp, self.backend, self.collective = xp, backend, collective
        present = [y for y in labels if len(y)]  # finite: the inputs are checked
        local = _distinct(xp, xp.abs(xp.concatenate(present))) if present else \
            xp.zeros(0, dtype=xp.float64)
        if collective.size > 1:
            gathered = collective.allgather(backend.to_host_all([local])[0])
            local = backend.asarray(_distinct(np, np.concatenate(gathered)))
        self.times = local  # (n_times,) float64 ascending
        self.n_times = int(len(local))
        self.parts = [_Part(xp, y, local) for y in labels]
        self.n_rows = fixed_point.global_count(labels, collective)
        events = xp.zeros((self.n_times, 1), dtype=xp.int64)
        for part in self.parts:
            if len(part.rank):
                events[part.present, 0] += part.per_rank(
                    xp, part.event[part.order].astype(xp.int64))
        self.events = self._summed(events)[:, 0].astype(xp.float64)  # (n_times,) per rank
        self.n_events = int(self.events.sum())  # every process's: the table is summed

    def _summed(self, table):
        """An int64 device table summed over every process (through the host), on the device."""
        if self.collective.size == 1:
            return table
        return self.backend.asarray(self.collective.allreduce_sum(
            self.backend.to_host_all([table])[0]))

    def totals(self, hazards: list):
        """(n_times,) float64: per rank, the sum of the hazards of every row (over every
        process) whose time is at or after it. hazards: per part, (n_i,) float64 >= 0 on the
        device. The same values on every process and for any split of the rows; every sum is
        the largest hazard where that is not finite (an overflowed exp: inf, or NaN)."""
        xp, collective = self.xp, self.collective
        maxima = [h.max() for h in hazards if h.size]  # hazards are >= 0: no abs
        bound = xp.stack(maxima).max() if maxima else xp.zeros((), dtype=xp.float64)
        if collective.size == 1:
            scale = exact.device_scale(xp, bound, self.n_rows)
        else:
            bound = float(collective.allreduce_max(float(bound)))
            if not math.isfinite(bound):
                return xp.full(self.n_times, bound)
            scale = exact.scales(bound, self.n_rows)[0]
        low_scale = exact.scales(1.0, self.n_rows)[1]
        table = xp.zeros((self.n_times, 2), dtype=xp.int64)
        for h, part in zip(hazards, self.parts):
            if len(part.rank):
                with np.errstate(invalid="ignore"):  # non-finite hazards: replaced below
                    scaled = h[part.order] * scale
                    high = xp.rint(scaled)
                    low = xp.rint((scaled - high) * low_scale)
                    table[part.present, 0] += part.per_rank(xp, high.astype(xp.int64))
                    table[part.present, 1] += part.per_rank(xp, low.astype(xp.int64))
        table = self._summed(table)
        suffix = xp.cumsum(table[::-1], axis=0)[::-1]
        sums = suffix[:, 0].astype(xp.float64) / scale + \
            suffix[:, 1].astype(xp.float64) / (scale * low_scale)
        # in one process the bound stays on the device: a non-finite one (whose words above
        # are meaningless) replaces every sum there, without a wait
        return sums if collective.size > 1 else xp.where(xp.isfinite(bound), sums, bound)


class Cox(Objective):
    """survival:cox: gradients of the negative log partial likelihood (Breslow's ties),
    weighted as XGBoost's (a row's weight scales its gradient and hessian; the risk sets and
    events are not weighted). Predictions are hazard ratios exp(margin).

    Row i with hazard p_i = exp(margin_i) and time t_i: with A(t) = sum over times s <= t of
    d_s / R_s and B(t) = sum of d_s / R_s^2 (d_s events at time s, R_s the risk-set sum),
    gradient p_i A(t_i) - [event], hessian p_i A(t_i) - p_i^2 B(t_i). XGBoost walks the rows in
    time order and adds an event's term when it reaches that row, so among rows of one tied time
    a row sees only the tied events before it in row order; here it sees all of them (the
    rule does not depend on row order). Without tied times the two are the same.

    The default start margin is XGBoost's: one Newton step from margin 0, -sum(g) / sum(h)
    over the whole set (exact sums). The partial likelihood does not change with a common
    margin, so it moves only the predicted hazard ratios; without weights or tied times it is
    about 0. With tied times XGBoost's step depends on the row order (see above), gbflow's
    does not."""

    name = "survival:cox"
    default_metric = "cox-nloglik"
    row_wise = False
    # a row's gradients depend on the rows of every part and process at once: the loop asks
    # ``risk_sets`` for the training data's once and calls ``set_gradients`` each round
    whole_set = True

    def base_score_margin(self, base_score):  # a hazard ratio
        return log_base_score(self.name, base_score)

    def __init__(self):
        # (labels, collective, RiskSets) the default base score made, until the training loop
        # takes them (``risk_sets``): neither kept past training nor pickled
        self._made = None

    def __getstate__(self):
        return {**self.__dict__, "_made": None}

    def risk_sets(self, backend, labels: list, collective) -> RiskSets:
        """The training loop's ``RiskSets`` of these label arrays: the ones the default base
        score made of the same arrays (each a sort of every row and, on several processes,
        collective calls), handed over and forgotten here, else new ones."""
        made, self._made = self._made, None
        if made is not None and made[1] is collective and len(made[0]) == len(labels) and \
                all(a is b for a, b in zip(made[0], labels)):
            return made[2]
        return RiskSets(backend, labels, collective)

    def estimate_margin(self, xp, labels, weights, collective=LOCAL):
        from .backend import backend_for, get_backend
        backend = backend_for(labels[0]) if labels else get_backend("cpu")
        risk = RiskSets(backend, labels, collective)
        self._made = (list(labels), collective, risk)
        pairs = self.set_gradients(xp, risk, [xp.zeros((len(y), 1)) for y in labels],
                                   weights if weights is not None else [None] * len(labels))
        return np.array([newton_step(xp, pairs, collective)])

    def set_gradients(self, xp, risk: RiskSets, margins: list, weights: list) -> list:
        """Per part, (n_i, 1) float32 gradient and hessian. margins: per part (n_i, 1)
        float64; weights: per part (n_i,) or None. Every process calls it at the same round."""
        with np.errstate(over="ignore"):
            hazards = [xp.exp(m[:, 0]) for m in margins]
        totals = risk.totals(hazards)
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = xp.where(risk.events > 0, risk.events / totals, 0.0)
            inverse_squared = xp.where(risk.events > 0, inverse / totals, 0.0)
        before = xp.cumsum(inverse)  # A per rank (the same array on every process)
        before_squared = xp.cumsum(inverse_squared)
        out = []
        for p, part, w in zip(hazards, risk.parts, weights):
            with np.errstate(invalid="ignore", over="ignore"):  # overflow: training says so
                a = p * before[part.rank]
                grad = a - part.event
                hess = xp.maximum(a - p * p * before_squared[part.rank], 0.0)  # >= 0 but rounding
                if w is not None:
                    grad, hess = grad * w, hess * w
            out.append((grad.astype(_dtypes.GRADIENT)[:, None],
                        hess.astype(_dtypes.GRADIENT)[:, None]))
        return out

    def gradients(self, xp, margin, label, weight):
        """One part's gradients on its own (its rows are the whole data set)."""
        from .backend import backend_for
        return self.set_gradients(xp, RiskSets(backend_for(label), [label], LOCAL), [margin],
                                  [weight])[0]

    def transform(self, xp, margin):
        with np.errstate(over="ignore"):
            return xp.exp(margin[:, 0])


def negative_log_likelihood(xp, risk: RiskSets, predictions: list) -> list:
    """Per part, (n_i,) float64: log R(t_i) - log p_i for event rows, 0 for the others
    (cox-nloglik's terms; their global sum over the number of events is XGBoost's value).
    predictions: per part the (n_i,) hazards p (transformed predictions) on the device."""
    totals = risk.totals(predictions)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_totals = xp.log(totals)
        return [xp.where(part.event, log_totals[part.rank] - xp.log(p), 0.0)
                for p, part in zip(predictions, risk.parts)]
