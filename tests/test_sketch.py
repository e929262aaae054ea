"""The quantile sketch: exact weighted quantiles, independent of row order and partitioning."""
from __future__ import annotations

import numpy as np
import pytest

from gbflow import quantize, sketch


def _reference_cuts(column, weight, max_bin):
    """Cuts by the definition: sort, then the value holding each target rank starts a bin."""
    present = ~np.isnan(column)
    v, w = column[present], (np.ones(present.sum(), np.int64) if weight is None else weight[present])
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    distinct = np.unique(v)
    if len(distinct) == 0:
        return distinct
    if len(distinct) <= max_bin - 1:
        return distinct[1:]
    cumulative = np.cumsum(w)
    total = int(cumulative[-1])
    ranks = [total * i // (max_bin - 1) + 1 for i in range(1, max_bin - 1)]
    values = np.unique(v[np.searchsorted(cumulative, ranks)])
    return values[values > v[0]]


@pytest.mark.parametrize("max_bin", [2, 3, 16, 256])
def test_cuts_are_exact_quantiles(max_bin):
    rng = np.random.default_rng(max_bin)
    X = np.stack([rng.normal(size=5000), rng.exponential(size=5000) * 1e4,
                  rng.integers(0, 5, 5000), 1000 + rng.random(5000) * 1e-3,
                  np.where(rng.random(5000) < 0.3, np.nan, rng.normal(size=5000))], axis=1)
    X = X.astype(np.float32)
    cuts = quantize.compute_cuts(np, [X], None, max_bin)
    for f in range(X.shape[1]):
        assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(X[:, f], None, max_bin)), f
    assert cuts.n_value_bins.max() <= max_bin - 1


def test_weighted_cuts_match_integer_replication():
    """Integer weights act like repeated rows."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 2)).astype(np.float32)
    w = rng.integers(0, 4, size=3000).astype(np.float64)
    weighted = quantize.compute_cuts(np, [X], [w], 64)
    repeated = quantize.compute_cuts(np, [np.repeat(X, w.astype(int), axis=0)], None, 64)
    assert np.array_equal(weighted.values, repeated.values)
    assert np.array_equal(weighted.offsets, repeated.offsets)


def test_cuts_do_not_depend_on_row_order_or_partitioning():
    rng = np.random.default_rng(2)
    X = rng.standard_t(3, size=(20000, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    w = rng.random(20000)
    base = quantize.compute_cuts(np, [X], [w], 256)
    perm = rng.permutation(len(X))
    shuffled = quantize.compute_cuts(np, [X[perm]], [w[perm]], 256)
    split = np.array_split(np.arange(len(X)), 7)
    parts = quantize.compute_cuts(np, [X[i] for i in split], [w[i] for i in split], 256)
    for other in (shuffled, parts):
        assert np.array_equal(base.values, other.values)
        assert np.array_equal(base.offsets, other.offsets)


def test_keys_round_trip_and_order():
    values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 7e30, np.inf], np.float32)
    keys = sketch.ordered_keys(np, values[None, :])[0]
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)
    assert keys[3] == keys[4]  # -0.0 and +0.0 are the same value
    back = sketch.keys_to_values(keys)
    assert np.array_equal(back[[0, 1, 2, 4, 5, 6, 7, 8]], values[[0, 1, 2, 4, 5, 6, 7, 8]])


def test_all_missing_and_constant_columns():
    X = np.stack([np.full(100, np.nan), np.full(100, 3.0)], axis=1).astype(np.float32)
    cuts = quantize.compute_cuts(np, [X], None, 256)
    assert cuts.feature_cuts(0).size == 0 and cuts.feature_cuts(1).size == 0
    assert list(cuts.n_value_bins) == [1, 1]
