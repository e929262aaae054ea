"""Bad input gets a clear error naming the column, parameter or file, before any work is done.

Every refusal of ``train`` is checked with the training loop and the quantile sketch replaced by
functions that fail with AssertionError("work started"): the expected error must come first.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gbflow
import gbflow.booster
import gbflow.boosting
import gbflow.predictor
import gbflow.sketch
from gbflow.params import ALIASES, KNOWN, make_params
from gbflow.ported_names import FIXED

N = 20
SMALL = {"max_depth": 2}


def _frame(n: int = N) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "a": rng.normal(size=n),
        "b": rng.normal(size=n),
        "y": (np.arange(n) % 2).astype(np.float64),
        "w": np.ones(n),
    })


@pytest.fixture
def df() -> pd.DataFrame:
    return _frame()


def _work_started(*args, **kwargs):
    raise AssertionError("work started")


@pytest.fixture
def no_work(monkeypatch):
    """Any training work (the boosting loop, the quantile sketch) fails the test."""
    monkeypatch.setattr(gbflow.boosting, "fit", _work_started)
    monkeypatch.setattr(gbflow.sketch, "compute_cuts", _work_started)


@pytest.fixture
def no_predict_work(monkeypatch):
    monkeypatch.setattr(gbflow.predictor, "predict_margin", _work_started)


def refused(exc, match, data, label=None, **kwargs):
    """``train`` raises ``exc`` matching ``match`` (call with the no_work fixture active)."""
    kwargs.setdefault("params", SMALL)
    kwargs.setdefault("num_boost_round", 2)
    kwargs.setdefault("verbose", False)
    with pytest.raises(exc, match=match) as info:
        gbflow.train(data, label, **kwargs)
    return str(info.value)


@pytest.fixture(scope="module")
def booster():
    """Trained on features a, b with label column y and weight column w."""
    return gbflow.train(_frame(), "y", SMALL, num_boost_round=2, weight="w", verbose=False)


@pytest.fixture(scope="module")
def array_booster():
    d = _frame()
    return gbflow.train(d[["a", "b"]].to_numpy(), d["y"].to_numpy(), SMALL, num_boost_round=2,
                        verbose=False)


def test_no_work_fixture_is_effective(df, no_work):
    with pytest.raises(AssertionError, match="work started"):
        gbflow.train(df, "y", SMALL, num_boost_round=2, verbose=False)


# -- 1. NaN / inf in the label -------------------------------------------------------------------
@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "infinite"),
                                       (-np.inf, "infinite")])
def test_label_column_not_finite(df, no_work, bad, word):
    df.loc[3, "y"] = bad
    message = refused(ValueError, rf"label column 'y' of training data has 1 {word}", df, "y")
    assert "row position 3" in message


@pytest.mark.parametrize("bad, word", [(np.nan, "NaN"), (np.inf, "infinite")])
def test_label_array_not_finite(df, no_work, bad, word):
    y = df["y"].to_numpy().copy()
    y[[2, 5]] = bad
    message = refused(ValueError, rf"label of training data has 2 {word}", df[["a", "b"]], y)
    assert "row positions 2, 5" in message


def test_label_nan_and_inf_counted_apart(df, no_work):
    df.loc[[1, 2], "y"] = np.nan
    df.loc[4, "y"] = np.inf
    refused(ValueError, r"2 NaN and 1 infinite value", df, "y")


def test_weight_not_finite(df, no_work):
    df.loc[0, "w"] = np.nan
    refused(ValueError, r"weight column 'w' of training data has 1 NaN", df, "y", weight="w")


def test_label_nullable_missing_value(df, no_work):
    df["y"] = pd.array([0, 1] * 9 + [None, 1], dtype="Int64")
    refused(ValueError, r"label column 'y' .* 1 NaN value.*row position 18", df, "y")


# -- 2. label / weight column not there ----------------------------------------------------------
def test_label_column_missing_lists_columns(df, no_work):
    message = refused(KeyError, r"label column 'target' is not in training data", df, "target")
    assert "'a', 'b', 'y', 'w'" in message


def test_weight_column_missing_lists_columns(df, no_work):
    message = refused(KeyError, r"weight column 'weights' is not in training data", df, "y",
                      weight="weights")
    assert "'a', 'b', 'y', 'w'" in message


def test_long_column_list_is_shortened(no_work):
    wide = pd.DataFrame(np.zeros((3, 30)), columns=[f"c{i}" for i in range(30)])
    message = refused(KeyError, r"label column 'y' is not in", wide, "y")
    assert "'c0'" in message and "(30 in all)" in message and "'c29'" not in message


def test_label_name_on_array(df, no_work):
    refused(ValueError, r"label='y' names a column, but training data is an array",
            df.to_numpy(), "y")


def test_label_missing(df, no_work):
    refused(ValueError, r"train needs a label", df)


def test_label_as_non_string_column_name(no_work):
    d = pd.DataFrame({0: np.arange(5.0), 1: np.arange(5.0) % 2})
    refused(TypeError, r"label must be a column name .*pass label='1'", d, 1)


def test_label_and_weight_same_column(df, no_work):
    refused(ValueError, r"label and weight name the same column 'y'", df, "y", weight="y")


@pytest.mark.parametrize("values, dtype", [(["yes", "no"] * 10, None),
                                           (["u", "v"] * 10, "category")])
def test_non_numeric_label_column(df, no_work, values, dtype):
    df["y"] = pd.Series(values, dtype=dtype)
    shown = dtype or "(object|str)"  # (pandas 3 gives strings their own dtype)
    refused(TypeError, rf"label column 'y' of training data is not numeric \({shown}\)", df, "y")


def test_non_numeric_label_array(df, no_work):
    refused(TypeError, r"label of training data must be numeric", df[["a", "b"]],
            np.array(["x", "y"] * 10))


def test_non_numeric_weight_column(df, no_work):
    df["w"] = "heavy"
    refused(TypeError, r"weight column 'w' of training data is not numeric", df, "y",
            weight="w")


def test_label_wrong_shape(df, no_work):
    refused(ValueError, r"label of training data must be one-dimensional, got shape \(20, 2\)",
            df[["a", "b"]], np.zeros((N, 2)))


# -- 3. non-numeric feature columns --------------------------------------------------------------
def test_non_numeric_features_all_named(df, no_work):
    df["s"] = ["x", "y"] * 10
    df["c"] = pd.Categorical(["u", "v"] * 10)
    df["t"] = pd.date_range("2024-01-01", periods=N)
    df["d"] = pd.to_timedelta(np.arange(N), unit="s")
    message = refused(TypeError, r"non-numeric feature column\(s\) 's' \(\w+\), 't' \(datetime",
                      df, "y")
    assert "'t' (datetime64" in message and "'d' (timedelta64" in message
    assert "astype('category')" in message  # what to do with the strings
    assert "'a'" not in message and "'b'" not in message and "'c'" not in message  # a category


def test_object_column_of_strings(df, no_work):
    df["s"] = pd.Series(["x"] * N, dtype=object)
    refused(TypeError, r"'s' \(object\)", df, "y")


def test_non_numeric_array(no_work):
    X = np.array([["a", "b"]] * 5)
    refused(TypeError, r"training data is an array of dtype <U1", X, np.zeros(5))


def test_bool_features_are_numeric(df):
    df["flag"] = np.arange(N) % 3 == 0
    df["nullable_flag"] = pd.array([True, False, None, True] * 5, dtype="boolean")
    b = gbflow.train(df, "y", SMALL, num_boost_round=2, verbose=False)
    assert b.feature_names == ["a", "b", "w", "flag", "nullable_flag"]
    assert b.predict(df).shape == (N,)


# -- 4. empty data -------------------------------------------------------------------------------
def test_no_rows_frame(df, no_work):
    refused(ValueError, r"training data has no rows", df.iloc[:0], "y")


def test_no_rows_array(no_work):
    refused(ValueError, r"training data has no rows", np.zeros((0, 3)), np.zeros(0))


def test_only_label_column(df, no_work):
    refused(ValueError, r"training data has no feature columns.*'y'", df[["y"]], "y")


def test_only_label_and_weight_columns(df, no_work):
    refused(ValueError, r"training data has no feature columns.*'y', 'w'", df[["y", "w"]], "y",
            weight="w")


def test_array_without_columns(no_work):
    refused(ValueError, r"training data has no feature columns", np.zeros((5, 0)), np.zeros(5))


@pytest.mark.parametrize("data, match", [
    (None, r"training data must be a pandas DataFrame or a 2-D array, got NoneType"),
    ({"a": [1.0, 2.0]}, r"got dict"),
    ([[1.0, 2.0], [3.0]], r"got list"),
])
def test_not_a_table(no_work, data, match):
    refused(TypeError, match, data, np.zeros(2))


def test_series_as_data(df, no_work):
    refused(ValueError, r"must be 2-D .*Series of shape \(20,\); use .to_frame\(\)", df["a"],
            df["y"].to_numpy())


def test_repeated_column_names(no_work):
    d = pd.DataFrame(np.zeros((3, 3)), columns=["a", "a", "y"])
    refused(ValueError, r"columns appear more than once: \['a'\]", d, "y")


@pytest.mark.parametrize("role, value", [("y", 1e39), ("y", -1e300), ("w", 1e39), ("w", 1e19)])
def test_labels_and_weights_beyond_the_fixed_point_range_are_named(df, no_work, role, value):
    """Finite float64 values the float32 gradients or fixed-point sums cannot hold: once a
    ValueError deep in the gradients' scaling, or (one huge weight) a model that learned
    nothing."""
    df.loc[4, role] = value
    noun = {"y": "label", "w": "weight"}[role]
    message = refused(ValueError, rf"{noun} column '{role}' of training data has 1 value\(s\) "
                                  rf"beyond \+-2\*\*62", df, "y", weight="w")
    assert "row position 4" in message and f"{value:g}" in message


def test_base_score_beyond_the_range_is_named(df, no_work):
    refused(ValueError, r"parameter base_score=1e\+300 is beyond", df, "y",
            params={**SMALL, "base_score": 1e300})


@pytest.mark.parametrize("objective", ["reg:squarederror", "count:poisson", "reg:gamma"])
def test_labels_and_weights_at_the_limit_train(df, device, objective):
    """The largest label and weight taken train to finite predictions and metrics."""
    df["y"] = df["y"].abs() + 0.5
    df.loc[3, "y"] = 4.5e18
    df.loc[5, "w"] = 4.5e18
    b = gbflow.train(df, "y", {**SMALL, "objective": objective, "device": device},
                     num_boost_round=3, weight="w", evals=[(df, "train")], verbose=False)
    assert np.isfinite(b.predict(df)).all()
    assert all(np.isfinite(v).all() for v in b.evals_result["train"].values())


@pytest.mark.parametrize("role, objective", [("y", "reg:squarederror"),
                                             ("w", "reg:squarederror"),
                                             ("w", "reg:absoluteerror")])
def test_labels_and_weights_near_zero_train(df, device, role, objective):
    """Values below about 1e-290 made the fixed-point scale's ratio infinite (OverflowError
    from math.floor), and the line search's integer weights too; both scales are capped at
    2**1000 instead. XGBoost trains on such labels."""
    df[role] = 1e-300 if role == "w" else np.where(np.arange(len(df)) % 3, 0.0, 1e-300)
    b = gbflow.train(df, "y", {**SMALL, "device": device, "objective": objective},
                     num_boost_round=3, weight="w", verbose=False)
    assert np.isfinite(b.predict(df)).all()


@pytest.mark.gpu
def test_bad_device_arrays_are_named(df, no_work):
    """CuPy labels, weights and features get the errors NumPy ones get (the positions are
    copied to the host for the message)."""
    cp = pytest.importorskip("cupy")
    X = cp.asarray(df[["a", "b"]].to_numpy(np.float32))
    y = cp.asarray(df["y"].to_numpy())
    X[2, 1] = cp.inf
    refused(ValueError, r"infinite values .* feature column\(s\) 'f1'", X, y)
    X[2, 1] = 0
    y[3] = cp.nan
    refused(ValueError, r"label of training data has 1 NaN value\(s\), at row position 3", X, y)
    y[3] = 1e39
    refused(ValueError, r"beyond \+-2\*\*62 .*1e\+39 at row position 3", X, y)
    y[3] = 0
    refused(ValueError, r"weight of training data has 1 negative", X, y,
            weight=cp.asarray(np.r_[-1.0, np.ones(len(df) - 1)]))


# -- 5. infinite feature values ------------------------------------------------------------------
def test_infinite_features_named(df, no_work):
    df.loc[2, "a"] = np.inf
    df.loc[7, "w"] = -np.inf
    message = refused(ValueError, r"infinite values .* in feature column\(s\) 'a', 'w'", df, "y")
    assert "'b'" not in message


def test_infinite_feature_array_named(no_work):
    X = np.zeros((5, 3))
    X[1, 2] = -np.inf
    refused(ValueError, r"feature column\(s\) 'f2'", X, np.zeros(5))


@pytest.mark.parametrize("row", [0, 4, 5, 40_000, 65_535])
def test_infinite_features_found_in_any_block(no_work, row):
    """The search for infinities reads chunks of rows on several threads: an infinity in the
    first, a middle or the last row is found and its column named."""
    X = np.zeros((65_536, 3), dtype=np.float32)
    X[row, 1] = np.inf
    refused(ValueError, r"feature column\(s\) 'f1'", X, np.zeros(len(X)))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_values_beyond_float32_are_infinite(df, no_work):
    df["huge"] = 1e300
    refused(ValueError, r"float32's range .* 'huge'", df, "y")


def test_nan_features_are_missing_values(df):
    df.loc[[0, 5, 9], "a"] = np.nan
    df["b"] = pd.array([1.5, None] * 10, dtype="Float64")
    b = gbflow.train(df, "y", SMALL, num_boost_round=2, verbose=False)
    assert np.isfinite(b.predict(df)).all()


# -- 6. parameters -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, suggestion", [
    ("max_dept", "max_depth"), ("learning_rte", "learning_rate"), ("subsampel", "subsample"),
    ("colsample_by_tree", "colsample_bytree"), ("min_child_wieght", "min_child_weight"),
    ("etaa", "eta"),
])
def test_unknown_parameter_suggests(df, no_work, name, suggestion):
    refused(ValueError, rf"unknown parameter '{name}'; did you mean '{suggestion}'\?", df, "y",
            params={name: 1})


def test_unknown_parameter_without_close_name_lists_known(df, no_work):
    message = refused(ValueError, r"unknown parameter 'zzz'; known parameters: ", df, "y",
                      params={"zzz": 1})
    assert "max_depth" in message and "learning_rate" in message


@pytest.mark.parametrize("name, match", [
    ("n_estimators", r"num_boost_round argument"),
    ("num_boost_round", r"num_boost_round argument"),
    ("early_stopping_rounds", r"argument of train\(\)"),
    ("verbose", r"verbose argument"),
    ("num_leaves", r"max_leaves here, with grow_policy='lossguide'"),
    ("verbose_eval", r"argument of train\(\) \(XGBoost's name for its verbose argument\)"),
    ("gpu_id", r"device='cuda' here"),
    ("predictor", r"XGBoost 2.0 removed it"),
])
def test_parameters_that_belong_elsewhere(df, no_work, name, match):
    refused(ValueError, rf"unknown parameter '{name}': .*{match}", df, "y", params={name: 1})


def test_xgboost_spellings_are_taken(df, caplog):
    """What a ported XGBoost script passes: device='gpu' (XGBoost's alias of 'cuda'),
    num_parallel_tree=1 and validate_parameters (how gbflow always trains), and train()'s
    verbose_eval in place of verbose; verbose and verbose_eval together are refused."""
    from gbflow.params import make_params
    assert make_params({"device": "gpu"}).device == "cuda"
    plain = gbflow.train(df, "y", {"max_depth": 2}, 2, verbose=False)
    ported = gbflow.train(df, "y", {"max_depth": 2, "num_parallel_tree": 1,
                                    "validate_parameters": False}, 2, verbose=False)
    assert ported.to_json() == plain.to_json()
    with caplog.at_level("INFO", logger="gbflow"):
        gbflow.train(df, "y", {"max_depth": 2}, 3, verbose_eval=1, evals=[(df, "t")])
    assert sum("t-rmse" in r.getMessage() for r in caplog.records) == 3
    caplog.clear()
    with caplog.at_level("INFO", logger="gbflow"):
        gbflow.train(df, "y", {"max_depth": 2}, 3, verbose_eval=False, evals=[(df, "t")])
    assert not any("t-rmse" in r.getMessage() for r in caplog.records)
    with pytest.raises(TypeError, match="verbose or verbose_eval"):
        gbflow.train(df, "y", {}, 1, verbose=False, verbose_eval=True)


@pytest.mark.parametrize("params, match", [
    ({"max_depth": 0}, r"parameter max_depth=0 \(no depth limit\) needs max_leaves > 0"),
    ({"max_depth": 31}, r"parameter max_depth must lie in \[0, 30\]"),
    ({"subsample": 1.5}, r"parameter subsample must lie in \(0, 1\], got 1.5"),
    ({"subsample": 0.0}, r"parameter subsample must lie in \(0, 1\]"),
    ({"colsample_bytree": -0.1}, r"parameter colsample_bytree must lie in"),
    ({"learning_rate": -1}, r"parameter learning_rate must be > 0, got -1"),
    ({"eta": 0}, r"parameter learning_rate must be > 0"),
    ({"reg_lambda": -1.0}, r"parameter reg_lambda must be >= 0"),
    ({"max_bin": 1}, r"parameter max_bin must lie in \[3, 65536\]"),
    ({"learning_rate": float("nan")}, r"parameter learning_rate must be finite"),
    ({"gamma": float("inf")}, r"parameter gamma must be finite"),
    ({"reg_alpha": 10**400}, r"parameter reg_alpha must be finite"),
    ({"max_depth": 2.5}, r"parameter max_depth must be a whole number, got 2.5"),
    ({"objective": "multi:softprob"}, r"multi:softprob needs the parameter num_class"),
    ({"objective": "multi:softprob", "num_class": 1}, r"num_class must be at least 2"),
    ({"num_class": 3}, r"num_class=3 only goes with multi:softprob"),
    ({"objective": "binary:logistc"}, r"objective 'binary:logistc' is not supported; "
                                      r"did you mean 'binary:logistic'\?"),
    ({"objective": "reg:squareerror"}, r"did you mean 'reg:squarederror'\?"),
    ({"objective": "survival:aft"}, r"objective .survival:aft. is not supported.*supported: "),
    ({"objective": "binary:logistic", "base_score": 1.5},
     r"base_score must lie in \[0, 1\] for binary:logistic"),
    ({"eval_metric": "mlogloss"},
     r"eval_metric 'mlogloss' does not fit objective reg:squarederror .*rmse"),
    ({"objective": "multi:softprob", "num_class": 3, "eval_metric": "ndcg"},
     r"eval_metric 'ndcg' does not fit objective multi:softprob .*auc, aucpr"),
    ({"eval_metric": "aft-nloglik"}, r"eval_metric 'aft-nloglik' is not supported"),
    ({"eval_metric": "ndcg@top"}, r"eval_metric 'ndcg@top': the argument after '@' must be a "
                                    r"positive whole number"),
    ({"eval_metric": "error@x"}, r"eval_metric 'error@x': the argument after '@' must be"),
    ({"eval_metric": "tweedie-nloglik"}, r"eval_metric 'tweedie-nloglik' needs an argument"),
    ({"eval_metric": "tweedie-nloglik@2.5"}, r"rho must lie in \[1, 2\)"),
    ({"eval_metric": "rmse@3"}, r"rmse takes no '@' argument"),
    ({"eval_metric": ["rmse", "mae", "rmse"]}, r"eval_metric lists 'rmse' twice"),
    ({"huber_slope": 0}, r"parameter huber_slope must be > 0"),
    ({"quantile_alpha": 1.5}, r"parameter quantile_alpha must lie in \(0, 1\]"),
    ({"eval_metric": []}, r"eval_metric is an empty list"),
    ({"device": "GPU"}, r"parameter device must be one of 'auto', 'cpu', 'cuda' \(or XGBoost's "
                        r"'gpu'\), got 'GPU'"),
    ({"device": "cuda:1"}, r"device='cuda:1': gbflow trains on the current CUDA device and "
                           r"takes no ordinal"),
    ({"num_parallel_tree": 4}, r"num_parallel_tree=4 is not supported: .*random forests"),
    ({"num_parallel_tree": True}, r"num_parallel_tree=True is not supported"),
    ({"sampling_method": "goss"}, r"parameter sampling_method must be 'uniform' or "
                                  r"'gradient_based', got 'goss'"),
    ({"eta": 0.1, "learning_rate": 0.2}, r"learning_rate given twice \(as 'eta' and as "
                                         r"'learning_rate'\)"),
    ({"learning_rate": 0.2, "eta": 0.1}, r"learning_rate given twice"),
])
def test_bad_parameter_values(df, no_work, params, match):
    refused(ValueError, match, df, "y", params=params)


@pytest.mark.parametrize("params, match", [
    ({"max_depth": "3"}, r"parameter max_depth must be an integer, got str '3'"),
    ({"max_depth": None}, r"parameter max_depth must be an integer, got NoneType"),
    ({"learning_rate": "0.1"}, r"parameter learning_rate must be a number, got str"),
    ({"subsample": True}, r"parameter subsample must be a number, got bool"),
    ({"objective": "multi:softprob", "num_class": "3"}, r"parameter num_class must be an integer"),
    ({"base_score": [0.5]}, r"parameter base_score must be a number"),
    ({"objective": 3}, r"parameter objective must be a string"),
    ({"eval_metric": 5}, r"parameter eval_metric must be a metric name or a list of them"),
])
def test_wrong_parameter_types(df, no_work, params, match):
    refused(TypeError, match, df, "y", params=params)


def test_params_not_a_dict(df, no_work):
    refused(TypeError, r"params must be a dict .*got str", df, "y", params="max_depth=2")
    refused(TypeError, r"params given as a list must hold \(name, value\) pairs, got 'max_depth'",
            df, "y", params=["max_depth", 2])


def test_numpy_scalars_and_params_objects_are_accepted():
    p = make_params({"max_depth": np.int64(3), "learning_rate": np.float32(0.25),
                     "subsample": np.float64(0.5), "eval_metric": ("rmse",)})
    assert (p.max_depth, p.learning_rate, p.subsample) == (3, 0.25, 0.5)
    assert isinstance(p.max_depth, int) and isinstance(p.learning_rate, float)
    assert make_params(p) == p
    assert make_params({"max_depth": 4.0, "learning_rate": 1}).max_depth == 4


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=20))
def test_any_unknown_parameter_is_named(name):
    # (XGBoost's names with one accepted value, tree_method and the like, get their own error)
    assume(name not in KNOWN and name not in ALIASES and name not in FIXED)
    with pytest.raises(ValueError, match="unknown parameter") as info:
        make_params({name: 1})
    assert repr(name) in str(info.value)


def test_parameter_errors_come_before_data_errors(df, no_work):
    # params are checked first: a bad parameter is reported even when the data is bad too
    refused(ValueError, r"max_dept", df.iloc[:0], "missing", params={"max_dept": 2})


# -- 7. negative weights -------------------------------------------------------------------------
def test_negative_weight_column(df, no_work):
    df.loc[[3, 7], "w"] = [-1.0, -0.5]
    refused(ValueError, r"weight column 'w' of training data has 2 negative value\(s\), at row "
                        r"positions 3, 7", df, "y", weight="w")


def test_negative_weight_array(df, no_work):
    w = np.ones(N)
    w[4:12] = -1
    message = refused(ValueError, r"weight of training data has 8 negative value\(s\), at row "
                                  r"positions 4, 5, 6, 7, 8, \.\.\.", df, "y", weight=w)
    assert "weights must be >= 0" in message


def test_all_zero_weights(df, no_work):
    refused(ValueError, r"all training weights are zero", df, "y", weight=np.zeros(N))


# -- labels that do not fit the objective; shapes ------------------------------------------------
def test_binary_label_out_of_range(df, no_work):
    df.loc[4, "y"] = 2
    refused(ValueError, r"binary:logistic needs labels in \[0, 1\].* 1 outside", df, "y",
            params={"objective": "binary:logistic"})


@pytest.mark.parametrize("bad", [0.5, 3.0, -1.0])
def test_multiclass_label_not_a_class(df, no_work, bad):
    df.loc[4, "y"] = bad
    refused(ValueError, r"multi:softprob with num_class=3 needs integer labels 0\.\.2", df, "y",
            params={"objective": "multi:softprob", "num_class": 3})


def test_label_length_mismatch(df, no_work):
    refused(ValueError, r"label has 5 values but training data has 20 rows", df[["a", "b"]],
            np.zeros(5))


def test_weight_length_mismatch(df, no_work):
    refused(ValueError, r"weight has 19 values but training data has 20 rows", df, "y",
            weight=np.ones(N - 1))


@pytest.mark.parametrize("kwargs, match", [
    ({"num_boost_round": -1}, r"num_boost_round must be a non-negative integer, got -1"),
    ({"num_boost_round": 2.5}, r"num_boost_round must be a non-negative integer"),
    ({"early_stopping_rounds": -1, "evals": []}, r"early_stopping_rounds must be a positive"),
    ({"early_stopping_rounds": 3}, r"early_stopping_rounds needs at least one evaluation set"),
    ({"early_stopping_rounds": 3, "evals": []}, r"early_stopping_rounds needs at least one"),
])
def test_round_arguments(df, no_work, kwargs, match):
    refused(ValueError, match, df, "y", **kwargs)


# -- evaluation sets -----------------------------------------------------------------------------
@pytest.mark.parametrize("evals", [
    [pd.DataFrame({"a": [1.0]})],     # a bare frame, no name
    [("valid", pd.DataFrame())],      # name and data swapped
    [(pd.DataFrame(), "valid", 3)],   # three entries
    [(pd.DataFrame(), 7)],            # a name that is not a string
])
def test_evals_entry_wrong_shape(df, no_work, evals):
    refused(TypeError, r"evals\[0\] must be a \(data, name\) pair", df, "y", evals=evals)


def test_evals_data_tuple_wrong_length(df, no_work):
    refused(TypeError, r"evals\[0\] \('v'\): give \(X, y\), \(X, y, weight\), "
                       r"\(X, y, weight, qid\) or \(X, y, weight, qid, base_margin\)", df, "y",
            evals=[((df.to_numpy(),), "v")])


def test_eval_frame_missing_label_column(df, no_work):
    message = refused(KeyError, r"label column 'y' is not in evals\[0\] \('valid'\)", df, "y",
                      evals=[(df.drop(columns="y"), "valid")])
    assert "'a', 'b', 'w'" in message


def test_eval_frame_missing_weight_column(df, no_work):
    refused(KeyError, r"weight column 'w' is not in evals\[1\] \('b'\)", df, "y", weight="w",
            evals=[(df, "a"), (df.drop(columns="w"), "b")])


def test_eval_frame_missing_feature(df, no_work):
    refused(ValueError, r"evals\[0\] \('valid'\) lacks training feature column\(s\) 'b'", df, "y",
            evals=[(df.drop(columns="b"), "valid")])


def test_eval_frame_extra_column(df, no_work):
    refused(ValueError, r"evals\[0\] \('valid'\) has column\(s\) 'z' that were not features", df,
            "y", evals=[(df.assign(z=1.0), "valid")])


def test_eval_frame_with_array_label(df, no_work):
    refused(TypeError, r"training label was an array, so give this evaluation set as "
                       r"\(\(X, y\), 'valid'\)", df[["a", "b"]], df["y"].to_numpy(),
            evals=[(df, "valid")])


def test_eval_arrays_wrong_width(df, no_work):
    X = df[["a", "b"]].to_numpy()
    refused(ValueError, r"evals\[0\] \('valid'\) has 1 columns but the model was trained on 2",
            X, df["y"].to_numpy(), evals=[((X[:, :1], df["y"].to_numpy()), "valid")])


def test_eval_label_not_finite_and_out_of_range(df, no_work):
    bad = df.assign(y=np.nan)
    refused(ValueError, r"label column 'y' of evals\[0\] \('valid'\) has 20 NaN", df, "y",
            evals=[(bad, "valid")])
    refused(ValueError, r"binary:logistic needs labels in \[0, 1\]; evaluation set 'valid'", df,
            "y", params={"objective": "binary:logistic"}, evals=[(df.assign(y=2.0), "valid")])


def test_eval_negative_weight(df, no_work):
    w = np.ones(N)
    w[0] = -1
    X, y = df[["a", "b"]].to_numpy(), df["y"].to_numpy()
    refused(ValueError, r"weight of evals\[0\] \('valid'\) has 1 negative", X, y,
            evals=[((X, y, w), "valid")])


# -- 8. prediction data that does not match training ---------------------------------------------
def test_predict_missing_feature_named(booster, df, no_predict_work):
    with pytest.raises(ValueError, match=r"prediction data lacks training feature column\(s\) "
                                         r"'b'; columns must match training$"):
        booster.predict(df.drop(columns="b"))


def test_predict_extra_columns_named(booster, df, no_predict_work):
    with pytest.raises(ValueError, match=r"has column\(s\) 'z', 'q' that were not features in "
                                         r"training.*transform\(\) keeps extra columns"):
        booster.predict(df.assign(z=1.0, q=2.0))


def test_predict_missing_and_extra_named(booster, df, no_predict_work):
    with pytest.raises(ValueError, match=r"lacks training feature column\(s\) 'a' and has "
                                         r"column\(s\) 'z'"):
        booster.predict(df.drop(columns="a").assign(z=1.0))


def test_predict_allows_label_and_weight_columns(booster, df):
    with_targets = booster.predict(df)
    without = booster.predict(df[["a", "b"]])
    reordered = booster.predict(df[["b", "y", "a"]])
    pd.testing.assert_series_equal(with_targets, without)
    pd.testing.assert_series_equal(with_targets, reordered)


def test_transform_keeps_passenger_columns(booster, df):
    out = booster.transform(df.assign(id=np.arange(N), note="x"))
    assert list(out.columns) == ["a", "b", "y", "w", "id", "note", "prediction"]
    np.testing.assert_array_equal(out["prediction"], booster.predict(df))


def test_transform_keeps_passengers_of_one_name_but_not_a_repeated_feature(booster, df):
    """Passengers are never read, so two may share a name (or 0 and "0"); a feature twice is
    still ambiguous."""
    ids = pd.DataFrame({"i": np.arange(N), "j": -np.arange(N)}).set_axis(["id", "id"], axis=1)
    with_ids = pd.concat([df, ids], axis=1)
    with_ids[0], with_ids["0"] = 1, 2
    out = booster.transform(with_ids)
    assert list(out.columns) == ["a", "b", "y", "w", "id", "id", 0, "0", "prediction"]
    np.testing.assert_array_equal(out.iloc[:, 4:8].to_numpy(), with_ids.iloc[:, 4:].to_numpy())
    np.testing.assert_array_equal(out["prediction"], booster.predict(df))
    with pytest.raises(ValueError, match=r"columns appear more than once: \['a'\]"):
        booster.transform(pd.concat([with_ids, df[["a"]]], axis=1))


def test_transform_still_needs_features(booster, df, no_predict_work):
    with pytest.raises(ValueError, match=r"lacks training feature column\(s\) 'a'"):
        booster.transform(df.drop(columns="a").assign(id=1))


def test_predict_bad_feature_values(booster, df, no_predict_work):
    with pytest.raises(ValueError, match=r"prediction data has infinite values .*'b'"):
        booster.predict(df.assign(b=np.inf))
    with pytest.raises(TypeError, match=r"non-numeric feature column.*'?a"):
        booster.predict(df.assign(a="x"))


@pytest.mark.parametrize("width", [1, 3])
def test_predict_array_wrong_width(array_booster, no_predict_work, width):
    with pytest.raises(ValueError, match=rf"prediction data has {width} columns but the model "
                                         rf"was trained on 2 features"):
        array_booster.predict(np.zeros((4, width)))


def test_predict_array_not_2d(array_booster, no_predict_work):
    with pytest.raises(ValueError, match=r"prediction data must be 2-D"):
        array_booster.predict(np.zeros(4))


def test_predict_frame_model_on_right_width_array(booster, df):
    X = df[["a", "b"]].to_numpy()
    np.testing.assert_allclose(booster.predict(X), booster.predict(df).to_numpy())


# -- 9. model files ------------------------------------------------------------------------------
def test_save_to_missing_folder(booster, tmp_path):
    target = tmp_path / "nope" / "model.json"
    with pytest.raises(FileNotFoundError, match=r"folder '.*nope' does not exist"):
        booster.save_model(target)
    assert not (tmp_path / "nope").exists()
    assert os.listdir(tmp_path) == []


def test_save_to_a_folder(booster, tmp_path):
    with pytest.raises(IsADirectoryError, match=r"save_model: '.*' is a folder"):
        booster.save_model(tmp_path)
    assert os.listdir(tmp_path) == []


def test_save_fails_before_writing(booster, tmp_path, monkeypatch):
    def boom(self):
        raise RuntimeError("json failed")
    monkeypatch.setattr(gbflow.booster.Booster, "to_dict", boom)
    with pytest.raises(RuntimeError, match="json failed"):
        booster.save_model(tmp_path / "model.json")
    assert os.listdir(tmp_path) == []


def test_save_fails_at_rename_leaves_nothing(booster, tmp_path, monkeypatch):
    def boom(src, dst):
        assert os.path.exists(src)  # the whole text was written to a temporary file...
        raise OSError("rename failed")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="rename failed") as info:
        booster.save_model(tmp_path / "model.json")
    assert os.listdir(tmp_path) == []  # ...and it was removed
    assert any("model.json" in note and "not written" in note
               for note in getattr(info.value, "__notes__", []))


def test_save_fails_midway_keeps_existing_model(booster, tmp_path, monkeypatch):
    target = tmp_path / "model.json"
    booster.save_model(target)
    good = target.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", disk_full)
    other = gbflow.train(_frame(), "y", {"max_depth": 1}, num_boost_round=1, verbose=False)
    with pytest.raises(OSError, match="No space left"):
        other.save_model(target)
    assert os.listdir(tmp_path) == ["model.json"]
    assert target.read_bytes() == good
    monkeypatch.undo()
    loaded = gbflow.load_model(target)
    np.testing.assert_array_equal(loaded.predict(_frame()), booster.predict(_frame()))


def test_save_round_trip_and_permissions(booster, tmp_path):
    target = tmp_path / "model.json"
    booster.save_model(str(target))
    booster.save_model(target)  # overwriting a model is fine
    assert os.listdir(tmp_path) == ["model.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert gbflow.load_model(target).to_json() == booster.to_json()


@pytest.mark.parametrize("content, match", [
    (b"hello, not json", r"load_model: '.*bad\.model' is not valid JSON"),
    (b"", r"load_model: '.*bad\.model' is not valid JSON"),
    (b"\xff\xfe\x00binary", r"load_model: '.*bad\.model' is not a gbflow model file \(not UTF-8"),
    (b'{"hello": 1}', r"load_model: '.*bad\.model' is JSON but not a gbflow model file"),
    (b"[1, 2, 3]", r"load_model: '.*bad\.model' is JSON but not a gbflow model file"),
    (b'{"format": "gbflow-model", "version": 99}', r"'.*bad\.model' is a gbflow model file of "
                                                   r"version 99, which this gbflow cannot read"),
])
def test_load_not_a_model(tmp_path, content, match):
    path = tmp_path / "bad.model"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        gbflow.load_model(path)


def test_load_truncated_model(booster, tmp_path):
    path = tmp_path / "half.json"
    text = booster.to_json()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"'.*half\.json' is not valid JSON"):
        gbflow.load_model(path)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.pop("trees"), r"not a valid gbflow model \(trees is missing\)"),
    (lambda d: d.pop("cuts"), r"cuts is missing"),
    (lambda d: d["trees"][0].pop("feature"), r"trees\[0\]\.feature is missing"),
    (lambda d: d["params"].update(max_depth=0), r"parameter max_depth=0 .* needs max_leaves"),
    (lambda d: d["trees"][0].update(right=[r + 1 if r > 0 else r for r in d["trees"][0]["right"]]),
     r"trees\[0\]\.right\[\d+\] is \d+, outside \[-1, \d+\]"),
])
def test_load_incomplete_model(booster, tmp_path, edit, match):
    d = booster.to_dict()
    edit(d)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=rf"load_model: '.*broken\.json' .*{match}"):
        gbflow.load_model(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.json"):
        gbflow.load_model(tmp_path / "nothere.json")


def test_a_label_series_that_is_still_a_feature_column_warns(df):
    with pytest.warns(UserWarning, match="the label is also the feature column 'y'"):
        gbflow.train(df, label=df["y"], num_boost_round=1, verbose=False)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gbflow.train(df, label="y", num_boost_round=1, verbose=False)  # the usual way: silent
        gbflow.train(df.drop(columns="y"), label=df["y"], num_boost_round=1, verbose=False)
