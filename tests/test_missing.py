"""XGBoost's ``missing`` parameter: a feature value read as missing, like NaN, in training,
evaluation and prediction data (dense, CSR, categorical frames, Dask), and in the model file."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow
from gbflow.params import make_params

SENTINEL = -999.0


def _with_sentinel(df: pd.DataFrame) -> pd.DataFrame:
    """The table with every NaN of its feature columns written as the sentinel."""
    out = df.copy()
    features = [c for c in df.columns if c != "y"]
    out[features] = df[features].fillna(SENTINEL)
    return out


def _trees(booster):
    return [t.to_dict() for t in booster.trees]


def test_a_sentinel_value_trains_and_predicts_as_nan(device):
    df = make_table(n_rows=2000, seed=41, missing=0.2)
    assert df.drop(columns="y").isna().to_numpy().any()
    params = {"max_depth": 4, "device": device}
    plain = gbflow.train(df, "y", params, 8, verbose=False)
    marked = gbflow.train(_with_sentinel(df), "y", {**params, "missing": SENTINEL}, 8,
                          verbose=False)
    assert _trees(marked) == _trees(plain)
    assert np.array_equal(marked.predict(_with_sentinel(df)), plain.predict(df))
    # without the parameter the sentinel is an ordinary (very small) value
    ordinary = gbflow.train(_with_sentinel(df), "y", params, 8, verbose=False)
    assert _trees(ordinary) != _trees(plain)


def test_evaluation_sets_csr_and_arrays_read_the_sentinel_too():
    import scipy.sparse
    df = make_table(n_rows=1500, seed=42, missing=0.2)
    X = df.drop(columns="y").to_numpy(np.float32)
    y = df["y"].to_numpy()
    Xs = np.where(np.isnan(X), SENTINEL, X).astype(np.float32)
    params = {"max_depth": 3, "eval_metric": "rmse"}
    plain = gbflow.train(X, y, params, 5, evals=[((X, y), "v")], verbose=False)
    marked = gbflow.train(Xs, y, {**params, "missing": SENTINEL}, 5, evals=[((Xs, y), "v")],
                          verbose=False)
    assert marked.evals_result == plain.evals_result
    assert Xs.min() == SENTINEL  # the caller's array is not changed
    # CSR: stored entries equal to the sentinel are missing, like the absent ones
    zero_missing = np.where(np.isnan(X), 0.0, X)
    csr = scipy.sparse.csr_matrix(np.where(np.isnan(X), SENTINEL, zero_missing))
    nan_csr = scipy.sparse.csr_matrix(zero_missing)
    assert np.array_equal(marked.predict(csr), marked.predict(nan_csr))


def test_category_positions_are_not_read_as_missing():
    rng = np.random.default_rng(43)
    n = 1200
    df = pd.DataFrame({"x": rng.normal(size=n).astype(np.float32),
                       "c": pd.Categorical(rng.choice(["a", "b", "c"], n))})
    y = (df.c == "a").astype(float) + df.x
    plain = gbflow.train(df, y, {"max_depth": 3}, 5, verbose=False)
    # category "a" is position 0: missing=0 must not make it missing
    zero = gbflow.train(df, y, {"max_depth": 3, "missing": 0.0}, 5, verbose=False)
    assert not (df.x == 0).any()
    assert _trees(zero) == _trees(plain)


def test_the_model_file_keeps_missing(tmp_path):
    df = make_table(n_rows=600, seed=44)
    default = gbflow.train(df, "y", {}, 2, verbose=False)
    assert "missing" not in json.loads(default.to_json())["params"]
    marked = gbflow.train(_with_sentinel(df), "y", {"missing": SENTINEL}, 2, verbose=False)
    marked.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert loaded.params.missing == SENTINEL
    assert np.array_equal(loaded.predict(_with_sentinel(df)), marked.predict(_with_sentinel(df)))


def test_dask_workers_read_the_sentinel():
    import dask.dataframe as dd
    df = _with_sentinel(make_table(n_rows=1000, seed=45, missing=0.2))
    params = {"max_depth": 3, "missing": SENTINEL}
    local = gbflow.train(df, "y", params, 4, verbose=False)
    on_dask = gbflow.train(dd.from_pandas(df, npartitions=3), "y", params, 4, verbose=False)
    assert _trees(on_dask) == _trees(local)
    lazy = local.predict(dd.from_pandas(df, npartitions=3)).compute()
    assert np.array_equal(lazy.to_numpy(), local.predict(df).to_numpy())


@pytest.mark.parametrize("value, error, match", [
    ("x", TypeError, "parameter missing must be a number"),
    (float("inf"), ValueError, "parameter missing must be finite"),
    (1e40, ValueError, r"parameter missing=1e\+40 is beyond float32's range"),
    (3.4028236e38, ValueError, r"beyond float32's range"),
])
def test_bad_missing_values_are_refused(value, error, match):
    with pytest.raises(error, match=match):
        gbflow.train(make_table(n_rows=100), "y", {"missing": value}, 1, verbose=False)


def test_float32s_largest_value_may_be_missing():
    assert make_params({"missing": 3.4028235e38}).missing == 3.4028235e38


@pytest.mark.parametrize("sparse_threshold", [None, 0.0])
def test_missing_values_never_seen_in_training_go_right_as_xgboosts(device, sparse_threshold):
    """A split whose node saw no missing value of its feature sends missing values right
    (default_left False), XGBoost's direction; where the node saw some, the better side. On
    integer features (a bin a value: XGBoost's candidates) a model trained without NaN
    predicts NaN rows as XGBoost's does, dense store or sparse."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(8)
    X = rng.integers(0, 12, size=(3000, 4)).astype(np.float32)
    y = X[:, 0] - 0.5 * X[:, 1] + rng.normal(size=3000)
    params = {"max_depth": 4, "device": device, "sparse_threshold": sparse_threshold}
    ours = gbflow.train(X, y, params, num_boost_round=5, verbose=False)
    assert not any(np.asarray(t.default_left)[~np.asarray(t.is_leaf)].any()
                   for t in ours.trees)
    theirs = xgb.train({"max_depth": 4, "tree_method": "hist"}, xgb.DMatrix(X, y), 5)
    probe = X[:200].copy()
    probe[rng.random(probe.shape) < 0.3] = np.nan
    np.testing.assert_allclose(np.asarray(ours.predict(probe)),
                               theirs.predict(xgb.DMatrix(probe)), rtol=0, atol=1e-5)
    X[rng.random(X.shape) < 0.2] = np.nan  # seen in training: both directions chosen
    seen = gbflow.train(X, y, params, num_boost_round=5, verbose=False)
    flags = np.concatenate([np.asarray(t.default_left)[~np.asarray(t.is_leaf)]
                            for t in seen.trees])
    assert flags.any() and not flags.all()
