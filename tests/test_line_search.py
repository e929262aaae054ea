"""reg:absoluteerror and reg:quantileerror: exact weighted quantiles, leaf values set by the
line search, the same model whatever the partitioning, on every device and on Dask."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow import boosting, inputs, leaf_quantiles
from gbflow.backend import get_backend, numpy_kernels, reference_kernels
from gbflow.params import make_params


def _lower_quantile(values, weights, alpha):
    """The definition, by sorting: the smallest value whose rows at or below it weigh at least
    alpha (the decimal written: 0.9 is 9/10) times the total (at least one row's weight)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order]).astype(np.int64)
    target = max(1, math.ceil(Fraction(repr(float(alpha))) * int(cumulative[-1])))
    return values[order][np.searchsorted(cumulative, target)]


@pytest.mark.parametrize("alpha", [0.5, 0.1, 0.9, 1.0, 1e-9, 0.3333333333333333])
@pytest.mark.parametrize("weighted", [False, True])
def test_weighted_quantiles_are_exact_and_do_not_depend_on_the_shards(alpha, weighted):
    rng = np.random.default_rng(int(alpha * 1000) + weighted)
    n, n_groups = 3000, 7
    values = np.concatenate([rng.standard_t(2, n - 20) * 10.0 ** rng.integers(-3, 3, n - 20),
                             np.zeros(10), -np.zeros(5), np.full(5, 2.5)])
    groups = rng.integers(0, n_groups - 1, n)  # the last group holds no row
    weights = rng.integers(0, 5, n) if weighted else np.ones(n, dtype=np.int64)
    backend = get_backend("cpu")
    whole = leaf_quantiles.weighted_quantiles(backend, [groups], [values], [weights], n_groups,
                                              alpha)
    cut = [0, 1, 1000, 1001, 2500, n]  # shards of one row, and an empty one
    shards = [slice(a, b) for a, b in zip(cut[:-1], cut[1:])] + [slice(0, 0)]
    split = leaf_quantiles.weighted_quantiles(
        backend, [groups[s] for s in shards], [values[s] for s in shards],
        [weights[s] for s in shards], n_groups, alpha)
    assert np.array_equal(whole, split, equal_nan=True)
    with reference_kernels():  # the NumPy twin's tallies
        assert np.array_equal(whole, leaf_quantiles.weighted_quantiles(
            get_backend("cpu"), [groups], [values], [weights], n_groups, alpha), equal_nan=True)
    assert np.isnan(whole[-1])
    for g in range(n_groups - 1):
        mine = groups == g
        assert whole[g] == _lower_quantile(values[mine], weights[mine], alpha)
    if not weighted:  # None means weights of one
        assert np.array_equal(whole, leaf_quantiles.weighted_quantiles(
            backend, [groups], [values], None, n_groups, alpha), equal_nan=True)


@pytest.mark.parametrize("n", [10, 20, 100, 7])
def test_unweighted_quantiles_are_numpys_inverted_cdf(n):
    """Against NumPy's inverted-CDF quantile (XGBoost's for weighted rows): 0.9 of ten values is
    the 9th (alpha read as the binary double above 9/10 once gave the 10th)."""
    values = np.random.default_rng(n).permutation(np.arange(1.0, n + 1))
    alphas = [0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 0.75, 0.8, 0.9, 0.95]
    found = [leaf_quantiles.weighted_quantiles(get_backend("cpu"), [np.zeros(n, np.int64)],
                                               [values], None, 1, alpha)[0] for alpha in alphas]
    assert found == [np.quantile(values, alpha, method="inverted_cdf") for alpha in alphas]


def test_float32_alphas_are_the_decimals_they_print_as():
    """np.float32(0.3) is 0.30000001192... as a float64: XGBoost reads its parameters as text
    (0.3), and so does quantile_alpha now (10 weighted values: the 3rd, not the 4th)."""
    assert make_params({"objective": "reg:quantileerror",
                        "quantile_alpha": np.float32(0.3)}).loss.leaf_alphas == (0.3,)
    assert make_params({"objective": "reg:quantileerror", "quantile_alpha": np.array(
        [0.1, 0.9], dtype=np.float32)}).loss.leaf_alphas == (0.1, 0.9)


@pytest.mark.parametrize("n,n_groups,weighted", [(0, 3, False), (1, 1, True), (5000, 7, True),
                                                 (100_003, 300, False), (20_000, 1, True)])
def test_quantile_tally_against_its_twin(kernels, n, n_groups, weighted):
    rng = np.random.default_rng(n + n_groups)
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-2, 2, n)
    values[: n // 3] = 1.5  # many rows of one slot: the warps' shared atomics
    keys = leaf_quantiles.ordered_keys(np, values)
    groups = rng.integers(0, n_groups, n).astype(np.int64)
    weights = rng.integers(0, 2**40, n).astype(np.int64) if weighted else None
    for shift in (56, 48, 0):
        prefix = (keys[rng.integers(0, max(n, 1), n_groups) % max(n, 1)] >> np.uint64(shift + 8)
                  if n and shift < 56 else np.zeros(n_groups, dtype=np.uint64))
        prefix = np.asarray(prefix, dtype=np.uint64)
        expected = numpy_kernels.quantile_tally(keys, groups, weights, prefix, shift,
                                                np.zeros(n_groups * 256, dtype=np.int64))
        table = np.full(n_groups * 256, 3, dtype=np.int64)  # added into
        got = kernels.quantile_tally(keys, groups, weights, prefix, shift, table)
        assert got is table and np.array_equal(table - 3, expected)
        if shift == 56:
            assert expected.sum() == (n if weights is None else weights.sum())


@pytest.mark.parametrize("n_groups", [1, 5, 300])
def test_quantile_select_against_its_twin(kernels, n_groups):
    """Ranks inside, at and beyond the slots' running weights; a group of no weight (byte
    255); the prefix shifted in."""
    rng = np.random.default_rng(n_groups)
    table = rng.integers(0, 2**40, (n_groups, 256)) * (rng.random((n_groups, 256)) < 0.3)
    table[0] = 0
    running = np.cumsum(table, axis=1)
    remaining = np.maximum(1, (running[:, -1] * rng.random(n_groups)).astype(np.int64))
    if n_groups > 2:
        remaining[1] = running[1, rng.integers(0, 256)]  # exactly a running weight
        remaining[2] = running[2, -1] + 5  # beyond every slot
    prefix = rng.integers(0, 2**40, n_groups).astype(np.uint64)
    expected = [remaining.copy(), prefix.copy()]
    numpy_kernels.quantile_select(table, *expected)
    got = [remaining.copy(), prefix.copy()]
    kernels.quantile_select(table, *got)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    byte = (expected[1] & np.uint64(255)).astype(np.int64)
    assert (expected[1] >> np.uint64(8) == prefix).all()
    reachable = remaining <= running[:, -1]
    first = np.argmax(running >= remaining[:, None], axis=1)  # the first slot reaching it
    assert np.array_equal(byte, np.where(reachable, first, 255))
    assert byte[0] == 255 and (n_groups < 3 or byte[2] == 255)
    below = np.where(first > 0, running[np.arange(n_groups), np.maximum(first - 1, 0)], 0)
    assert np.array_equal(expected[0][reachable], (remaining - below)[reachable])


def test_ordered_keys_keep_the_order_of_the_values():
    values = np.array([-np.inf, -1e300, -1.5, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e300, np.inf])
    keys = leaf_quantiles.ordered_keys(np, values)
    assert (np.diff(keys.astype(object)) > 0).all()
    assert np.array_equal(leaf_quantiles.key_values(keys).view(np.uint64), values.view(np.uint64))


@pytest.mark.parametrize("objective,alpha", [("reg:absoluteerror", 0.5),
                                             ("reg:quantileerror", 0.8)])
def test_leaves_are_the_learning_rate_times_their_rows_residual_quantile(device, objective,
                                                                         alpha):
    df = make_table(n_rows=2000, seed=11)
    X, y = df.drop(columns="y"), df["y"].to_numpy()
    params = {"objective": objective, "quantile_alpha": alpha, "max_depth": 3,
              "learning_rate": 0.3, "device": device}
    booster = gbflow.train(X, y, params=params, num_boost_round=1, verbose=False)
    base = float(np.asarray(booster.predict(X.iloc[:1], output_margin=True))[0]
                 - booster.trees[0].value[np.asarray(booster.predict(
                     X.iloc[:1], pred_leaf=True)).reshape(-1)[0]])
    # the labels' quantile, as XGBoost 3.2 takes it without weights: position alpha (n + 1) of
    # the sorted labels, interpolated. The leaves below take the lower quantile, where XGBoost
    # 3.2 interpolates too (XGBoost 3.4 sets no leaf by a quantile, dmlc/xgboost#12391): two
    # order statistics a leaf doubled the CPU's line search (0.36-0.42 -> 0.85-0.94 s, 500K rows,
    # 30 trees), for a leaf value between two of its rows' residuals; not taken.
    ordered = np.sort(y)
    position = min(max(alpha * (len(y) + 1), 1.0), float(len(y)))
    low = int(np.floor(position))
    above = ordered[min(low, len(y) - 1)]
    assert base == ordered[low - 1] + (position - low) * (above - ordered[low - 1])
    leaf = np.asarray(booster.predict(X, pred_leaf=True)).reshape(-1)
    tree = booster.trees[0]
    for node in np.unique(leaf):
        rows = leaf == node
        expected = 0.3 * _lower_quantile(y[rows] - base, np.ones(rows.sum()), alpha)
        assert tree.value[node] == expected


@pytest.mark.parametrize("extra", [{}, {"subsample": 0.7}, {"weights": True},
                                   {"objective": "reg:absoluteerror"}])
def test_same_model_on_one_or_many_shards_and_training_margins_are_predictions(extra, device):
    df = make_table(seed=4)
    rng = np.random.default_rng(1)
    if extra.pop("weights", False):
        df["w"] = rng.uniform(0.1, 3.0, len(df))
    weight = "w" if "w" in df else None
    params = make_params({"objective": "reg:quantileerror", "quantile_alpha": 0.7,
                          "max_depth": 4, "learning_rate": 0.3, **extra})
    backend = get_backend(device)
    one = boosting.fit(backend, [inputs.load(df, "y", weight=weight)], params, 8, verbose=False,
                       keep_training_margins=True)
    bounds = [0, 1, 700, 701, 2000, len(df)]
    parts = [inputs.load(df.iloc[a:b], "y", weight=weight) for a, b in zip(bounds[:-1],
                                                                           bounds[1:])]
    many = boosting.fit(backend, parts, params, 8, verbose=False, keep_training_margins=True)
    assert many.to_json() == one.to_json()
    assert np.array_equal(np.concatenate(many.training_margins), one.training_margins[0])
    X = df.drop(columns=[c for c in ("y", "w") if c in df])
    predicted = np.asarray(one.predict(X, output_margin=True)).reshape(-1)
    assert np.array_equal(predicted, one.training_margins[0][:, 0])


def test_continued_training_equals_one_run():
    df = make_table(seed=8)
    X, y = df.drop(columns="y"), df["y"]
    params = {"objective": "reg:quantileerror", "quantile_alpha": 0.25, "max_depth": 4}
    whole = gbflow.train(X, y, params=params, num_boost_round=10, verbose=False)
    first = gbflow.train(X, y, params=params, num_boost_round=4, verbose=False)
    rest = gbflow.train(X, y, params=params, num_boost_round=6, xgb_model=first, verbose=False)
    assert rest.to_json() == whole.to_json()


@pytest.mark.parametrize("alpha,error", [([0.1, 0.9, 0.0], r"entry 2 of 3\) must lie in"),
                                         (0.0, "quantile_alpha must lie in"),
                                         ("0.5", "must be a number")])
def test_bad_quantile_alpha_is_refused_before_training(alpha, error):
    with pytest.raises((ValueError, TypeError), match=error):
        make_params({"objective": "reg:quantileerror", "quantile_alpha": alpha})


def test_one_quantile_in_a_list_is_taken():
    assert make_params({"objective": "reg:quantileerror",
                        "quantile_alpha": [0.25]}).quantile_alpha == 0.25


def test_the_regressor_takes_quantile_alpha_and_trains_the_same_model():
    pytest.importorskip("sklearn")
    df = make_table(seed=9)
    X, y = df.drop(columns="y"), df["y"].to_numpy()
    model = gbflow.GBFlowRegressor(objective="reg:quantileerror", quantile_alpha=0.9,
                                   n_estimators=30, learning_rate=0.2).fit(X, y)
    direct = gbflow.train(X, y, params={"objective": "reg:quantileerror", "quantile_alpha": 0.9,
                                        "learning_rate": 0.2}, num_boost_round=30,
                          verbose=False)
    assert np.array_equal(model.predict(X), np.asarray(direct.predict(X)))
    assert 0.85 < np.mean(y <= model.predict(X)) < 0.95
