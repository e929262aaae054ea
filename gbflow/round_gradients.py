"""A boosting round's gradients: the objective's per row set (in blocks of rows), their largest
values over every process, and each tree's fixed-point scales."""
from __future__ import annotations

import numpy as np

from . import fixed_point
from .rules import Scales

# Rows per block of the gradient computation: the losses' float64 temporaries (a few arrays the
# size of the margins) stay a few tens of MB however many rows a shard holds.
GRADIENT_ROWS = 1 << 21


def tree_scales(largest: np.ndarray, k: int, n_total: int) -> Scales:
    """Output k's fixed-point scales from the round's (n_groups, 2) largest |g| and |h|."""
    return Scales(fixed_point.fixed_point_scale(float(largest[k, 0]), n_total),
                  fixed_point.fixed_point_scale(float(largest[k, 1]), n_total))


def gradient_function(backend, objective, weighted: bool):
    """``objective.gradients`` as a function of (margin, label, weight) arrays: the backend
    kernel that ``objective.gradient_kernel`` names where there is one. Another
    ``ElementwiseLoss``'s ``row_gradients`` run on the flat (n,) margin, label and weight, on
    the GPU as one fused kernel (``Backend.fused``; made once a training, as CuPy traces the
    function at each new fusion: a loss's separate launches and temporaries a block of rows
    were much of a small round). The same values, bit for bit (tests/test_objectives.py);
    (n, 1) views come back."""
    xp = backend.xp
    if objective.gradient_kernel is not None:
        return _kernel_gradients(xp, objective, getattr(backend.kernels, objective.gradient_kernel))
    if not objective.elementwise:
        return lambda margin, label, weight: objective.gradients(xp, margin, label, weight)
    name = "gbflow_gradients_" + "".join(c if c.isalnum() else "_" for c in objective.name)
    if weighted:
        flat = backend.fused(lambda margin, label, weight: objective.row_gradients(
            xp, margin, label, weight), name + "_weighted")
    else:
        unweighted = backend.fused(lambda margin, label: objective.row_gradients(
            xp, margin, label, None), name)

        def flat(margin, label, weight):
            return unweighted(margin, label)

    def gradients(margin, label, weight):
        g, h = flat(margin[:, 0], label, weight)
        return g[:, None], h[:, None]
    return gradients


def _kernel_gradients(xp, objective, kernel):
    """``gradient_function`` through the backend kernel the objective names: on the margin's
    column for one output group ((n, 1) views come back), else on the (n, n_groups) margins."""
    def gradients(margin, label, weight):
        weight = objective.kernel_weight(xp, label, weight)
        if objective.n_groups > 1:
            return kernel(margin, label, weight)
        g, h = kernel(margin[:, 0], label, weight)
        return g[:, None], h[:, None]
    return gradients


def round_gradients(xp, objective, shard, gradients_of) -> tuple:
    """(n, n_groups) float32 gradients and hessians of a shard, a block of rows at a time for
    row-wise losses (the same values: every operation is per row). gradients_of:
    ``gradient_function``'s."""
    n = shard.n_rows
    if objective.by_query:
        return objective.query_gradients(xp, shard.margin, shard.label, shard.queries)
    if n <= GRADIENT_ROWS or not objective.row_wise:
        return gradients_of(shard.margin, shard.label, shard.weight)
    g = xp.empty((n, objective.n_groups), dtype=np.float32)
    h = xp.empty_like(g)
    for a in range(0, n, GRADIENT_ROWS):
        b = min(n, a + GRADIENT_ROWS)
        g[a:b], h[a:b] = gradients_of(shard.margin[a:b], shard.label[a:b],
                                      None if shard.weight is None else shard.weight[a:b])
    return g, h


def largest_gradients(backend, collective, grad_hess, n_groups: int) -> np.ndarray:
    """(n_groups, 2) float64 global max |g| and |h| of every class, in one reduction, read from
    the device in one copy. Whole-column reductions: CuPy's max(axis=0) over a tall
    (n, n_groups) array was one slow segmented reduction (9 ms at 10M rows on an H200)."""
    xp = backend.xp
    local = backend.to_host_all([xp.stack([xp.stack([xp.abs(g[:, k]).max(), xp.abs(h[:, k]).max()])
                                           for k in range(n_groups)])
                                 for g, h in grad_hess if len(g)])
    return collective.allreduce_max(np.max(local, axis=0) if local else
                                    np.zeros((n_groups, 2), dtype=np.float64))
