"""The scikit-learn estimators: contract, fitted attributes, and agreement with gbflow.train."""
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import gbflow
from gbflow import GBFlowClassifier, GBFlowRegressor

FAST = dict(n_estimators=20, max_depth=3)


def regression_data(n=400, n_features=5, seed=0, noise=0.1):
    """y depends on features 0 and 1 only; the others are pure noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    y = 2.0 * X[:, 0] + np.sin(2.0 * X[:, 1]) + noise * rng.normal(size=n)
    return X, y


def three_class_data(n=450, seed=1):
    """String labels decided by feature 0 (with a little help from feature 1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    score = X[:, 0] + 0.3 * X[:, 1]
    y = np.array(["low", "mid", "high"])[np.digitize(score, [-0.5, 0.5])]
    return X, y


def r2(y, p):
    return 1.0 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


# -- regression ----------------------------------------------------------------------------
def test_regressor_fits_and_beats_the_mean():
    X, y = regression_data()
    model = GBFlowRegressor(**FAST).fit(X[:300], y[:300])
    pred = model.predict(X[300:])
    assert isinstance(pred, np.ndarray) and pred.shape == (100,) and pred.dtype == np.float64
    # predicting the training mean scores about 0; the model must explain most of the variance
    assert r2(y[300:], np.full(100, y[:300].mean())) < 0.05
    assert r2(y[300:], pred) > 0.85
    assert model.score(X[300:], y[300:]) == pytest.approx(r2(y[300:], pred))
    assert model.n_features_in_ == 5
    assert not hasattr(model, "feature_names_in_")  # arrays carry no names


def test_regressor_on_dataframe_records_feature_names_and_keeps_nan_as_missing():
    X, y = regression_data(n=200)
    X[::7, 2] = np.nan
    df = pd.DataFrame(X, columns=["a", "b", "c", "d", "e"])
    model = GBFlowRegressor(**FAST).fit(df, pd.Series(y))
    assert list(model.feature_names_in_) == ["a", "b", "c", "d", "e"]
    assert model.get_booster().feature_names == ["a", "b", "c", "d", "e"]
    pred = model.predict(df)
    assert pred.shape == (200,) and np.isfinite(pred).all()
    with pytest.raises(ValueError, match="feature names"):
        model.predict(df[["b", "a", "c", "d", "e"]])  # reordered columns are refused


# -- classification --------------------------------------------------------------------------
def test_binary_classifier_with_string_labels():
    X, _ = regression_data(n=400)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "yes", "no")
    model = GBFlowClassifier(**FAST).fit(X[:300], y[:300])
    assert list(model.classes_) == ["no", "yes"] and model.n_classes_ == 2
    assert model.get_booster().params.objective == "binary:logistic"
    labels = model.predict(X[300:])
    assert labels.shape == (100,) and set(labels) <= {"no", "yes"}
    assert np.mean(labels == y[300:]) > 0.85  # chance is about 0.5
    proba = model.predict_proba(X[300:])
    assert proba.shape == (100, 2) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert ((proba >= 0) & (proba <= 1)).all()
    # predict is the more probable column
    np.testing.assert_array_equal(labels, model.classes_[(proba[:, 1] > 0.5).astype(int)])


def test_three_classes_with_string_labels():
    X, y = three_class_data()
    model = GBFlowClassifier(**FAST).fit(X[:300], y[:300])
    assert list(model.classes_) == ["high", "low", "mid"]  # np.unique order
    booster = model.get_booster()
    assert booster.params.objective == "multi:softprob" and booster.params.num_class == 3
    labels = model.predict(X[300:])
    assert labels.shape == (150,) and set(labels) <= {"low", "mid", "high"}
    assert model.score(X[300:], y[300:]) == np.mean(labels == y[300:])
    assert np.mean(labels == y[300:]) > 0.8  # chance is about 1/3
    proba = model.predict_proba(X[300:])
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(labels, model.classes_[proba.argmax(axis=1)])


def test_a_missing_string_label_is_named():
    X, y = three_class_data()
    y = y[:60].astype(object)
    y[7] = None
    with pytest.raises(ValueError, match=r"y has 1 missing label\(s\) \(None or NaN\), e\.g\. "
                                         r"at row position 7"):
        GBFlowClassifier(**FAST).fit(X[:60], y)


def test_classifier_keeps_integer_and_bool_labels_and_their_dtype():
    X, y = three_class_data(n=150)
    y_int = np.select([y == "low", y == "mid"], [10, 20], 30)
    model = GBFlowClassifier(n_estimators=5, max_depth=2).fit(X, y_int)
    assert list(model.classes_) == [10, 20, 30]
    assert model.predict(X).dtype == y_int.dtype and set(model.predict(X)) <= {10, 20, 30}
    y_bool = X[:, 0] > 0
    model = GBFlowClassifier(n_estimators=5, max_depth=2).fit(X, y_bool)
    assert model.predict(X).dtype == bool and np.mean(model.predict(X) == y_bool) > 0.9


def test_classifier_needs_two_classes():
    X, _ = regression_data(n=50)
    with pytest.raises(ValueError, match="at least 2 classes"):
        GBFlowClassifier(n_estimators=2).fit(X, np.full(50, "only"))
    with pytest.raises(ValueError, match="Unknown label type"):
        GBFlowClassifier(n_estimators=2).fit(X, X[:, 0])  # a continuous target


def test_eval_set_labels_must_be_training_classes():
    X, y = three_class_data(n=150)
    y_bad = y.astype(object)
    y_bad[:3] = "unseen"
    with pytest.raises(ValueError, match="unseen"):
        GBFlowClassifier(n_estimators=2).fit(X, y, eval_set=[(X, y_bad)])


# -- scikit-learn machinery ------------------------------------------------------------------
# scikit-learn marks these two checks as expected failures of its own histogram GBDT, as here
# for the classifier: on its 15 rows of 30 random features two features split the rows into
# the same two sets, left and right swapped, so their gains are equal but for rounding; a
# weighted row's fixed-point gradient (round(w g)) and its w repetitions (w round(g)) round
# differently, and the tie goes either way (since the classes start from their own intercepts
# the gradients are not the round numbers of p = 1/3). Weights against repetitions without
# such a tie: test_classifier_weights_equal_repeated_rows.
_WEIGHT_TIE = "a tie between mirrored splits of 15 rows breaks by fixed-point rounding"


@parametrize_with_checks([GBFlowRegressor(n_estimators=5, max_depth=3),
                          GBFlowClassifier(n_estimators=5, max_depth=3)],
                         expected_failed_checks=lambda estimator: {
                             "check_sample_weight_equivalence_on_dense_data": _WEIGHT_TIE,
                             "check_sample_weight_equivalence_on_sparse_data": _WEIGHT_TIE,
                         } if isinstance(estimator, GBFlowClassifier) else {})
def test_scikit_learn_estimator_checks(estimator, check):
    """scikit-learn's own API checks (input validation, clone, pickling, sample weights, ...)."""
    check(estimator)


def test_classifier_weights_equal_repeated_rows():
    """Integer sample weights (zeros included) fit the model that repeating (or dropping) the
    rows fits: the same per-class intercepts exactly, the same splits, probabilities equal to
    float32 rounding of the weighted gradients."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=300), [-0.5, 0.6])
    w = rng.integers(0, 4, 300)
    weighted = GBFlowClassifier(n_estimators=10, max_depth=3).fit(X, y, sample_weight=w)
    repeated = GBFlowClassifier(n_estimators=10, max_depth=3).fit(np.repeat(X, w, axis=0),
                                                                  np.repeat(y, w))
    a, b = weighted.get_booster(), repeated.get_booster()
    assert np.array_equal(a.base_margin, b.base_margin)
    assert all(np.array_equal(s.feature, t.feature) for s, t in zip(a.trees, b.trees))
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), atol=1e-5)


def test_get_params_set_params_and_clone_round_trip():
    model = GBFlowRegressor(max_depth=4, learning_rate=0.1, random_state=7,
                            eval_metric="rmse", verbose=False)
    params = model.get_params()
    assert params["max_depth"] == 4 and params["random_state"] == 7
    assert params["objective"] == "reg:squarederror" and params["n_estimators"] == 100
    expected = {"n_estimators", "max_depth", "learning_rate", "min_child_weight", "gamma",
                "reg_lambda", "reg_alpha", "subsample", "sampling_method", "colsample_bytree",
                "colsample_bylevel",
                "colsample_bynode",
                "max_bin", "random_state", "base_score", "eval_metric", "early_stopping_rounds",
                "device", "sparse_threshold", "verbose", "n_jobs", "enable_categorical",
                "max_cat_to_onehot", "max_cat_threshold", "cat_smooth", "cat_l2",
                "cat_noise_penalty", "feature_types", "verbosity",
                "max_delta_step", "monotone_constraints", "interaction_constraints", "max_leaves",
                "grow_policy", "missing", "scale_pos_weight", "tree_method", "importance_type",
                "callbacks"}
    assert set(params) == expected | {"objective", "quantile_alpha"}
    assert set(GBFlowClassifier().get_params()) == expected | {"objective"}

    assert model.set_params(max_depth=2, n_estimators=10) is model
    assert model.get_params()["max_depth"] == 2 and model.max_depth == 2

    X, y = regression_data(n=200)
    model.fit(X, y)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "booster_")  # a clone is unfitted
    copy.fit(X, y)
    np.testing.assert_array_equal(copy.predict(X), model.predict(X))
    # the changed parameter reached training: depth-2 trees have at most 7 nodes
    assert all(t.n_nodes <= 7 for t in model.get_booster().trees)
    assert any(t.n_nodes > 7 for t in GBFlowRegressor(n_estimators=10).fit(X, y)
               .get_booster().trees)


def test_invalid_parameters_fail_at_fit_not_at_construction():
    model = GBFlowRegressor(max_depth=0)  # stored verbatim
    X, y = regression_data(n=30)
    with pytest.raises(ValueError, match="max_depth"):
        model.fit(X, y)
    with pytest.raises(ValueError, match="eval_set"):
        GBFlowRegressor(early_stopping_rounds=3).fit(X, y)


def test_pipeline_and_cross_val_score():
    X, y = regression_data(n=160)
    pipe = make_pipeline(StandardScaler(), GBFlowRegressor(n_estimators=15, max_depth=3))
    scores = cross_val_score(pipe, X, y, cv=2)
    assert scores.shape == (2,) and (scores > 0.7).all()

    Xc, yc = three_class_data(n=150)
    pipe = make_pipeline(StandardScaler(), GBFlowClassifier(n_estimators=10, max_depth=3))
    scores = cross_val_score(pipe, Xc, yc, cv=2)
    assert scores.shape == (2,) and (scores > 0.7).all()


# -- validation sets and early stopping ------------------------------------------------------
def test_eval_set_and_early_stopping():
    X, y = regression_data(n=300, noise=2.0)  # noisy: deep trees soon overfit
    model = GBFlowRegressor(n_estimators=200, max_depth=6, learning_rate=0.5,
                            early_stopping_rounds=5)
    model.fit(X[:200], y[:200], eval_set=[(X[200:250], y[200:250]), (X[250:], y[250:])])
    history = model.evals_result_
    assert set(history) == {"validation_0", "validation_1"}
    assert model.evals_result() == history
    watched = history["validation_1"]["rmse"]  # the last set drives early stopping
    best = model.best_iteration_
    assert isinstance(best, int) and best < 200
    assert len(watched) == best + 1 + 5  # stopped 5 rounds after the best one
    assert model.get_booster().num_boosted_rounds() == len(watched)  # every round kept
    assert np.array_equal(model.predict(X), model.get_booster().predict(
        X, iteration_range=(0, best + 1)))  # predicting with the best round
    assert len(history["validation_0"]["rmse"]) == len(watched)
    assert model.best_score_ == watched[best] == min(watched)
    assert (model.best_iteration, model.best_score) == (best, model.best_score_)  # XGBoost's
    assert model.apply(X).shape == (len(X), best + 1)  # XGBoost's apply: up to the best round
    # XGBoost's wrapper: a range ending at 0 is the best round's too (Booster.predict's (0, 0)
    # is every round); another range is taken as given
    assert np.array_equal(model.predict(X, iteration_range=(0, 0)), model.predict(X))
    assert model.apply(X, iteration_range=(2, 0)).shape == (len(X), best + 1)
    everything = model.get_booster().predict(X, iteration_range=(0, 0))
    assert np.array_equal(model.predict(X, iteration_range=(0, len(watched))), everything)
    assert not np.array_equal(everything, model.predict(X))

    # a refit without early stopping drops the stale attributes
    model.set_params(early_stopping_rounds=None, n_estimators=5).fit(X, y)
    assert not hasattr(model, "best_iteration_") and not hasattr(model, "best_score_")
    assert model.evals_result_ == {}


def test_classifier_early_stopping_on_string_labels():
    X, y = three_class_data(n=450)
    model = GBFlowClassifier(n_estimators=100, max_depth=4, early_stopping_rounds=3)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])])
    watched = model.evals_result_["validation_0"]["mlogloss"]
    assert model.get_booster().num_boosted_rounds() == model.best_iteration_ + 1 + 3
    assert model.best_score_ == min(watched) and len(watched) < 100


# -- fitted attributes -----------------------------------------------------------------------
def test_feature_importances():
    X, y = regression_data(n=300)  # only features 0 and 1 matter
    model = GBFlowRegressor(**FAST).fit(X, y)
    imp = model.feature_importances_
    assert imp.shape == (5,) and imp.dtype == np.float64
    assert (imp >= 0).all() and imp.sum() == pytest.approx(1.0)
    assert imp.argmax() == 0 and imp[0] > imp[2:].max() and imp[1] > imp[2:].max()
    # the same numbers as the booster's "gain", in training order, zero for unused features
    gain = model.get_booster().feature_importances("gain")
    raw = np.array([gain.get(f"f{j}", 0.0) for j in range(5)])
    np.testing.assert_allclose(imp, raw / raw.sum())

    stump = GBFlowRegressor(n_estimators=3, max_depth=1).fit(X, y)  # splits on feature 0 only
    np.testing.assert_array_equal(stump.feature_importances_, [1.0, 0, 0, 0, 0])


def test_transform_appends_prediction():
    X, y = regression_data(n=120)
    df = pd.DataFrame(X, columns=list("abcde"), index=np.arange(1000, 1120))
    model = GBFlowRegressor(**FAST).fit(df, y)
    out = model.transform(df)
    assert list(out.columns) == ["a", "b", "c", "d", "e", "prediction"]
    pd.testing.assert_frame_equal(out[list("abcde")], df)
    assert out.index.equals(df.index)
    np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(df))
    assert list(df.columns) == list("abcde")  # input untouched

    arr_model = GBFlowRegressor(**FAST).fit(X, y)
    out = arr_model.transform(X)
    assert out.shape == (120, 6)
    np.testing.assert_array_equal(out[:, :5], X)
    np.testing.assert_array_equal(out[:, 5], arr_model.predict(X))

    Xc, yc = three_class_data(n=150)
    clf = GBFlowClassifier(n_estimators=5).fit(pd.DataFrame(Xc, columns=list("wxyz")), yc)
    out = clf.transform(pd.DataFrame(Xc, columns=list("wxyz")))
    assert list(out.columns) == ["w", "x", "y", "z", "prediction"]
    np.testing.assert_array_equal(out["prediction"].to_numpy(),
                                  clf.predict(pd.DataFrame(Xc, columns=list("wxyz"))))


def test_not_fitted_errors():
    X, _ = regression_data(n=10)
    for model in (GBFlowRegressor(), GBFlowClassifier()):
        for method in ("predict", "transform"):
            with pytest.raises(NotFittedError):
                getattr(model, method)(X)
        with pytest.raises(NotFittedError):
            model.get_booster()
        assert not hasattr(model, "feature_importances_")
    with pytest.raises(NotFittedError):
        GBFlowClassifier().predict_proba(X)


def test_predict_checks_feature_count():
    X, y = regression_data(n=60)
    model = GBFlowRegressor(n_estimators=3).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :4])


# -- agreement with gbflow.train -------------------------------------------------------------
def test_regressor_equals_train_with_the_same_params():
    X, y = regression_data(n=250)
    w = np.random.default_rng(5).uniform(0.5, 2.0, size=250)
    kwargs = dict(n_estimators=15, max_depth=4, learning_rate=0.2, min_child_weight=2.0,
                  gamma=0.01, reg_lambda=2.0, reg_alpha=0.1, subsample=0.8,
                  colsample_bytree=0.6, max_bin=64, random_state=11)
    params = dict(objective="reg:squarederror", max_depth=4, learning_rate=0.2,
                  min_child_weight=2.0, gamma=0.01, reg_lambda=2.0, reg_alpha=0.1,
                  subsample=0.8, colsample_bytree=0.6, max_bin=64, seed=11)
    booster = gbflow.train(X, y, params, num_boost_round=15, weight=w, verbose=False,
                           evals=[((X[:40], y[:40], w[:40]), "validation_0")])
    model = GBFlowRegressor(**kwargs).fit(X, y, sample_weight=w, eval_set=[(X[:40], y[:40])],
                                          sample_weight_eval_set=[w[:40]])
    np.testing.assert_array_equal(model.predict(X), booster.predict(X))
    assert model.get_booster().to_json() == booster.to_json()
    assert model.evals_result_ == booster.evals_result  # the eval weights were used too

    df = pd.DataFrame(X, columns=list("abcde"))
    frame_booster = gbflow.train(df, y, params, num_boost_round=15, weight=w, verbose=False)
    frame_model = GBFlowRegressor(**kwargs).fit(df, y, sample_weight=w)
    np.testing.assert_array_equal(frame_model.predict(df), frame_booster.predict(df).to_numpy())
    assert frame_model.get_booster().to_json() == frame_booster.to_json()
    # a different seed gives another model (random_state really reaches training)
    other = GBFlowRegressor(**dict(kwargs, random_state=12)).fit(X, y, sample_weight=w)
    assert not np.array_equal(other.predict(X), model.predict(X))


def test_classifiers_equal_train_with_encoded_labels():
    X, y = three_class_data(n=200)
    codes = np.unique(y, return_inverse=True)[1]  # high=0, low=1, mid=2
    multi = GBFlowClassifier(n_estimators=8, max_depth=3, random_state=3).fit(X, y)
    booster = gbflow.train(X, codes, dict(objective="multi:softprob", num_class=3, max_depth=3,
                                          seed=3), num_boost_round=8, verbose=False)
    np.testing.assert_array_equal(multi.predict_proba(X), booster.predict(X))

    y2 = np.where(codes == 1, "low", "other")
    binary = GBFlowClassifier(n_estimators=8, max_depth=3, base_score=0.4,
                              eval_metric="auc").fit(X, y2, eval_set=[(X[:50], y2[:50])])
    booster = gbflow.train(X, (y2 == "other").astype(float),
                           dict(objective="binary:logistic", max_depth=3, base_score=0.4,
                                eval_metric="auc"), num_boost_round=8,
                           evals=[((X[:50], (y2[:50] == "other").astype(float)),
                                   "validation_0")], verbose=False)
    p = booster.predict(X)
    np.testing.assert_array_equal(binary.predict_proba(X), np.column_stack((1 - p, p)))
    assert binary.evals_result_ == booster.evals_result


def test_a_callable_eval_metric_is_a_cost_as_in_xgboosts_wrapper():
    """eval_metric=f(y_true, y_pred): evaluated after the default metric, named after f,
    minimised by early stopping: XGBoost's wrapper's evals_result layout."""
    from sklearn.metrics import log_loss, mean_absolute_error
    xgb = pytest.importorskip("xgboost")
    X, y = three_class_data(n=300)
    codes = np.unique(y, return_inverse=True)[1]
    binary = (codes == 1).astype(int)
    weights = np.linspace(0.5, 2.0, 100)
    model = GBFlowClassifier(n_estimators=30, max_depth=2, eval_metric=log_loss,
                             early_stopping_rounds=3)
    model.fit(X[100:], binary[100:], eval_set=[(X[:100], binary[:100])],
              sample_weight_eval_set=[weights])
    theirs = xgb.XGBClassifier(n_estimators=30, max_depth=2, eval_metric=log_loss,
                               early_stopping_rounds=3)
    theirs.fit(X[100:], binary[100:], eval_set=[(X[:100], binary[:100])],
               sample_weight_eval_set=[weights], verbose=False)
    assert list(model.evals_result_["validation_0"]) == \
        list(theirs.evals_result()["validation_0"]) == ["logloss", "log_loss"]
    history = model.evals_result_["validation_0"]["log_loss"]
    assert model.best_iteration_ == int(np.argmin(history))
    p = model.predict_proba(X[:100])[:, 1]
    assert history[model.best_iteration_] == pytest.approx(
        log_loss(binary[:100], p, sample_weight=weights), rel=1e-6)
    regressor = GBFlowRegressor(n_estimators=5, eval_metric=mean_absolute_error)
    regressor.fit(X, codes.astype(float), eval_set=[(X, codes.astype(float))])
    assert regressor.evals_result_["validation_0"]["mean_absolute_error"][-1] == \
        pytest.approx(mean_absolute_error(codes, regressor.predict(X)))
    # names and callables in one list, as XGBoost's wrapper takes them
    mixed = GBFlowRegressor(n_estimators=3, eval_metric=["mae", mean_absolute_error]).fit(
        X, codes.astype(float), eval_set=[(X, codes.astype(float))])
    history = mixed.evals_result_["validation_0"]
    assert list(history) == ["mae", "mean_absolute_error"]
    assert history["mae"] == pytest.approx(history["mean_absolute_error"], rel=1e-9)


def test_a_callable_eval_metrics_direction_follows_its_name_as_in_xgboosts_wrapper():
    """A callable named as a maximised metric (auc..., ndcg...) is maximised by early stopping,
    as XGBoost's wrapper does (its name rule); another is minimised."""
    xgb = pytest.importorskip("xgboost")
    X, y = three_class_data(n=400)
    binary = (np.unique(y, return_inverse=True)[1] == 1).astype(int)

    def auc_of_the_first_column(y_true, y_pred):  # a score: 1 - (an error), larger is better
        return 1.0 - float(np.mean(np.abs(y_true - y_pred)))
    kwargs = dict(n_estimators=40, max_depth=2, learning_rate=0.5, early_stopping_rounds=3,
                  eval_metric=auc_of_the_first_column)
    ours = GBFlowClassifier(**kwargs).fit(X[100:], binary[100:],
                                          eval_set=[(X[:100], binary[:100])])
    theirs = xgb.XGBClassifier(**kwargs).fit(X[100:], binary[100:],
                                             eval_set=[(X[:100], binary[:100])], verbose=False)
    history = ours.evals_result_["validation_0"]["auc_of_the_first_column"]
    assert ours.best_iteration_ == int(np.argmax(history))
    assert theirs.best_iteration == int(np.argmax(
        theirs.evals_result()["validation_0"]["auc_of_the_first_column"]))


# -- adapters and parameters -----------------------------------------------------------------
def _dask_frame(df, npartitions=2):
    pytest.importorskip("distributed")  # gbflow.dask needs it
    return pytest.importorskip("dask.dataframe").from_pandas(df, npartitions=npartitions)


def test_each_input_kind_gets_its_adapter():
    import scipy.sparse

    from gbflow import sklearn_data
    X, _ = regression_data(n=20)
    model = GBFlowRegressor()
    for data in (X, X.tolist(), pd.DataFrame(X, columns=list("abcde")),
                 scipy.sparse.csr_matrix(X)):
        assert type(sklearn_data.adapter_for(data, model)) is sklearn_data._InMemoryAdapter
    dask_adapter = sklearn_data.adapter_for(
        _dask_frame(pd.DataFrame(X, columns=list("abcde"))), model)
    from gbflow.dask.estimators import DaskAdapter
    assert type(dask_adapter) is DaskAdapter and dask_adapter.estimator is model


def test_train_params_are_the_constructor_parameters():
    model = GBFlowRegressor(max_depth=4, learning_rate=0.1, random_state=7, eval_metric="rmse",
                            n_estimators=3, early_stopping_rounds=2, verbose=True)
    not_params = {"n_estimators", "early_stopping_rounds", "verbose", "random_state",
                  "callbacks", "importance_type"}
    # None means the default (XGBoost's wrapper): such parameters are left to gbflow.train
    expected = {k: v for k, v in model.get_params().items()
                if k not in not_params and v is not None}
    assert model._train_params() == dict(expected, seed=7)
    assert expected["objective"] == "reg:squarederror" and expected["max_depth"] == 4
    clf = GBFlowClassifier(random_state=None, sparse_threshold=0.5)
    params = clf._train_params(objective="multi:softprob", num_class=3)
    # random_state None: gbflow.train's default seed (0)
    assert "seed" not in params and params["sparse_threshold"] == 0.5
    assert set(params) == set(expected) - {"quantile_alpha", "eval_metric"} | \
        {"num_class", "sparse_threshold"}


@pytest.mark.parametrize("kind", ["memory", "dask"])
@pytest.mark.parametrize("fit_kwargs, error, match", [
    (dict(sample_weight_eval_set=[None]), ValueError, "without eval_set"),
    (dict(eval_set="pairs", sample_weight_eval_set=[None]), ValueError, "has 1 entries"),
    (dict(eval_set="tuple"), TypeError, "must be a list of"),
    (dict(eval_set="not a pair"), TypeError, r"eval_set\[0\] must be an \(X, y\) pair"),
    (dict(early_stopping=True), ValueError, "needs a validation set"),
])
def test_eval_set_checks_are_the_same_for_both_kinds(kind, fit_kwargs, error, match):
    fit_kwargs = dict(fit_kwargs)  # the parametrized dict is shared by both kinds
    X, y = regression_data(n=40)
    X, y = pd.DataFrame(X, columns=list("abcde")), pd.Series(y, name="y")
    if kind == "dask":
        X, y = _dask_frame(X), _dask_frame(y)
    pair = (X, y)
    eval_set = {"pairs": [pair, pair], "tuple": pair, "not a pair": [X]}.get(
        fit_kwargs.pop("eval_set", None))
    model = GBFlowRegressor(n_estimators=2, early_stopping_rounds=2 if
                            fit_kwargs.pop("early_stopping", False) else None)
    with pytest.raises(error, match=match):
        model.fit(X, y, eval_set=eval_set, **fit_kwargs)


def test_without_scikit_learn_the_estimators_name_the_extra(monkeypatch):
    import sys

    import gbflow
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)  # importing any of them now fails
    monkeypatch.delitem(sys.modules, "gbflow.sklearn", raising=False)
    monkeypatch.delattr(gbflow, "sklearn", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'gbflow\[sklearn\]'"):
        gbflow.GBFlowRegressor  # noqa: B018


# -- XGBoost's habits and scikit-learn's output API (F13) ----------------------------------
def test_set_output_pandas_in_a_pipeline():
    X, y = regression_data(n=200)
    frame = pd.DataFrame(X, columns=list("abcde"))
    pipe = make_pipeline(StandardScaler(), GBFlowRegressor(n_estimators=5)).set_output(
        transform="pandas")
    pipe.fit(frame, y)
    out = pipe.transform(frame)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["a", "b", "c", "d", "e", "prediction"]
    assert np.array_equal(out["prediction"].to_numpy(), pipe.predict(frame))
    model = GBFlowRegressor(n_estimators=3).set_output(transform="pandas").fit(X, y)
    assert list(model.transform(X).columns) == ["x0", "x1", "x2", "x3", "x4", "prediction"]


def test_save_load_apply_and_output_margin(tmp_path):
    X, y = three_class_data(n=300)
    model = GBFlowClassifier(n_estimators=6, max_depth=3).fit(X, y)
    model.save_model(tmp_path / "m.json")
    loaded = GBFlowClassifier().load_model(tmp_path / "m.json")
    assert loaded.booster_.to_json() == model.booster_.to_json()
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert list(loaded.classes_) == [0, 1, 2] and loaded.n_features_in_ == X.shape[1]
    assert np.array_equal(model.classes_[loaded.predict(X)], model.predict(X))
    leaves = model.apply(X)
    assert leaves.shape == (300, 18) and leaves.dtype == np.int32
    assert np.array_equal(leaves, model.get_booster().predict(X, pred_leaf=True))
    margins = model.predict(X, output_margin=True)
    assert margins.shape == (300, 3)
    assert np.array_equal(margins, model.get_booster().predict(X, output_margin=True))
    first = model.predict_proba(X, iteration_range=(0, 2))
    assert np.array_equal(first, model.get_booster().predict(X, iteration_range=(0, 2)))
    Xr, yr = regression_data(n=100)
    regressor = GBFlowRegressor(n_estimators=4).fit(Xr, yr)
    regressor.save_model(tmp_path / "r.json")
    again = GBFlowRegressor().load_model(tmp_path / "r.json")
    assert np.array_equal(again.predict(Xr), regressor.predict(Xr))
    assert not hasattr(again, "classes_")


def test_fit_verbose_and_n_jobs(caplog):
    import logging
    X, y = regression_data(n=200)
    with caplog.at_level(logging.INFO, logger="gbflow"):
        GBFlowRegressor(n_estimators=4).fit(X, y, eval_set=[(X, y)], verbose=True)
    assert [r.getMessage().split("]")[0] for r in caplog.records] == ["[1/4", "[2/4", "[3/4",
                                                                       "[4/4"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gbflow"):
        quiet = GBFlowRegressor(n_estimators=4, verbose=True).fit(X, y, eval_set=[(X, y)],
                                                                  verbose=False)
    assert caplog.records == []
    one_thread = GBFlowRegressor(n_estimators=4, n_jobs=1).fit(X, y)
    assert one_thread.get_booster().params.nthread == 1
    assert [t.to_dict() for t in one_thread.get_booster().trees] == \
        [t.to_dict() for t in quiet.get_booster().trees]


def test_the_classifier_takes_the_objective_its_classes_need():
    X, y = three_class_data(n=150)
    fitted = GBFlowClassifier(objective="multi:softprob", n_estimators=3).fit(X, y)
    assert np.array_equal(fitted.predict_proba(X),
                          GBFlowClassifier(n_estimators=3).fit(X, y).predict_proba(X))
    # a binary objective on more classes is multi:softprob, as XGBoost's wrapper makes it (its
    # own default objective is binary:logistic: its get_params() pass on)
    switched = GBFlowClassifier(objective="binary:logistic", n_estimators=3).fit(X, y)
    assert switched.get_booster().params.objective == "multi:softprob"
    assert np.array_equal(switched.predict_proba(X), fitted.predict_proba(X))


def test_a_loaded_estimator_keeps_a_frames_columns_whatever_their_names(tmp_path):
    """A frame whose columns happen to be f0, f1, ... trained the model: the loaded estimator
    checks columns by name as the fitted one does (it matched them by position), and a model
    file with a best round but no best score loads."""
    X, y = regression_data(n=300, n_features=3)
    frame = pd.DataFrame(X, columns=["f0", "f1", "f2"])
    model = GBFlowRegressor(n_estimators=5).fit(frame, y)
    model.save_model(tmp_path / "m.json")
    loaded = GBFlowRegressor().load_model(tmp_path / "m.json")
    assert list(loaded.feature_names_in_) == ["f0", "f1", "f2"]
    assert np.array_equal(loaded.predict(frame), model.predict(frame))
    with pytest.raises(ValueError, match="[Ff]eature names"):
        loaded.predict(frame[["f2", "f0", "f1"]])
    array = GBFlowRegressor(n_estimators=2).fit(X, y)  # an array's made-up names are no names
    array.save_model(tmp_path / "a.json")
    assert not hasattr(GBFlowRegressor().load_model(tmp_path / "a.json"), "feature_names_in_")
    booster = model.get_booster()
    booster.set_attr(best_iteration="3")
    booster.save_model(tmp_path / "best.json")
    best = GBFlowRegressor().load_model(tmp_path / "best.json")
    assert best.best_iteration_ == 3 and not hasattr(best, "best_score_")


def test_feature_names_out_checks_the_names_given():
    X, y = regression_data(n=200, n_features=3)
    model = GBFlowRegressor(n_estimators=2).fit(pd.DataFrame(X, columns=list("abc")), y)
    assert list(model.get_feature_names_out(["a", "b", "c"])) == ["a", "b", "c", "prediction"]
    with pytest.raises(ValueError, match="input_features is not equal to feature_names_in_"):
        model.get_feature_names_out(["p", "q", "r"])


def test_a_dask_eval_set_for_in_memory_training_is_refused():
    """Matched by position and gathered to the client before: now a clear error first."""
    dd = pytest.importorskip("dask.dataframe")
    X, y = regression_data(n=200, n_features=3)
    frame = pd.DataFrame(X, columns=list("abc"))
    with pytest.raises(TypeError, match=r"eval_set\[0\] is a Dask collection"):
        GBFlowRegressor(n_estimators=2).fit(
            frame, y, eval_set=[(dd.from_pandas(frame[list("cba")], npartitions=2),
                                 dd.from_pandas(pd.Series(y), npartitions=2))])


@pytest.mark.parametrize("column", [np.array(["u", "v"] * 100),
                                   pd.date_range("2020-01-01", periods=200)])
def test_a_non_numeric_column_is_named_at_fit_and_predict(column):
    """gbflow's dtype check runs before scikit-learn's (whose errors do not name the column)."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=200), "s": rng.normal(size=200)})
    y = (X["a"] > 0).astype(int)
    with pytest.raises(TypeError, match="non-numeric feature column\\(s\\) 's'"):
        GBFlowClassifier(n_estimators=2).fit(X.assign(s=column), y)
    model = GBFlowClassifier(n_estimators=2).fit(X, y)
    with pytest.raises(TypeError, match="non-numeric feature column\\(s\\) 's'"):
        model.predict(X.assign(s=column))
