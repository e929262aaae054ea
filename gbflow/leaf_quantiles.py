"""Exact weighted quantiles per group of rows over every shard and process: the leaf values of
reg:absoluteerror and reg:quantileerror (a line search after each tree) and their base scores.

A group's ``alpha`` quantile is the smallest of its values v whose rows with values <= v weigh at
least alpha times the group's weight (at least one row's), alpha read as the decimal it is
written as (0.9 is 9/10). It is found digit by digit on the
values' ordered 64-bit keys: eight rounds, each one table of (group, next byte) weights summed
over the shards and through the collective. Weights are integers, so every sum is exact and
the quantile does not depend on how the rows are split into shards, partitions or workers.
Training's float weights are made integers by ``integer_weights`` (a power-of-two scale, then
rounding): the quantile is exact for those, and a row lighter than about 2**-52 of the
heaviest row times the row count weighs 0 there.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from . import fixed_point
from .backend.arrays import to_host
from .collective import LOCAL
from .grow.margins import add_margins

_SIGN = np.uint64(1 << 63)
# Integer weights are scaled so that a sum over every row stays below this: exact in float64.
_WEIGHT_SUM_LIMIT = 2.0 ** 52


def ordered_keys(xp, values):
    """(n,) uint64 keys in the order of the (n,) float64 ``values`` (no NaN): the sign bit
    flipped for positive values, every bit for negative ones."""
    bits = xp.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    return xp.where(bits >= _SIGN, ~bits, bits | _SIGN)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float64 values of host uint64 ``keys`` (``ordered_keys``' inverse)."""
    keys = np.asarray(keys, dtype=np.uint64)
    return np.where(keys >= _SIGN, keys & ~_SIGN, ~keys).view(np.float64)


def integer_weights(xp, weights, max_weight: float, n_total: int):
    """(n,) int64 weights from (n,) non-negative ``weights`` (None: ones), scaled by a power of
    two so that ``n_total`` rows of ``max_weight`` sum below 2**52: the same row gets the same
    weight wherever it is."""
    if weights is None:
        return None
    if not n_total * max_weight > 0:
        raise ValueError("integer_weights: the rows weigh nothing (max_weight * n_total is not "
                         "positive)")
    # (fixed_point_scale: the same power of two, capped where the ratio overflows a float)
    scale = fixed_point.fixed_point_scale(max_weight, n_total, _WEIGHT_SUM_LIMIT)
    return xp.rint(xp.asarray(weights, dtype=np.float64) * scale).astype(np.int64)


def weighted_quantiles(backend, groups: list, values: list, weights: list | None,
                       n_groups: int, alpha: float, collective=LOCAL,
                       rank: int | None = None) -> np.ndarray:
    """(n_groups,) float64 host: each group's ``alpha`` quantile (module docstring), NaN for a
    group of no weight.

    groups: per shard (n_i,) int64 group ids in [0, n_groups); values: per shard (n_i,) float64
    finite, on ``backend``'s device; weights: per shard (n_i,) int64 >= 0
    (``integer_weights``), or None for ones. rank: None, or the weight rank to select in every
    group instead of alpha's (the rank-th smallest value without weights; alpha is then not
    read). Every process calls it with the same n_groups, alpha and rank. No side effects.
    """
    xp, kernels = backend.xp, backend.kernels
    keys = [ordered_keys(xp, v) for v in values]
    weights = [None] * len(groups) if weights is None else weights
    # alpha as the decimal it is written as: Fraction(0.9) is the double just above 9/10, whose
    # rank ceil(alpha * total) was one row too far whenever 0.9 * total is a whole number
    # (XGBoost's and NumPy's inverted-CDF quantile take the 9th of 10 values)
    fraction = Fraction(repr(float(alpha)))
    prefix = xp.zeros(n_groups, dtype=np.uint64)
    # After the first round (which counts every row: its table's rows are the groups' weights)
    # the rounds stay on the device, no wait for it until the result: each picks per group the
    # first byte whose rows, with the smaller bytes', reach the rank still to go
    # (``quantile_select``, one launch).
    for shift in range(56, -8, -8):
        # a new table a round: the collective's sum may be another process's table itself
        table = xp.zeros(n_groups * 256, dtype=np.int64)
        for k, g, w in zip(keys, groups, weights):
            kernels.quantile_tally(k, g, w, prefix, shift, table)
        summed = backend.asarray(collective.allreduce_sum(table)).reshape(n_groups, 256)
        if shift == 56:
            total = to_host(summed.sum(axis=1))
            # rank (in weight) of the quantile: ceil(alpha * total), at least 1, exactly
            remaining = xp.asarray(np.array(
                [max(1, rank if rank is not None else
                     -((-int(t) * fraction.numerator) // fraction.denominator))
                 for t in total], dtype=np.int64))
        kernels.quantile_select(summed, remaining, prefix)
    return np.where(total > 0, key_values(to_host(prefix)), np.nan)


def interpolated_quantile(backend, values: list, alpha: float, collective=LOCAL) -> float:
    """XGBoost 3.2's unweighted quantile of every process's ``values`` (per shard (n_i,)
    float64 on ``backend``'s device): the value at position alpha * (n + 1) of the n sorted
    values, counted from 1, clipped to 1..n and interpolated linearly between its neighbours
    (type 6 of Hyndman and Fan); NaN for no values. Two exact order statistics
    (``weighted_quantiles`` at a rank), so it does not depend on how rows are split."""
    n = int(collective.allreduce_sum(np.array([sum(len(v) for v in values)],
                                              dtype=np.int64))[0])
    if n == 0:  # (on every process: n is global)
        return math.nan
    groups = [backend.xp.zeros(len(v), dtype=np.int64) for v in values]
    position = min(max(alpha * (n + 1), 1.0), float(n))
    low, high = math.floor(position), math.ceil(position)
    below = float(weighted_quantiles(backend, groups, values, None, 1, alpha, collective,
                                     rank=low)[0])
    if high == low:
        return below
    above = float(weighted_quantiles(backend, groups, values, None, 1, alpha, collective,
                                     rank=high)[0])
    return below + (position - low) * (above - below)


def line_search(backend, collective, tree, leaf_rows: list, shards: list, group: int,
                weights: list | None, alpha: float, learning_rate: float) -> tuple:
    """A grown tree's leaves set to ``learning_rate`` times the ``alpha`` quantile of their
    rows' residuals (label - margin[:, group], the margins before this tree), over every shard
    and process; a leaf of no weight gets 0. tree: a host ``Tree``; leaf_rows: per shard its
    margin update from ``grow.grow_tree`` (``LeafRows``, ``PlannedMargins`` or
    ``WalkedMargins``: each has ``with_values`` and ``add_to``); weights: per shard (n_i,)
    int64 (``integer_weights``; 0 for rows sampled out), or None. Returns (the new tree, per
    shard the margin update adding its values). Reads the shards' labels and margins (and
    their bins, where the updates walk the tree); changes nothing."""
    xp, kernels = backend.xp, backend.kernels
    leaves = np.flatnonzero(tree.is_leaf)
    leaf_number = np.zeros(tree.n_nodes, dtype=np.float64)  # 0.. over the leaves, by node id
    leaf_number[leaves] = np.arange(len(leaves))
    leaf_numbers = [xp.zeros(shard.n_rows, dtype=np.float64) for shard in shards]
    add_margins(kernels, [rows.with_values(leaf_number) for rows in leaf_rows], leaf_numbers)
    leaf_of_row = [leaf.astype(np.int64) for leaf in leaf_numbers]  # each row's leaf
    residuals = [shard.label - shard.margin[:, group] for shard in shards]
    quantiles = weighted_quantiles(backend, leaf_of_row, residuals, weights, len(leaves), alpha,
                                   collective)
    value = tree.value.copy()
    value[leaves] = learning_rate * np.nan_to_num(quantiles, nan=0.0)
    return dataclasses.replace(tree, value=value), [rows.with_values(value) for rows in leaf_rows]
