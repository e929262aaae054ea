"""The objective interface every loss implements, and the helpers the losses share."""
from __future__ import annotations

import math

import numpy as np

from . import fixed_point
from .backend.arrays import to_host
from .backend.losses import weighted_rows
from .backend.tables import table_counts
from .collective import LOCAL


class Objective:
    """One loss. Arrays are in the ``xp`` namespace passed to each method.

    margin: (n_rows, n_groups) float64; label: (n_rows,) float64; weight: (n_rows,) or None.
    """

    name = ""
    default_metric = ""
    # per output group, the quantile of the residuals each leaf of its trees is set to after
    # the tree (a line search); None: no line search
    leaf_alphas: tuple[float, ...] | None = None
    n_groups = 1  # margins (and trees) per row and round
    # each row's gradients depend on that row alone: they may be computed a block of rows at a
    # time (a custom objective sees every row at once, as XGBoost's does)
    row_wise = True
    # a row's gradients depend on the other rows of its query (learning to rank): the loop
    # calls ``query_gradients`` with each shard's ``ranking.QueryGroups`` instead
    by_query = False
    # a row's gradients depend on every row of the training data, over every part and process
    # (survival:cox's risk sets): the loop asks ``risk_sets(backend, labels, collective)`` for
    # the training labels' once and calls ``set_gradients(xp, risk_sets, margins, weights)``
    # each round
    whole_set = False
    # the gradients are ``row_gradients`` (``ElementwiseLoss``)
    elementwise = False

    @property
    def n_outputs(self) -> int:
        """Prediction columns (``transform``'s): n_groups, or 1 for multi:softmax's class."""
        return self.n_groups

    def check_label(self, label: np.ndarray, where: str) -> None:
        """Raise ValueError naming ``where`` if the (host) label cannot be used with this loss."""

    def base_score_margin(self, base_score: float) -> float:
        """The margin of a user's ``base_score`` (XGBoost's: given in prediction space);
        ValueError naming the parameter where the link cannot take it."""
        return float(base_score)

    def base_margin(self, xp, labels: list, weights: list | None, base_score,
                    collective=LOCAL) -> np.ndarray:
        """(n_groups,) float64 starting margin: ``base_score_margin(base_score)`` if given, else
        ``estimate_margin``. Every process must call it."""
        if base_score is not None:
            return np.full(self.n_groups, self.base_score_margin(base_score))
        return self.estimate_margin(xp, labels, weights, collective)

    def estimate_margin(self, xp, labels: list, weights: list | None,
                        collective=LOCAL) -> np.ndarray:
        """(n_groups,) float64 default start (XGBoost's estimate for the loss), from every
        process's ``labels``/``weights`` (lists of per-shard arrays) through ``collective`` with
        exact sums, so it does not depend on how rows are split; margin 0 here."""
        return np.zeros(self.n_groups)

    def gradients(self, xp, margin, label, weight):
        """(n_rows, n_groups) float32 gradient and hessian (new arrays)."""
        raise NotImplementedError

    def query_gradients(self, xp, margin, label, queries):
        """(n_rows, 1) float32 gradient and hessian of a ``by_query`` loss; queries: the
        shard's ``ranking.QueryGroups`` (their weights are the queries')."""
        raise NotImplementedError

    def transform(self, xp, margin):
        """Margins -> predictions: (n_rows,) for one output, (n_rows, n_outputs) otherwise."""
        raise NotImplementedError

    def eval_transform(self, xp, margin):
        """Margins -> what the metrics see (XGBoost's: multi:softmax's metrics see the
        probabilities, not the class)."""
        return self.transform(xp, margin)

    # The name of the backend kernel that ``transform`` and ``eval_transform`` are of an (n, 1)
    # margin's column (``Logistic``: "sigmoid"), or None.
    link_kernel: str | None = None
    # The name of the backend kernel that computes ``gradients`` (margin, label, kernel_weight)
    # -> (grad, hess) (its margin the (n,) column for one output group, else (n, n_groups);
    # the same values, bit for bit), or None: training calls ``gradients`` itself.
    gradient_kernel: str | None = None

    def kernel_weight(self, xp, label, weight):
        """The (n,) row weights ``gradient_kernel`` multiplies by (None: unweighted)."""
        return weight

    def predictions(self, backend, margin, for_metrics: bool = False):
        """``transform`` (``eval_transform`` when ``for_metrics``) of (n, k) float64 ``margin``
        on ``backend``'s device: through the kernel ``link_kernel`` names where there is one
        (the same values; on the CPU the rows on numba's threads: a new array), else the
        method itself (which may return a view of ``margin``)."""
        xp = backend.xp
        if self.link_kernel is not None and margin.shape[1] == 1 and \
                isinstance(margin, xp.ndarray) and margin.dtype == xp.float64:
            column = margin[:, 0]
            return getattr(backend.kernels, self.link_kernel)(
                column, xp.empty(column.shape, dtype=xp.float64))
        return (self.eval_transform if for_metrics else self.transform)(xp, margin)

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


def log_base_score(name: str, base_score) -> float:
    """The margin of a ``base_score`` under a log link (a mean, or survival:cox's hazard
    ratio); ValueError naming the objective unless it is > 0."""
    if not float(base_score) > 0:
        raise ValueError(f"parameter base_score must be > 0 for {name} (its link is the "
                         f"logarithm), got {base_score!r}")
    return math.log(float(base_score))


def weighted_mean(xp, values: list, weights: list | None, collective) -> float:
    if weights is None:
        return fixed_point.exact_sum(xp, values, collective=collective) / \
            fixed_point.global_count(values, collective)
    total_weight = fixed_point.exact_sum(xp, weights, collective=collective)
    if total_weight <= 0:
        raise ValueError("the weights sum to zero: nothing to train on")
    return fixed_point.exact_sum(xp, [v * w for v, w in zip(values, weights)],
                               collective=collective) / total_weight


def class_weights(xp, labels: list, weights: list | None, n_classes: int,
                  collective) -> np.ndarray:
    """(n_classes,) float64 total weight (or count) of each class 0..n_classes - 1 over every
    process's integer ``labels`` (lists of per-shard arrays, any of them empty): integer counts,
    or weights on one fixed-point grid whose totals stay below 2**53, summed per class as
    integer-valued float64 (exact in any order), so the totals do not depend on how rows are
    split. ``table_counts`` makes the tables (not CuPy's bincount: see there)."""
    totals = np.zeros(n_classes, dtype=np.int64)
    if weights is None:
        for y in labels:
            totals += to_host(table_counts(xp, y.astype(xp.int64), n_classes))
        return collective.allreduce_sum(totals).astype(np.float64)
    scale = fixed_point.fixed_point_scale(
        float(collective.allreduce_max(fixed_point.local_max_abs(xp, weights))),
        fixed_point.global_count(weights, collective), limit=2.0 ** 52)
    for y, w in zip(labels, weights):
        fixed = fixed_point.to_fixed(xp, w, scale).astype(xp.float64)
        # integer-valued float64 sums below 2**53: exact as int64
        totals += to_host(table_counts(xp, y.astype(xp.int64), n_classes, fixed)).astype(
            np.int64)
    return collective.allreduce_sum(totals) / scale


def newton_step_from_zero(objective, xp, labels: list, weights: list | None,
                           collective) -> float:
    """XGBoost's default intercept for the losses without a closed-form one: a single Newton
    step from margin 0, -sum(g) / sum(h) over every process's rows (exact sums: the same
    however the rows are split)."""
    return newton_step(xp, [objective.gradients(xp, xp.zeros((len(y), 1)), y,
                                                None if weights is None else weights[i])
                            for i, y in enumerate(labels)], collective)


def newton_step(xp, pairs: list, collective) -> float:
    """-sum(g) / sum(h) of every process's (g, h) gradient pairs (float arrays), exact sums;
    0.0 when the hessians do not sum above 0."""
    total_h = fixed_point.exact_sum(xp, [h.astype(xp.float64) for _, h in pairs],
                                    collective=collective)
    if not total_h > 0:
        return 0.0
    return -fixed_point.exact_sum(xp, [g.astype(xp.float64) for g, _ in pairs],
                                  collective=collective) / total_h


class ElementwiseLoss:
    """A loss whose gradients are elementwise arithmetic on arrays of one shape (no reduction,
    no indexing, no array made from a shape), written once as ``row_gradients(xp, margin,
    label, weight)``: here on (n, 1) columns; the training loop calls it on flat (n,) arrays,
    which the GPU runs as one fused kernel (``Backend.fused``; a fused kernel of (n, 1)
    columns computes its broadcast indices per element and was two times slower than the
    separate launches). Mixed in before the loss's class; one output group."""

    elementwise = True

    def gradients(self, xp, margin, label, weight):
        return self.row_gradients(xp, margin, label[:, None],
                                  None if weight is None else weight[:, None])


def weighted(xp, grad, hess, weight):
    """float32 (n, k) gradient and hessian, times the (n,) row weights when there are some."""
    return weighted_rows(xp, grad, hess, None if weight is None else weight[:, None])
