"""Several quantiles in one reg:quantileerror model (XGBoost's list of ``quantile_alpha``): one
output per quantile, each the model of its quantile alone; the averaged quantile metric, early
stopping, model files, XGBoost and Treelite exports, the scikit-learn regressor and errors."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow
from gbflow import boosting, inputs, metrics
from gbflow.backend import get_backend
from gbflow.evaluation import EvalOptions
from gbflow.params import make_params

ALPHAS = [0.9, 0.1, 0.5]  # not sorted: the outputs keep the given order
QUANTILE = {"objective": "reg:quantileerror", "max_depth": 4, "learning_rate": 0.3}


def _data(n_rows=3000, seed=0):
    df = make_table(n_rows=n_rows, seed=seed)
    return df.drop(columns="y"), df["y"].to_numpy()


def _train(X, y, alpha, rounds=6, **params):
    return gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": alpha, **params},
                        num_boost_round=rounds, verbose=False)


def _pinball(y, prediction, alphas, weight=None):
    """XGBoost's quantile metric by its definition: the weighted pinball loss summed over rows
    and quantiles over the weights summed over rows and quantiles."""
    a = np.asarray(alphas, dtype=np.float64)
    diff = np.asarray(y, dtype=np.float64)[:, None] - prediction.reshape(len(y), -1)
    loss = np.where(diff >= 0, a * diff, (a - 1.0) * diff)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    return float((loss * w[:, None]).sum() / (w.sum() * len(a)))


def test_one_quantile_in_a_list_is_the_model_of_the_number(device):
    X, y = _data()
    number = _train(X, y, 0.7, device=device)
    for listed in ([0.7], (0.7,), np.array([0.7])):
        assert _train(X, y, listed, device=device).to_json() == number.to_json()
    assert json.loads(number.to_json())["params"]["quantile_alpha"] == 0.7
    assert number.n_groups == 1 and np.asarray(number.predict(X)).shape == (len(y),)


@pytest.mark.parametrize("extra", [{}, {"subsample": 0.7, "weighted": True}])
def test_each_output_is_the_model_of_its_quantile_alone(device, extra):
    """Outputs share nothing but the rows: output j's base score, trees and predictions are
    those of a model trained with alpha = ALPHAS[j] alone, exactly."""
    X, y = _data(seed=2)
    extra = dict(extra)
    weight = np.random.default_rng(3).uniform(0.1, 3.0, len(y)) \
        if extra.pop("weighted", False) else None
    params = {**QUANTILE, **extra, "device": device}
    several = gbflow.train(X, y, weight=weight, params={**params, "quantile_alpha": ALPHAS},
                           num_boost_round=5, verbose=False)
    assert several.n_groups == 3 and several.num_boosted_rounds() == 5
    assert [t.group for t in several.trees] == [0, 1, 2] * 5  # one tree per quantile a round
    model = json.loads(several.to_json())
    predictions = np.asarray(several.predict(X))
    margins = np.asarray(several.predict(X, output_margin=True))
    assert predictions.shape == (len(y), 3) and np.array_equal(predictions, margins)
    for j, alpha in enumerate(ALPHAS):
        alone = gbflow.train(X, y, weight=weight, params={**params, "quantile_alpha": alpha},
                             num_boost_round=5, verbose=False)
        single = json.loads(alone.to_json())
        trees = [{**t, "group": 0} for t in model["trees"] if t["group"] == j]
        assert trees == single["trees"]
        assert model["base_margin"][j] == single["base_margin"][0]
        assert np.array_equal(predictions[:, j], np.asarray(alone.predict(X)))
    # the quantiles' outputs are ordered as their alphas (0.1 < 0.5 < 0.9) for most rows
    assert np.mean((predictions[:, 1] <= predictions[:, 2]) &
                   (predictions[:, 2] <= predictions[:, 0])) > 0.95


@pytest.mark.parametrize("weighted", [False, True])
def test_same_model_on_one_or_many_shards_and_training_margins_are_predictions(device,
                                                                                weighted):
    df = make_table(seed=4)
    valid = make_table(n_rows=800, seed=5)
    if weighted:
        df["w"] = np.random.default_rng(1).uniform(0.1, 3.0, len(df))
        valid["w"] = np.random.default_rng(2).uniform(0.1, 3.0, len(valid))
    weight = "w" if weighted else None
    params = make_params({**QUANTILE, "quantile_alpha": ALPHAS, "subsample": 0.7,
                          "eval_metric": ["quantile", "mae"]})
    backend = get_backend(device)

    def fit(bounds, valid_bounds):
        parts = [inputs.load(df.iloc[a:b], "y", weight=weight, allow_empty=True)
                 for a, b in zip(bounds[:-1], bounds[1:])]
        valid_parts = [inputs.load(valid.iloc[a:b], "y", weight=weight)
                       for a, b in zip(valid_bounds[:-1], valid_bounds[1:])]
        return boosting.fit(backend, parts, params, 6, [(valid_parts, "valid")],
                            EvalOptions(), verbose=False, keep_training_margins=True)

    one = fit([0, len(df)], [0, len(valid)])
    many = fit([0, 1, 700, 700, 701, 2000, len(df)], [0, 1, 300, len(valid)])
    assert many.to_json() == one.to_json()
    assert many.evals_result == one.evals_result
    assert np.array_equal(np.concatenate(many.training_margins), one.training_margins[0])
    X = df.drop(columns=[c for c in ("y", "w") if c in df])
    margins = np.asarray(one.predict(X, output_margin=True))
    assert margins.shape == (len(df), 3)
    assert np.array_equal(margins, one.training_margins[0])
    # the last round's metrics are the metrics of the held-out predictions
    Xv = valid.drop(columns=[c for c in ("y", "w") if c in valid])
    prediction = np.asarray(one.predict(Xv))
    w = valid["w"].to_numpy() if weighted else None
    yv = valid["y"].to_numpy()
    history = one.evals_result["valid"]
    assert history["quantile"][-1] == pytest.approx(_pinball(yv, prediction, ALPHAS, w),
                                                    rel=1e-12)
    ww = np.ones(len(yv)) if w is None else w
    mae = float((np.abs(yv[:, None] - prediction) * ww[:, None]).sum() / (3 * ww.sum()))
    assert history["mae"][-1] == pytest.approx(mae, rel=1e-12)  # averaged over the outputs


@pytest.mark.parametrize("weighted", [False, True])
def test_quantile_metric_against_numpy_and_xgboost(weighted):
    rng = np.random.default_rng(7)
    n = 2000
    y = rng.standard_t(3, n)
    prediction = rng.normal(size=(n, 3)) + np.array([1.0, -1.0, 0.0])
    weight = rng.uniform(0.1, 3.0, n) if weighted else None
    params = make_params({"objective": "reg:quantileerror", "quantile_alpha": ALPHAS})
    ours = metrics.evaluate("quantile", y, prediction, weight, params=params)
    assert ours == pytest.approx(_pinball(y, prediction, ALPHAS, weight), rel=1e-12)
    singles = [metrics.evaluate("quantile", y, prediction[:, j], weight,
                                params=make_params({"quantile_alpha": alpha}))
               for j, alpha in enumerate(ALPHAS)]
    assert ours == pytest.approx(np.mean(singles), rel=1e-12)  # the quantiles' mean
    xgb = pytest.importorskip("xgboost")
    # XGBoost's metric on the same predictions: a model without trees, the predictions given
    # as its rows' base margins
    X = np.zeros((n, 1), dtype=np.float32)
    model = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": ALPHAS},
                      xgb.DMatrix(X, y, weight=weight), 0)
    data = xgb.DMatrix(X, y, weight=weight, base_margin=prediction)
    assert np.allclose(model.predict(data), prediction, atol=1e-6)
    theirs = float(model.eval(data).split(":")[1])
    assert ours == pytest.approx(theirs, rel=1e-6)  # XGBoost's losses are float32


def test_held_out_pinball_loss_matches_xgboost(device):
    """The held-out quantile metric (each library's own, on its own predictions) at least as
    good as XGBoost's with the same parameters on the same data, or within 1%; predictions of
    XGBoost's shape, each column covering about its quantile's share of the labels. (Sorted:
    XGBoost 3.4 refuses quantiles out of ascending order; 3.2 and gbflow take any order.)"""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20000, 8)).astype(np.float32)
    Xt = rng.standard_normal((5000, 8)).astype(np.float32)

    def labels(A):  # heavy tails: what the quantile loss is for
        f = A[:, 0] + 0.5 * A[:, 1] * A[:, 2] + np.sin(A[:, 3])
        return (f + rng.standard_t(2, len(A))).astype(np.float32)

    y, yt = labels(X), labels(Xt)
    params = {"max_depth": 6, "learning_rate": 0.1, "max_bin": 256,
              "objective": "reg:quantileerror", "quantile_alpha": sorted(ALPHAS),
              "eval_metric": "quantile"}
    booster = gbflow.train(X, y, {**params, "device": device}, 100,
                           evals=[((Xt, yt), "test")], verbose=False)
    history = {}
    theirs = xgb.train({**params, "tree_method": "hist", "nthread": 2}, xgb.DMatrix(X, y), 100,
                       evals=[(xgb.DMatrix(Xt, yt), "test")], evals_result=history,
                       verbose_eval=False)
    ours_value = booster.evals_result["test"]["quantile"][-1]
    their_value = history["test"]["quantile"][-1]
    assert ours_value <= their_value * 1.01, (ours_value, their_value)
    prediction = np.asarray(booster.predict(Xt))
    assert prediction.shape == theirs.predict(xgb.DMatrix(Xt)).shape == (len(yt), 3)
    for j, alpha in enumerate(sorted(ALPHAS)):
        assert abs(np.mean(yt <= prediction[:, j]) - alpha) < 0.03


def test_early_stopping_watches_the_averaged_quantile_metric():
    X, y = _data(n_rows=1500, seed=6)
    Xv, yv = _data(n_rows=1500, seed=7)
    booster = gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": [0.25, 0.75],
                                         "learning_rate": 0.5, "max_depth": 6},
                           num_boost_round=300, evals=[((Xv, yv), "valid")],
                           early_stopping_rounds=5, verbose=False)
    history = booster.evals_result["valid"]["quantile"]
    best = booster.best_iteration
    assert len(history) < 300 and len(history) == best + 1 + 5  # it stopped
    assert best == int(np.argmin(history)) and booster.best_score == history[best]
    prediction = np.asarray(booster.predict(Xv))  # up to the best round
    assert prediction.shape == (len(yv), 2)
    assert history[best] == pytest.approx(_pinball(yv, prediction, [0.25, 0.75]), rel=1e-12)


def test_model_file_keeps_the_quantiles_and_training_continues(tmp_path):
    X, y = _data(seed=8)
    booster = _train(X, y, ALPHAS, rounds=8)
    path = tmp_path / "model.json"
    booster.save_model(path)
    stored = json.loads(path.read_text())
    assert stored["params"]["quantile_alpha"] == ALPHAS and len(stored["base_margin"]) == 3
    loaded = gbflow.load_model(path)
    assert loaded.params.quantile_alpha == tuple(ALPHAS)
    assert loaded.to_json() == booster.to_json()
    assert np.array_equal(np.asarray(loaded.predict(X)), np.asarray(booster.predict(X)))
    first = _train(X, y, ALPHAS, rounds=3)
    rest = gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": ALPHAS},
                        num_boost_round=5, xgb_model=first, verbose=False)
    assert rest.to_json() == booster.to_json()  # 3 + 5 rounds: the 8-round model
    with pytest.raises(ValueError, match=r"xgb_model has 3 outputs .*cannot continue it with 2"):
        gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": [0.1, 0.5]},
                     num_boost_round=1, xgb_model=first, verbose=False)


@pytest.mark.parametrize("alpha", [0.7, ALPHAS])
def test_xgboost_loads_the_export_and_predicts_and_evaluates_the_same(alpha, tmp_path):
    xgb = pytest.importorskip("xgboost")
    X, y = _data(seed=9)
    booster = _train(X, y, alpha, rounds=10)
    k = booster.n_groups
    model = booster.to_xgboost()
    config = json.loads(model.save_config())["learner"]
    alphas = [alpha] if k == 1 else alpha
    stored = config["objective"]["quantile_loss_param"]["quantile_alpha"]
    assert np.array_equal(np.array(json.loads(stored), dtype=np.float32),
                          np.array(alphas, dtype=np.float32))
    assert config["learner_model_param"]["num_target"] == str(k)
    data = xgb.DMatrix(X, y)
    ours = np.asarray(booster.predict(X))
    margins = np.asarray(booster.predict(X, output_margin=True)).reshape(ours.shape)
    scale = np.abs(margins).max()
    for theirs, expected in ((model.predict(data), ours),
                             (model.predict(data, output_margin=True), margins)):
        assert theirs.shape == expected.shape
        np.testing.assert_allclose(theirs, expected, rtol=1e-6, atol=1e-6 * scale)
    assert np.array_equal(model.predict(data, pred_leaf=True),
                          np.asarray(booster.predict(X, pred_leaf=True)))
    ours_metric = metrics.evaluate("quantile", y, ours, params=booster.params)
    assert float(model.eval(data).split(":")[1]) == pytest.approx(ours_metric, rel=1e-5)
    booster.save_model(tmp_path / "m.ubj", format="xgboost")
    loaded = xgb.Booster(model_file=str(tmp_path / "m.ubj"))
    np.testing.assert_allclose(loaded.predict(data), ours, rtol=1e-6, atol=1e-6 * scale)


def test_treelite_export_predicts_every_quantile():
    pytest.importorskip("treelite")
    import treelite.gtil
    X, y = _data(seed=10)
    booster = _train(X, y, ALPHAS)
    features = np.asarray(X, dtype=np.float32)
    got = treelite.gtil.predict(booster.to_treelite(), features).reshape(len(y), -1)
    np.testing.assert_allclose(got, np.asarray(booster.predict(X)), rtol=1e-12, atol=1e-12)


def test_the_regressor_predicts_one_column_per_quantile():
    pytest.importorskip("sklearn")
    X, y = _data(seed=11)
    model = gbflow.GBFlowRegressor(objective="reg:quantileerror", quantile_alpha=ALPHAS,
                                   n_estimators=20, learning_rate=0.2).fit(X, y)
    direct = _train(X, y, ALPHAS, rounds=20, learning_rate=0.2, max_depth=6)
    prediction = model.predict(X)
    assert isinstance(prediction, np.ndarray) and prediction.shape == (len(y), 3)
    assert np.array_equal(prediction, np.asarray(direct.predict(X)))
    for j, alpha in enumerate(ALPHAS):  # each column covers about its quantile's share
        assert abs(np.mean(y <= prediction[:, j]) - alpha) < 0.05
    names = [f"prediction_{j}" for j in range(3)]
    framed = model.transform(X)
    assert list(framed.columns) == list(X.columns) + names
    assert np.array_equal(framed[names].to_numpy(), prediction)
    assert list(model.get_feature_names_out()) == list(X.columns) + names
    array = X.to_numpy()
    stacked = gbflow.GBFlowRegressor(objective="reg:quantileerror", quantile_alpha=ALPHAS,
                                     n_estimators=5).fit(array, y).transform(array)
    assert stacked.shape == (len(y), X.shape[1] + 3)
    unnamed = pd.DataFrame(array)  # integer column names: the estimator's own columns
    fitted = gbflow.GBFlowRegressor(objective="reg:quantileerror", quantile_alpha=ALPHAS,
                                    n_estimators=5).fit(unnamed, y)
    assert list(fitted.transform(unnamed).columns)[-3:] == names


@pytest.mark.parametrize("params,error", [
    ({"quantile_alpha": []}, "quantile_alpha is an empty list"),
    ({"quantile_alpha": [0.1, 1.5]}, r"quantile_alpha \(entry 1 of 2\) must lie in \(0, 1\], "
                                     r"got 1.5"),
    ({"quantile_alpha": (0.0, 0.5)}, r"quantile_alpha \(entry 0 of 2\) must lie in"),
    ({"quantile_alpha": [0.1, "0.9"]}, r"quantile_alpha \(entry 1 of 2\) must be a number"),
    ({"quantile_alpha": [0.1, float("nan")]}, r"\(entry 1 of 2\) must be finite"),
    ({"quantile_alpha": np.array([[0.1, 0.9]])}, "a flat list"),
    ({"quantile_alpha": [0.1, 0.9], "objective": "reg:squarederror"},
     "lists 2 quantiles, which only objective reg:quantileerror trains"),
    ({"quantile_alpha": [0.1, 0.9], "objective": "reg:absoluteerror"},
     "only objective reg:quantileerror trains"),
    ({"quantile_alpha": [0.1, 0.9], "eval_metric": "auc"},
     r"'auc' does not fit objective reg:quantileerror \(2 quantiles"),
    ({"quantile_alpha": [0.1, 0.9], "eval_metric": ["quantile", "ndcg"]},
     "'ndcg' does not fit"),
    ({"quantile_alpha": [0.1, 0.9], "eval_metric": "mlogloss"}, "'mlogloss' does not fit"),
])
def test_bad_quantiles_are_refused_with_the_reason(params, error):
    with pytest.raises((ValueError, TypeError), match=error):
        make_params({"objective": "reg:quantileerror", **params})


def test_row_base_margins_need_one_column_per_quantile():
    X, y = _data(n_rows=500, seed=12)
    with pytest.raises(ValueError, match=r"base_margin has 1 value\(s\) per row; this training "
                                         r"has 3 output\(s\)"):
        gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": ALPHAS}, num_boost_round=1,
                     base_margin=np.zeros(len(y)), verbose=False)
    start = np.tile([[-1.0, 1.0, 0.0]], (len(y), 1))
    booster = gbflow.train(X, y, params={**QUANTILE, "quantile_alpha": ALPHAS},
                           num_boost_round=2, base_margin=start, verbose=False)
    trees_only = np.asarray(booster.predict(X, output_margin=True)) - booster.base_margin
    assert np.allclose(np.asarray(booster.predict(X, base_margin=start)), start + trees_only)
