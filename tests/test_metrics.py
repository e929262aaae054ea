"""Evaluation metrics: XGBoost's values on the same predictions, independence from how a set is
split, and early stopping as XGBoost's (best round, watched metric, direction, custom metrics)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow import collective, metrics
from gbflow.backend import get_backend
from gbflow.metrics import EvalData, Evaluator
from gbflow.params import make_params

xgb = pytest.importorskip("xgboost")

REGRESSION = ["rmse", "rmsle", "mae", "mape", "mphe", "poisson-nloglik", "gamma-nloglik",
              "gamma-deviance", "tweedie-nloglik@1.5", "tweedie-nloglik@1.2", "quantile"]
BINARY = ["logloss", "error", "error@0.3", "auc", "aucpr", "rmse", "mae"]
MULTICLASS = ["mlogloss", "merror", "auc", "aucpr"]


def _xgboost_values(objective, names, label, margin, weight, extra=None):
    """XGBoost's metrics on a booster without trees whose margins are ``margin`` (its
    predictions are the objective's transform of them), and those predictions."""
    params = {"objective": objective, "eval_metric": names, **(extra or {})}
    if objective == "multi:softprob":
        params["num_class"] = margin.shape[1]
    data = xgb.DMatrix(np.zeros((len(label), 1), np.float32), label, weight=weight,
                       base_margin=margin)
    booster = xgb.Booster(params, [data])
    text = booster.eval(data, "d").split("\t")[1:]
    values = {item.split(":")[0][2:]: float(item.split(":")[1]) for item in text}
    return values, booster.predict(data).astype(np.float64)


def _regression_case(rng, n):
    label = (rng.gamma(2.0, 1.0, n) + 0.05).astype(np.float32)
    label[:20] = np.round(label[:20])  # a few whole counts (poisson), none zero (mape, gamma)
    label[:20] = np.maximum(label[:20], 1.0)
    prediction = (label * rng.uniform(0.5, 1.6, n)).astype(np.float32)
    return label, prediction


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [300, 20_000])
def test_regression_metrics_match_xgboost(weighted, n):
    rng = np.random.default_rng(n)
    label, prediction = _regression_case(rng, n)
    weight = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None
    for slope, alpha in [(1.0, 0.5), (2.5, 0.2)]:
        extra = {"huber_slope": slope, "quantile_alpha": alpha}
        theirs, predicted = _xgboost_values("reg:squarederror", REGRESSION, label, prediction,
                                            weight, extra)
        assert np.array_equal(predicted, prediction)
        params = make_params(extra)
        for name in REGRESSION:
            ours = metrics.evaluate(name, label, prediction, weight, params)
            assert ours == pytest.approx(theirs[name], rel=2e-6), name


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [50, 1000, 100_000])
def test_binary_metrics_match_xgboost(weighted, n):
    rng = np.random.default_rng(n + 1)
    label = (rng.random(n) < 0.3).astype(np.float32)
    margin = (rng.normal(size=n) + 1.5 * label).astype(np.float32)
    weight = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None
    theirs, prediction = _xgboost_values("binary:logistic", BINARY, label, margin, weight)
    for name in BINARY:
        ours = metrics.evaluate(name, label, prediction, weight)
        # auc and aucpr: by float32 value up to 2**16 rows (XGBoost's ranking), rows in one of
        # 2**20 buckets tied beyond; weights in fixed point (to 2**-20 of the largest or
        # finer); XGBoost sums float32 terms
        by_value = 1e-7 if weighted else 1e-12
        tolerance = (by_value if n <= 2**16 else 1e-6) if name in ("auc", "aucpr") else 1e-7
        assert ours == pytest.approx(theirs[name], rel=tolerance, abs=tolerance), name


@pytest.mark.parametrize("soft", [False, True])
def test_ties_and_soft_labels_in_auc_match_xgboost(soft):
    rng = np.random.default_rng(5)
    n = 2000
    label = (rng.random(n) < 0.5).astype(np.float32)
    if soft:
        label = np.round(rng.random(n), 1).astype(np.float32)  # soft labels in [0, 1]
    margin = np.round(rng.normal(size=n) + label, 1).astype(np.float32)  # many ties
    theirs, prediction = _xgboost_values("binary:logistic", ["auc", "aucpr"], label, margin,
                                         None)
    # by value up to 2**16 rows: XGBoost's ranking; soft labels are tallied in fixed point
    tolerance = 1e-7 if soft else 1e-12
    for name in ("auc", "aucpr"):
        assert metrics.evaluate(name, label, prediction) == pytest.approx(theirs[name],
                                                                          rel=tolerance)


@pytest.mark.parametrize("weighted", [False, True])
def test_multiclass_metrics_match_xgboost(weighted):
    rng = np.random.default_rng(6)
    n, k = 5000, 4
    label = rng.integers(0, k, n).astype(np.float32)
    margin = (rng.normal(size=(n, k)) + 1.2 * np.eye(k)[label.astype(int)]).astype(np.float32)
    weight = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None
    theirs, prediction = _xgboost_values("multi:softprob", MULTICLASS, label, margin, weight)
    for name in MULTICLASS:
        ours = metrics.evaluate(name, label, prediction.reshape(n, k), weight)
        assert ours == pytest.approx(theirs[name], rel=1e-6), name


@pytest.mark.parametrize("metric", ["auc", "aucpr"])
def test_multiclass_auc_with_an_absent_class_is_nan_as_xgboosts(metric):
    rng = np.random.default_rng(7)
    label = rng.integers(0, 3, 600).astype(np.float32)  # class 3 of 4 never appears
    margin = rng.normal(size=(600, 4)).astype(np.float32)
    theirs, prediction = _xgboost_values("multi:softprob", [metric], label, margin, None)
    assert np.isnan(theirs[metric])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (no 0 / 0 on the way)
        assert np.isnan(metrics.evaluate(metric, label, prediction.reshape(600, 4)))


def test_clipped_probabilities_as_xgboost():
    label = np.array([0.0, 1.0, 1.0, 0.0])
    prediction = np.array([0.0, 0.0, 1.0, 1.0])  # certain, half of them wrongly
    theirs, _ = _xgboost_values("reg:squarederror", ["logloss", "poisson-nloglik"], label,
                                prediction, None)
    assert metrics.evaluate("logloss", label, prediction) == pytest.approx(theirs["logloss"])
    assert metrics.evaluate("poisson-nloglik", label, prediction) == \
        pytest.approx(theirs["poisson-nloglik"])


def test_logloss_of_predictions_outside_0_1_as_xgboost():
    """binary:logitraw's default metric is logloss of its margins: XGBoost floors each log's
    argument at 1e-16 and never clips the prediction (a negative loss where p < 0 at label 0)."""
    label = np.array([0.0, 0.0, 1.0, 0.3, 1.0, 0.0])
    margin = np.array([-1.0, 0.5, 0.5, 1.5, 3.0, -40.0])
    theirs, _ = _xgboost_values("binary:logitraw", ["logloss"], label, margin, None)
    assert metrics.evaluate("logloss", label, margin) == pytest.approx(theirs["logloss"],
                                                                       rel=1e-6)
    X = np.repeat(np.arange(6, dtype=np.float32), 50)[:, None]
    y = (np.arange(300) % 7 < 3).astype(np.float64)
    ours = gbflow.train(X, y, {"objective": "binary:logitraw", "max_depth": 2}, 3,
                        evals=[((X, y), "t")], verbose=False).evals_result["t"]["logloss"]
    res = {}
    xgb.train({"objective": "binary:logitraw", "max_depth": 2, "tree_method": "hist"},
              xgb.DMatrix(X, y), 3, evals=[(xgb.DMatrix(X, y), "t")], evals_result=res,
              verbose_eval=False)
    np.testing.assert_allclose(ours, res["t"]["logloss"], rtol=1e-5)


def test_evaluate_refuses_predictions_of_the_wrong_shape():
    label = np.array([0.0, 1.0, 2.0, 0.0])
    with pytest.raises(ValueError, match="takes one prediction a row"):
        metrics.evaluate("error", label, np.full((4, 3), 1 / 3))
    with pytest.raises(ValueError, match="takes one prediction a row"):
        metrics.evaluate("logloss", label, np.full((4, 3), 1 / 3))
    with pytest.raises(ValueError, match=r"takes \(n, n_classes\)"):
        metrics.evaluate("mlogloss", label, np.full(4, 0.5))
    with pytest.raises(ValueError, match="needs class labels 0..1"):
        metrics.evaluate("mlogloss", label, np.full((4, 2), 0.5))
    assert metrics.evaluate("merror", label, np.eye(3)[[0, 1, 2, 1]]) == 0.25
    as_dict = {"objective": "multi:softprob", "num_class": 3}
    assert metrics.evaluate("merror", label, np.eye(3)[[0, 1, 2, 1]], params=as_dict) == 0.25


class _OneOfTwo(collective.LocalCollective):
    """Stands for one of two processes whose peer holds no row: every reduction is the identity,
    but the evaluator takes the several-process paths (dense tables, reduced key ranges)."""

    size = 2


def _evaluator_values(names, label, prediction, weight, splits, processes=1, params=None):
    n_classes = prediction.shape[1] if prediction.ndim == 2 else 1
    parts = np.split(np.arange(len(label)), splits)
    data = EvalData("v", [label[i] for i in parts],
                    None if weight is None else [weight[i] for i in parts], len(label),
                    1.0 if weight is None else float(weight.max()), n_classes)
    metric_list = [metrics.metric(name, params) for name in names]
    chosen = collective.LOCAL if processes == 1 else _OneOfTwo()
    evaluator = Evaluator(get_backend("cpu"), metric_list, [data], chosen)
    return evaluator.values([[prediction[i] for i in parts]])[0]


@pytest.mark.parametrize("task, n", [("regression", 3000), ("binary", 3000),
                                     ("multiclass", 3000), ("binary", 70_000),
                                     ("multiclass", 70_000)])
def test_values_do_not_depend_on_parts_or_processes(task, n):
    """Equal, not close: exact sums and integer tallies, on one part or several, in one process
    or several (tables by value gathered, dense tables and key ranges reduced)."""
    rng = np.random.default_rng(7)
    weight = rng.uniform(0.1, 3.0, n)
    if task == "regression":
        names = REGRESSION
        label, prediction = (a.astype(np.float64) for a in _regression_case(rng, n))
    elif task == "binary":
        names = BINARY
        label = (rng.random(n) < 0.4).astype(np.float64)
        prediction = np.round(rng.random(n), 3)  # ties
    else:
        names = MULTICLASS
        label = rng.integers(0, 3, n).astype(np.float64)
        prediction = rng.dirichlet(np.ones(3), n)
    for w in (None, weight):
        whole = _evaluator_values(names, label, prediction, w, [])
        assert all(math.isfinite(v) for v in whole)
        for splits in ([1], [17, 900, n - 1], list(range(100, n, n // 30))):
            assert _evaluator_values(names, label, prediction, w, splits) == whole
        assert _evaluator_values(names, label, prediction, w, [n // 2], processes=2) == whole


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("classes", [1, 3])
def test_auc_alone_in_one_process_equals_the_dense_tables(classes, weighted):
    """auc without aucpr in one process takes its words straight from the rows
    (``auc_bucket_words``); the value equals the dense tables' (the path with aucpr, and the
    several-process one), on one part or several."""
    rng = np.random.default_rng(classes)
    n = 70_000
    weight = rng.uniform(0.1, 3.0, n) if weighted else None
    if classes == 1:
        label = (rng.random(n) < 0.4).astype(np.float64)
        prediction = np.round(rng.random(n), 4)  # ties
    else:
        label = rng.integers(0, classes, n).astype(np.float64)
        prediction = rng.dirichlet(np.ones(classes), n)
    names = ["auc", "aucpr"] if classes == 1 else ["auc"]
    dense = _evaluator_values(names, label, prediction, weight, [n // 2], processes=2)[0]
    if classes == 1:
        assert _evaluator_values(names, label, prediction, weight, [])[0] == dense
    for splits in ([], [1, 5000, n - 3]):
        assert _evaluator_values(["auc"], label, prediction, weight, splits) == [dense]


@pytest.mark.parametrize("n", [3000, 70_000])
def test_device_values_match_the_cpu_and_do_not_depend_on_parts(device, n):
    """On the device (scales from device maxima, atomic tallies, compact tables sized by the
    rows): equal across splits, and the CPU's values to the last bits of exp and log."""
    rng = np.random.default_rng(14)
    backend = get_backend(device)
    weight = rng.uniform(0.1, 3.0, n)
    binary = (rng.random(n) < 0.4).astype(np.float64), np.round(rng.random(n), 3)
    classes = rng.integers(0, 3, n).astype(np.float64), rng.dirichlet(np.ones(3), n)
    regression = tuple(a.astype(np.float64) for a in _regression_case(rng, n))
    for names, (label, prediction) in [(BINARY, binary), (MULTICLASS, classes),
                                       (REGRESSION, regression)]:
        n_classes = prediction.shape[1] if prediction.ndim == 2 else 1
        results = []
        for splits in ([], [17, n // 2]):
            parts = np.split(np.arange(n), splits)
            data = EvalData("v", [backend.asarray(label[i]) for i in parts],
                            [backend.asarray(weight[i]) for i in parts], n,
                            float(weight.max()), n_classes)
            evaluator = Evaluator(backend, [metrics.metric(m) for m in names], [data],
                                  collective.LOCAL)
            results.append(evaluator.values([[backend.asarray(prediction[i])
                                              for i in parts]])[0])
        assert results[0] == results[1]
        on_cpu = _evaluator_values(names, label, prediction, weight, [])
        assert results[0] == pytest.approx(on_cpu, rel=1e-12), names


def test_exact_sums_round_correctly_and_do_not_depend_on_the_order():
    from gbflow.metrics import exact
    rng = np.random.default_rng(0)
    values = rng.normal(size=5000) * np.exp(rng.uniform(-20, 20, size=5000))  # wide range
    backend, local = get_backend("cpu"), collective.LOCAL
    bound = float(np.abs(values).max())

    def total(parts):
        return exact.sums(backend, [parts], [len(values)], [bound], local)[0]

    whole = total([values])
    assert whole == pytest.approx(math.fsum(values), rel=1e-15)
    for k in (2, 7, 50):
        parts = np.split(values, np.sort(rng.choice(np.arange(1, 5000), k - 1, replace=False)))
        assert total(parts) == whole and total(parts[::-1]) == whole
    assert exact.sums(backend, [[np.zeros(0)], [np.ones(3)]], [0, 3], [1.0, 1.0], local) == \
        [0.0, 3.0]


def test_auc_of_one_class_is_nan_and_ties_count_half():
    assert math.isnan(metrics.auc(np.ones(4), np.arange(4.0)))
    assert metrics.auc(np.array([0.0, 1.0, 0.0, 1.0]), np.array([0.5, 0.5, 0.1, 0.9])) == \
        pytest.approx((1 + 1 + 0.5 + 1) / 4)


# -- early stopping and the evaluation loop --------------------------------------------------

def _scripted(sequence, name="scripted"):
    """A custom metric returning the values of ``sequence`` one evaluation after another."""
    calls = []

    def metric(prediction, data):
        calls.append(len(prediction))
        return name, sequence[len(calls) - 1]
    return metric


@pytest.mark.parametrize("maximize", [False, True])
def test_early_stopping_picks_the_round_xgboost_picks(maximize):
    """The same scripted metric values drive XGBoost's and gbflow's early stopping: the same best
    round, best score and number of rounds evaluated (ties and NaN included)."""
    sequence = [0.5, 0.4, 0.4, 0.45, float("nan"), 0.3, 0.35, 0.3, 0.5, 0.6, 0.2, 0.7, 0.8,
                0.25, 0.9, 0.1, 0.05, 0.02] + [0.01] * 10
    rounds, stop = 25, 3
    df = make_table(n_rows=200, seed=3)
    X, y = df.drop(columns="y").to_numpy(np.float32), df["y"].to_numpy()
    history = {}
    model = xgb.train({"max_depth": 2, "disable_default_eval_metric": 1}, xgb.DMatrix(X, y),
                      rounds, evals=[(xgb.DMatrix(X, y), "v")],
                      custom_metric=_scripted(sequence), early_stopping_rounds=stop,
                      maximize=maximize, evals_result=history, verbose_eval=False)
    ours = gbflow.train(df, "y", {"max_depth": 2}, rounds, evals=[(df.copy(), "v")],
                        early_stopping_rounds=stop, custom_metric=_scripted(sequence),
                        maximize=maximize, verbose=False)
    assert ours.best_iteration == model.best_iteration
    assert ours.best_score == pytest.approx(model.best_score)
    assert len(ours.evals_result["v"]["scripted"]) == len(history["v"]["scripted"])
    assert ours.evals_result["v"]["rmse"]  # the built-in metric is evaluated too, first
    assert list(ours.evals_result["v"]) == ["rmse", "scripted"]
    assert ours.num_boosted_rounds() == model.num_boosted_rounds()  # both keep every round


@pytest.mark.parametrize("name", ["mape", "map@3", "auc-custom", "pre", "ndcgish", "error"])
def test_a_custom_metrics_direction_follows_its_name_as_xgboosts(name):
    """Without ``maximize``, a custom metric's direction comes from its name as XGBoost's
    early stopping takes it: larger is better for names starting auc, aucpr, pre, map or ndcg,
    except "mape" (an error)."""
    sequence = [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    df = make_table(n_rows=200, seed=3)
    X, y = df.drop(columns="y").to_numpy(np.float32), df["y"].to_numpy()
    model = xgb.train({"max_depth": 2, "disable_default_eval_metric": 1}, xgb.DMatrix(X, y),
                      len(sequence), evals=[(xgb.DMatrix(X, y), "v")],
                      custom_metric=_scripted(sequence, name), early_stopping_rounds=3,
                      verbose_eval=False)
    ours = gbflow.train(df, "y", {"max_depth": 2, "disable_default_eval_metric": 1},
                        len(sequence), evals=[(df.copy(), "v")], early_stopping_rounds=3,
                        custom_metric=_scripted(sequence, name), verbose=False)
    assert ours.best_iteration == model.best_iteration
    assert ours.best_iteration == (6 if name != "mape" and name != "error" else 5)


def test_evals_result_is_filled_as_xgboosts():
    """XGBoost's ``evals_result=`` dict is emptied and filled with the history (copies of the
    booster's lists); anything but a dict is refused before training."""
    df = make_table(n_rows=300, seed=8)
    history = {"stale": {}}
    booster = gbflow.train(df, "y", {"max_depth": 2, "eval_metric": ["rmse", "mae"]}, 4,
                           evals=[(df, "train")], evals_result=history, verbose=False)
    assert history == booster.evals_result and list(history["train"]) == ["rmse", "mae"]
    assert history["train"]["rmse"] is not booster.evals_result["train"]["rmse"]
    assert len(history["train"]["mae"]) == 4
    with pytest.raises(TypeError, match="evals_result must be a dict"):
        gbflow.train(df, "y", {}, 2, evals_result=[])


def test_the_watched_metric_and_direction_can_be_named():
    df = make_table(n_rows=600, task="binary", seed=4)
    valid = make_table(n_rows=300, task="binary", seed=5)
    params = {"objective": "binary:logistic", "eval_metric": ["auc", "logloss"], "max_depth": 3}
    by_logloss = gbflow.train(df, "y", params, 60, evals=[(valid, "v")],
                              early_stopping_rounds=5, verbose=False)
    history = by_logloss.evals_result["v"]
    assert by_logloss.best_iteration == int(np.argmin(history["logloss"]))
    by_auc = gbflow.train(df, "y", params, 60, evals=[(valid, "v")], early_stopping_rounds=5,
                          early_stopping_metric="auc", verbose=False)
    assert by_auc.best_iteration == int(np.argmax(by_auc.evals_result["v"]["auc"]))
    assert by_auc.best_score == max(by_auc.evals_result["v"]["auc"])
    upside_down = gbflow.train(df, "y", params, 60, evals=[(valid, "v")],
                               early_stopping_rounds=5, early_stopping_metric="auc",
                               maximize=False, verbose=False)
    assert upside_down.best_iteration == int(np.argmin(upside_down.evals_result["v"]["auc"]))
    with pytest.raises(ValueError, match="early_stopping_metric 'aucpr' is not evaluated"):
        gbflow.train(df, "y", params, 5, evals=[(valid, "v")], early_stopping_rounds=2,
                     early_stopping_metric="aucpr")


def test_the_training_data_as_an_evaluation_set_uses_trainings_margins(device, monkeypatch):
    from gbflow import predictor
    df = make_table(n_rows=800, task="binary", seed=6)
    params = {"objective": "binary:logistic", "eval_metric": ["logloss", "auc", "error"],
              "device": device}
    copied = gbflow.train(df, "y", params, 20, evals=[(df.copy(), "train")], verbose=False)
    predicted = []
    original = predictor.predict_margin
    monkeypatch.setattr(predictor, "predict_margin",
                        lambda *a, **k: predicted.append(1) or original(*a, **k))
    itself = gbflow.train(df, "y", params, 20, evals=[(df, "train")], verbose=False)
    assert not predicted  # no evaluation set predicted: training's margins served
    assert itself.to_json() == copied.to_json()
    for name, values in copied.evals_result["train"].items():
        assert itself.evals_result["train"][name] == pytest.approx(values, rel=1e-12), name
    X, y = df.drop(columns="y").to_numpy(), df["y"].to_numpy()
    as_arrays = gbflow.train(X, y, params, 20, evals=[((X, y), "train")], verbose=False)
    assert not predicted
    assert as_arrays.evals_result == itself.evals_result


def test_metric_period_evaluates_every_k_rounds_and_the_last(capsys):
    df = make_table(n_rows=500, seed=8)
    valid = make_table(n_rows=200, seed=9)
    every = gbflow.train(df, "y", {}, 23, evals=[(valid, "v")], verbose=False)
    sparse = gbflow.train(df, "y", {}, 23, evals=[(valid, "v")], metric_period=5,
                          verbose=False)
    assert sparse.eval_rounds == [4, 9, 14, 19, 22]
    assert sparse.evals_result["v"]["rmse"] == \
        [every.evals_result["v"]["rmse"][i] for i in sparse.eval_rounds]
    assert sparse.to_json() == every.to_json()
    stopped = gbflow.train(df, "y", {"learning_rate": 1.0}, 200, evals=[(valid, "v")],
                           metric_period=4, early_stopping_rounds=8, verbose=False)
    assert (stopped.best_iteration + 1) % 4 == 0
    assert stopped.eval_rounds[-1] - stopped.best_iteration >= 8


def test_custom_metric_gets_transformed_predictions_and_the_sets_labels():
    df = make_table(n_rows=400, task="multiclass", seed=10)
    seen = []

    def accuracy(prediction, data):
        seen.append((prediction.shape, data.get_label().dtype, data.get_weight().size))
        return [("acc", float(np.mean(prediction.argmax(axis=1) == data.get_label()))),
                ("rows", data.num_row())]
    booster = gbflow.train(df, "y", {"objective": "multi:softprob", "num_class": 3}, 4,
                           evals=[(df.copy(), "v")], custom_metric=accuracy, verbose=False)
    assert seen[0] == ((400, 3), np.float32, 0)
    assert list(booster.evals_result["v"]) == ["mlogloss", "acc", "rows"]
    assert booster.evals_result["v"]["rows"] == [400.0] * 4
    p = np.asarray(booster.predict(df))
    assert booster.evals_result["v"]["acc"][-1] == pytest.approx(
        np.mean(p.argmax(axis=1) == df["y"].to_numpy()))


def test_custom_metric_gets_what_xgboosts_train_gives_it():
    """XGBoost's train gives custom_metric predict's values, but the raw margins where a custom
    objective trains; multi:softmax's values are its class ids, (n,)."""
    df = make_table(n_rows=300, task="binary", seed=11)
    seen = {}

    def last(prediction, data):
        seen["last"] = np.array(prediction)
        return "zero", 0.0

    def logistic(margin, data):
        p = 1.0 / (1.0 + np.exp(-margin))
        return p - data.get_label(), p * (1.0 - p)
    booster = gbflow.train(df, "y", {"objective": "binary:logistic"}, 3, evals=[(df, "v")],
                           obj=logistic, custom_metric=last, verbose=False)
    assert np.array_equal(seen["last"], booster.predict(df, output_margin=True).to_numpy())
    classes = make_table(n_rows=300, task="multiclass", seed=12)
    booster = gbflow.train(classes, "y", {"objective": "multi:softmax", "num_class": 3}, 3,
                           evals=[(classes, "v")], custom_metric=last, verbose=False)
    assert seen["last"].shape == (300,)
    assert np.array_equal(seen["last"], np.asarray(booster.predict(classes), dtype=float))
    theirs = {}

    def theirs_last(prediction, data):
        theirs["shape"] = prediction.shape
        return "zero", 0.0
    X, y = classes.drop(columns="y").to_numpy(np.float32), classes["y"].to_numpy()
    xgb.train({"objective": "multi:softmax", "num_class": 3}, xgb.DMatrix(X, y), 2,
              evals=[(xgb.DMatrix(X, y), "v")], custom_metric=theirs_last, verbose_eval=False)
    assert theirs["shape"] == seen["last"].shape


def test_evaluation_arguments_are_checked_before_training():
    df = make_table(n_rows=100, seed=11)
    cases = [
        (dict(metric_period=0), ValueError, "metric_period must be a positive integer"),
        (dict(early_stopping_rounds=-1), ValueError, "early_stopping_rounds must be"),
        (dict(maximize="yes"), TypeError, "maximize must be True, False or None"),
        (dict(custom_metric="rmse"), TypeError, "custom_metric must be a callable"),
        (dict(early_stopping_rounds=2, early_stopping_metric="mae"), ValueError,
         "early_stopping_metric 'mae' is not evaluated"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            gbflow.train(df, "y", num_boost_round=2, evals=[(df, "t")], **kwargs)
    with pytest.raises(TypeError, match="custom_metric must return"):
        gbflow.train(df, "y", num_boost_round=2, evals=[(df, "t")],
                     custom_metric=lambda p, d: 0.5, verbose=False)
    with pytest.raises(ValueError, match="'rmse', the name of an eval_metric"):
        gbflow.train(df, "y", num_boost_round=2, evals=[(df, "t")],
                     custom_metric=lambda p, d: ("rmse", 0.5), verbose=False)
    with pytest.raises(ValueError, match="early_stopping_rounds needs a metric"):
        gbflow.train(df, "y", {"disable_default_eval_metric": True}, 2, evals=[(df, "t")],
                     early_stopping_rounds=1)
    only_custom = gbflow.train(df, "y", {"disable_default_eval_metric": True}, 2,
                               evals=[(df, "t")], custom_metric=lambda p, d: ("c", 1.0),
                               verbose=False)
    assert only_custom.evals_result == {"t": {"c": [1.0, 1.0]}}
    bad = df.assign(y=df["y"] * 10)
    with pytest.raises(ValueError, match=r"eval_metric 'logloss' needs labels in \[0, 1\]; "
                                         r"evaluation set 't' has labels from"):
        gbflow.train(df, "y", {"eval_metric": "logloss"}, 2, evals=[(bad, "t")])
    with pytest.raises(ValueError, match=r"'gamma-deviance' needs labels in \(0, inf\)"):
        gbflow.train(df, "y", {"eval_metric": "gamma-deviance"}, 2, evals=[(df, "t")])


@pytest.mark.parametrize("period", [1, 3])
def test_evaluating_one_round_late_changes_nothing(period, monkeypatch):
    """Where the device queues ahead (the GPU), rounds are evaluated one round late; forced on
    the CPU: the same model, values, best round and stopping round."""
    from gbflow.backend.cpu import CpuBackend
    df = make_table(n_rows=800, task="binary", seed=12)
    valid = make_table(n_rows=300, task="binary", seed=13)
    kwargs = dict(params={"objective": "binary:logistic", "eval_metric": ["logloss", "auc"],
                          "learning_rate": 0.8},
                  num_boost_round=60, evals=[(valid, "v")], early_stopping_rounds=4,
                  metric_period=period, verbose=False)
    expected = gbflow.train(df, "y", **kwargs)
    assert expected.eval_rounds[-1] < 59  # it stopped early
    monkeypatch.setattr(CpuBackend, "queues_ahead", True)
    late = gbflow.train(df, "y", **kwargs)
    assert late.to_json() == expected.to_json()
    assert late.evals_result == expected.evals_result
    assert late.eval_rounds == expected.eval_rounds
    every = gbflow.train(df, "y", **dict(kwargs, early_stopping_rounds=None, num_boost_round=9))
    monkeypatch.setattr(CpuBackend, "queues_ahead", False)
    assert every.evals_result == gbflow.train(
        df, "y", **dict(kwargs, early_stopping_rounds=None, num_boost_round=9)).evals_result


_RECORDED_CASES = {  # task, params, rounds, metric_period
    "binary": ("binary", {"objective": "binary:logistic", "max_depth": 3,
                          "eval_metric": ["logloss", "error", "auc", "aucpr"]}, 12, 1),
    "multiclass": ("multiclass", {"objective": "multi:softprob", "num_class": 3, "max_depth": 4,
                                  "eval_metric": ["mlogloss", "merror", "auc"]}, 9, 2),
    "quantiles": ("regression", {"objective": "reg:quantileerror", "max_depth": 3,
                                 "quantile_alpha": [0.2, 0.5, 0.8]}, 8, 1),
    "lossguide": ("regression", {"max_leaves": 5, "grow_policy": "lossguide", "max_depth": 0,
                                 "eval_metric": ["rmse", "mae"]}, 8, 1),
}


@pytest.mark.parametrize("case, valid_rows", [("binary", 700), ("binary", 70_000),
                                              ("multiclass", 70_000), ("quantiles", 70_000),
                                              ("lossguide", 3000)])
def test_recorded_evaluation_gives_the_values_of_launched_work(device, case, valid_rows,
                                                               monkeypatch):
    """On the GPU a round's walk of its staged trees, transform and metric kernels are
    recorded once (a CUDA graph) and replayed: the same values, best round and model as when
    every kernel is launched (the CPU's plain recorder runs the same code). Sets of up to
    65,536 rows are tallied by value, larger ones in 2**20 buckets; several trees a round
    (classes, metric_period), several quantiles' pinball losses, trees of a growing stride."""
    task, params, rounds, period = _RECORDED_CASES[case]
    df = make_table(n_rows=2000, task=task, seed=14)
    valid = make_table(n_rows=valid_rows, task=task, seed=15)
    for frame, seed in ((df, 1), (valid, 2)):  # weighted: the weight terms are recorded too
        frame["w"] = np.random.default_rng(seed).uniform(0.5, 2.0, len(frame))
    kwargs = dict(params={**params, "device": device}, num_boost_round=rounds, verbose=False,
                  early_stopping_rounds=3, weight="w", evals=[(valid, "v")],
                  metric_period=period)
    recorded_keys = []
    if device == "cuda":
        from gbflow.backend import cuda
        remember = cuda.GraphRecorder._remember

        def spy(self, table, key, value):
            if table is self._graphs and key[0] == "evaluation":
                recorded_keys.append(key)
            remember(self, table, key, value)
        monkeypatch.setattr(cuda.GraphRecorder, "_remember", spy)
    recorded = gbflow.train(df, "y", **kwargs)
    if device == "cuda" and (valid_rows > 65_536 or case == "lossguide"):
        # recorded with the walk (the compact by-value tallies sort: they may not record)
        assert any(key[1] for key in recorded_keys)
    monkeypatch.setenv("GBFLOW_CUDA_GRAPHS", "0")
    launched = gbflow.train(df, "y", **kwargs)
    assert recorded.evals_result == launched.evals_result
    assert recorded.best_iteration == launched.best_iteration
    assert recorded.to_json() == launched.to_json()
