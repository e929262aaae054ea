"""max_delta_step and monotone constraints: XGBoost's meanings, on every device, store and shard."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_table, same_model_everywhere

import gbflow


def _table(n_rows=6000, seed=0):
    """A target rising in a and falling in b, both with bumps against the trend, and missing
    values in a."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, 4)).astype(np.float32)
    X[rng.random(n_rows) < 0.05, 0] = np.nan
    a = np.nan_to_num(X[:, 0])
    y = np.sin(3 * a) + 0.5 * a - X[:, 1] ** 2 + 0.3 * X[:, 2] + rng.normal(scale=0.3,
                                                                             size=n_rows)
    df = pd.DataFrame(X, columns=list("abcd"))
    df["y"] = y
    return df


def _along(booster, df, column, n_rows=60):
    """(n_rows, 101) predictions of rows of df with ``column`` swept over [-3, 3]."""
    grid = np.linspace(-3, 3, 101, dtype=np.float32)
    probe = df.drop(columns="y").iloc[:n_rows].loc[lambda d: d.index.repeat(len(grid))].copy()
    probe[column] = np.tile(grid, n_rows)
    return np.asarray(booster.predict(probe)).reshape(n_rows, len(grid))


def _train(df, device="cpu", rounds=30, **params):
    return gbflow.train(df, label="y", params={"max_depth": 5, "device": device, **params},
                        num_boost_round=rounds, verbose=False)


@pytest.mark.parametrize("constraints", [(1, -1), "(1,-1,0,0)", {"a": 1, "b": -1}])
def test_monotone_predictions_in_every_constrained_feature(device, constraints):
    df = _table()
    free = _train(df, device)
    assert (np.diff(_along(free, df, "a"), axis=1) < 0).any()  # the bumps are learned
    booster = _train(df, device, monotone_constraints=constraints)
    assert (np.diff(_along(booster, df, "a"), axis=1) >= 0).all()
    assert (np.diff(_along(booster, df, "b"), axis=1) <= 0).all()
    assert booster.params.monotone_constraints in ((1, -1), (1, -1, 0, 0), {"a": 1, "b": -1})


def test_bounds_travel_in_the_model_file(tmp_path):
    booster = _train(_table(), rounds=3, monotone_constraints={"a": 1}, max_delta_step=0.4)
    booster.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert loaded.params.monotone_constraints == {"a": 1}
    assert loaded.params.max_delta_step == 0.4 and loaded.to_json() == booster.to_json()


@pytest.mark.parametrize("extra", [{"monotone_constraints": (1, -1)}, {"max_delta_step": 0.1},
                                   {"monotone_constraints": (1, -1, 0, 1),
                                    "max_delta_step": 0.3, "reg_alpha": 0.5}])
def test_bounded_weights_train_as_xgboost_does(extra):
    """Training error within 1% of XGBoost's on the same data and parameters."""
    xgb = pytest.importorskip("xgboost")
    df = _table(20_000, seed=1)
    X, y = df.drop(columns="y").to_numpy(), df["y"].to_numpy()
    ours = np.asarray(_train(df, rounds=40, max_depth=6, **extra).predict(df.drop(columns="y")))
    theirs = xgb.train({"max_depth": 6, "tree_method": "hist", **extra}, xgb.DMatrix(X, y),
                       40).predict(xgb.DMatrix(X))
    rmse = [np.sqrt(np.mean((p - y) ** 2)) for p in (ours, theirs)]
    assert rmse[0] <= rmse[1] * 1.01, rmse


def test_max_delta_step_caps_every_leaf():
    booster = _train(_table(), max_delta_step=0.05, learning_rate=0.5, rounds=5)
    values = np.concatenate([t.value for t in booster.trees])
    assert np.abs(values).max() <= 0.05 * 0.5 + 1e-12
    assert np.isclose(np.abs(values).max(), 0.025)  # the cap binds


def test_max_delta_step_with_poisson_as_xgboost():
    """count:poisson: without max_delta_step its trees are capped at 0.7 and its hessian carries
    exp(0.7) (XGBoost gives both its Poisson default); a given value sets both, 0 uncaps the
    trees. Deviance within 1% of XGBoost's either way."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20_000, 3)).astype(np.float32)
    y = rng.poisson(np.exp(0.8 * X[:, 0] - 0.5 * X[:, 1] ** 2 + 0.5))
    df = pd.DataFrame(X, columns=list("abc")).assign(y=y)
    params = {"objective": "count:poisson", "max_depth": 4, "learning_rate": 1.0}
    assert np.isclose(np.abs(_train(df, rounds=1, **params).trees[0].value).max(), 0.7)
    assert np.isclose(np.abs(_train(df, rounds=1, **params, max_delta_step=0.3)
                             .trees[0].value).max(), 0.3)
    assert np.abs(_train(df, rounds=1, **params, max_delta_step=0).trees[0].value).max() > 0.7

    def deviance(mu):
        return 2 * np.mean(np.where(y > 0, y * np.log(np.maximum(y, 1) / mu), 0) - (y - mu))
    for extra in ({}, {"max_delta_step": 0.3}, {"max_delta_step": 0.0}):
        both = {**params, "learning_rate": 0.3, **extra}
        ours = np.asarray(_train(df, rounds=30, **both).predict(df.drop(columns="y")))
        theirs = xgb.train({**both, "tree_method": "hist"}, xgb.DMatrix(X, y), 30).predict(
            xgb.DMatrix(X))
        assert deviance(ours) <= deviance(theirs) * 1.01, extra


@pytest.mark.parametrize("extra", [
    {"objective": "count:poisson", "reg_alpha": 1.0},  # Poisson's own max_delta_step, 0.7
    {"reg_alpha": 2.0, "max_delta_step": 0.3},
    {"reg_alpha": 2.0, "monotone_constraints": (1, -1, 0, 0, 0)}])
def test_bounded_gains_with_reg_alpha_are_xgboosts(extra):
    """With bounded weights XGBoost's gain of a weight w is -(2 G w + (H + lambda) w^2): no L1
    term (the L1 threshold is in w alone). On integer features (a bin a value: the same
    candidate splits as XGBoost's) the predictions agree to float32 rounding."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    X = rng.integers(0, 20, size=(2000, 5)).astype(np.float32)
    y = rng.poisson(np.exp(X[:, 0] / 10 - X[:, 1] / 20)).astype(np.float64)
    params = {"max_depth": 4, "learning_rate": 0.3, **extra}
    ours = gbflow.train(X, y, params, num_boost_round=20, verbose=False).predict(X)
    theirs = xgb.train({**params, "tree_method": "hist"}, xgb.DMatrix(X, y), 20).predict(
        xgb.DMatrix(X))
    assert np.abs(np.asarray(ours) - theirs).max() < 1e-4


@pytest.mark.parametrize("sign", [1, -1])
def test_a_constrained_one_hot_column_still_splits_present_from_missing(sign):
    """A column that is 1.0 or missing (a CSR indicator) has only the present-versus-missing
    split, which orders no present values: either sign allows it, whichever side is higher."""
    from conftest import present_or_missing
    X, y = present_or_missing(n_rows=5000)
    df = pd.DataFrame(X, columns=["a", "b"]).assign(y=y)
    for target in (y, 1.0 - y):  # present rows higher, then lower
        booster = _train(df.assign(y=target), rounds=5, max_depth=2,
                         monotone_constraints=(sign, 0))
        assert booster.feature_importances("split").get("a", 0) > 0


@pytest.mark.parametrize("extra", [{"monotone_constraints": (1, -1, 0, 0, 1, 0)},
                                   {"max_delta_step": 0.2, "monotone_constraints": {"x0": -1}}])
def test_same_model_on_shards_stores_and_reference_kernels(device, extra):
    """Bounds change no promise (``conftest.same_model_everywhere``)."""
    same_model_everywhere(device, make_table(task="regression", seed=4),
                          {"max_depth": 5, **extra})


def test_category_splits_take_the_bounds_of_their_node(device):
    """A categorical feature next to a constrained numeric one: the model stays monotone in the
    numeric feature, on every device."""
    df = _table(seed=3)
    df["c"] = pd.Categorical(np.random.default_rng(3).choice(list("pqrstuvw"), len(df)))
    df["y"] += df["c"].cat.codes.to_numpy() * 0.2
    booster = _train(df, device, monotone_constraints={"a": 1}, max_delta_step=0.5)
    assert (np.diff(_along(booster, df, "a"), axis=1) >= 0).all()


def test_without_bounds_the_model_file_has_no_new_keys():
    d = _train(_table(), rounds=2).params.to_dict()
    assert "max_delta_step" not in d and "monotone_constraints" not in d


@pytest.mark.parametrize("params,error,match", [
    ({"monotone_constraints": (1, 0, 0, 0, 1)}, ValueError, "5 entries for 4 features"),
    ({"monotone_constraints": {"z": 1}}, ValueError, r"feature\(s\) \['z'\]"),
    ({"monotone_constraints": (2, 0)}, ValueError, "position 0 must be -1"),
    ({"monotone_constraints": "1,0"}, ValueError, "'\\(1,0,-1\\)'"),
    ({"monotone_constraints": 1}, TypeError, "monotone_constraints must be a list"),
    ({"monotone_constraints": (1,), "objective": "reg:absoluteerror"}, ValueError,
     "line search"),
    ({"max_delta_step": -1}, ValueError, "max_delta_step must be >= 0"),
])
def test_bad_bounds_are_refused_by_name(params, error, match):
    with pytest.raises(error, match=match):
        _train(_table(200), rounds=1, **params)


def test_a_constrained_categorical_feature_is_refused():
    df = _table(200)
    df["c"] = pd.Categorical(np.where(df["a"] > 0, "x", "y"))
    with pytest.raises(ValueError, match=r"categorical feature\(s\) \['c'\]"):
        _train(df, rounds=1, monotone_constraints={"c": 1})


def test_the_estimators_take_the_bounds():
    from gbflow.sklearn import GBFlowClassifier, GBFlowRegressor
    df = _table()
    X, y = df.drop(columns="y"), df["y"]
    model = GBFlowRegressor(n_estimators=20, max_depth=5, monotone_constraints={"a": 1},
                            max_delta_step=0.5).fit(X, y)
    assert (np.diff(_along(model.get_booster(), df, "a"), axis=1) >= 0).all()
    direct = _train(df, rounds=20, monotone_constraints={"a": 1}, max_delta_step=0.5,
                    seed=0)
    assert np.array_equal(model.predict(X), np.asarray(direct.predict(X)))
    classifier = GBFlowClassifier(n_estimators=10, monotone_constraints=(0, -1)).fit(X, y > 0)
    proba = classifier.predict_proba(df.drop(columns="y").iloc[:60].assign(b=0.0))[:, 1]
    higher = classifier.predict_proba(df.drop(columns="y").iloc[:60].assign(b=1.0))[:, 1]
    assert (higher <= proba).all()
