"""The scikit-learn estimators as XGBoost's wrapper: DataFrame feature names, its parameters and
**kwargs, None for defaults, the classifier's objectives, callable objectives, the ranker."""
import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, softmax
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import gbflow
from gbflow import GBFlowClassifier, GBFlowRanker, GBFlowRegressor
from gbflow.callback import TrainingCallback

FAST = dict(n_estimators=5, max_depth=3)


def regression_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, 2.0 * X[:, 0] + np.sin(X[:, 1]) + 0.1 * rng.normal(size=n)


def categorical_frame(n=300, seed=0, columns=(0, 1)):
    """A numeric column and a category column of strings that moves the target."""
    rng = np.random.default_rng(seed)
    c = rng.choice(list("vwxyz"), n)
    frame = pd.DataFrame({columns[0]: rng.normal(size=n), columns[1]: pd.Categorical(c)})
    y = frame[columns[0]].to_numpy() + np.select([c == "x", c == "y"], [3.0, -2.0], 0.0)
    return frame, y


# -- 1. DataFrames whose column names are not strings ------------------------------------------
def test_integer_column_names_are_feature_names_as_in_xgboost():
    X, y = regression_data()
    frame = pd.DataFrame(X)  # columns 0, 1, 2
    model = GBFlowRegressor(**FAST).fit(frame, y)
    # XGBoost's names: str(name)
    assert list(model.feature_names_in_) == ["0", "1", "2"]
    assert model.get_booster().feature_names == ["0", "1", "2"]
    named = GBFlowRegressor(**FAST).fit(frame.set_axis(["0", "1", "2"], axis=1), y)
    assert model.get_booster().to_json() == named.get_booster().to_json()
    np.testing.assert_array_equal(model.predict(frame), GBFlowRegressor(**FAST).fit(X, y)
                                  .predict(X))
    # reordered columns were predicted as if in training order; now refused, as XGBoost does
    for call in (model.predict, model.apply, model.transform):
        with pytest.raises(ValueError, match="feature names"):
            call(frame[[1, 0, 2]])
    with pytest.raises(ValueError, match="feature names"):
        GBFlowRegressor(**FAST).fit(frame, y, eval_set=[(frame[[2, 1, 0]], y)])
    out = model.transform(frame)  # the user's columns, the prediction appended
    assert list(out.columns) == [0, 1, 2, "prediction"]
    np.testing.assert_array_equal(out["prediction"].to_numpy(), model.predict(frame))


def test_category_columns_under_integer_names_stay_categorical():
    frame, y = categorical_frame()
    model = GBFlowRegressor(n_estimators=10, max_depth=3).fit(frame, y)
    same = GBFlowRegressor(n_estimators=10, max_depth=3).fit(frame.set_axis(["0", "1"], axis=1), y)
    assert model.get_booster().to_json() == same.get_booster().to_json()
    assert "1" in model.get_booster().categories  # not the category codes taken as numbers
    np.testing.assert_array_equal(model.predict(frame), same.predict(frame.set_axis(["0", "1"],
                                                                                    axis=1)))
    assert np.sqrt(np.mean((model.predict(frame) - y) ** 2)) < 0.5
    proba = GBFlowClassifier(**FAST).fit(frame, y > 0).predict_proba(frame)
    assert proba.shape == (len(frame), 2)


def test_mixed_column_names_train_and_names_that_collide_are_refused():
    X, y = regression_data()
    frame = pd.DataFrame(X, columns=["a", 1, "c"])
    model = GBFlowRegressor(**FAST).fit(frame, y)
    assert list(model.feature_names_in_) == ["a", "1", "c"]
    np.testing.assert_array_equal(model.predict(frame), GBFlowRegressor(**FAST).fit(X, y)
                                  .predict(X))
    with pytest.raises(ValueError, match=r"several columns named \['1'\]"):
        GBFlowRegressor(**FAST).fit(pd.DataFrame(X, columns=["a", 1, "1"]), y)


# -- 2. XGBoost's constructor parameters, **kwargs, fit(xgb_model=) ------------------------------
def test_missing_marks_a_value_as_missing():
    X, y = regression_data()
    X[::5, 0] = np.nan
    coded = np.where(np.isnan(X), -999.0, X)
    nan_model = GBFlowRegressor(**FAST).fit(X, y)
    model = GBFlowRegressor(**FAST, missing=-999.0).fit(coded, y)
    assert model.get_booster().params.missing == -999.0
    np.testing.assert_array_equal(model.predict(coded), nan_model.predict(X))


def test_scale_pos_weight_tree_method_and_kwargs_reach_training():
    X, y = regression_data()
    labels = (y > 0).astype(int)
    model = GBFlowClassifier(**FAST, scale_pos_weight=3.0, tree_method="hist").fit(X, labels)
    booster = gbflow.train(X, labels, dict(objective="binary:logistic", max_depth=3,
                                           scale_pos_weight=3.0), 5, verbose=False)
    assert model.get_booster().to_json() == booster.to_json()
    with pytest.raises(ValueError, match="tree_method='approx' is not supported"):
        GBFlowRegressor(**FAST, tree_method="approx").fit(X, y)

    # **kwargs: more of gbflow's/XGBoost's parameters, kept through get/set_params and clone
    huber = GBFlowRegressor(**FAST, objective="reg:pseudohubererror", huber_slope=0.5)
    assert huber.get_params()["huber_slope"] == 0.5 and clone(huber).kwargs == {"huber_slope": 0.5}
    assert huber.fit(X, y).get_booster().params.huber_slope == 0.5
    eta = GBFlowRegressor(**FAST).set_params(eta=0.1)  # an alias takes the default's place
    assert eta.fit(X, y).get_booster().params.learning_rate == 0.1
    with pytest.raises(ValueError, match="learning_rate=0.2 and eta=0.1, the same parameter"):
        GBFlowRegressor(**FAST, learning_rate=0.2, eta=0.1).fit(X, y)
    with pytest.raises(ValueError, match="unknown parameter 'max_dept'; did you mean"):
        GBFlowRegressor(**FAST).set_params(max_dept=2).fit(X, y)


def test_importance_type_chooses_what_feature_importances_measure():
    X, y = regression_data()
    model = GBFlowRegressor(**FAST, importance_type="weight").fit(X, y)
    splits = model.get_booster().get_score(importance_type="weight")
    counts = np.array([splits.get(f"f{j}", 0.0) for j in range(3)])
    np.testing.assert_allclose(model.feature_importances_, counts / counts.sum())
    assert not np.allclose(model.feature_importances_,
                           model.set_params(importance_type=None).feature_importances_)  # gain


def test_callbacks_run_in_fit():
    class Recorder(TrainingCallback):
        def __init__(self):
            self.epochs = []

        def after_iteration(self, model, epoch, evals_log):
            self.epochs.append(epoch)
            return epoch == 2  # stop after the third round

    X, y = regression_data()
    recorder = Recorder()
    model = GBFlowRegressor(**FAST, callbacks=[recorder]).fit(X, y)
    assert recorder.epochs == [0, 1, 2] and model.get_booster().num_boosted_rounds() == 3


def test_fit_continues_an_xgb_model():
    X, y = regression_data()
    whole = GBFlowRegressor(n_estimators=6, max_depth=3).fit(X, y)
    first = GBFlowRegressor(n_estimators=4, max_depth=3).fit(X, y)
    for given in (first, first.get_booster()):  # an estimator, as XGBoost's, or a Booster
        more = GBFlowRegressor(n_estimators=2, max_depth=3).fit(X, y, xgb_model=given)
        assert more.get_booster().num_boosted_rounds() == 6
        np.testing.assert_array_equal(more.predict(X), whole.predict(X))


# -- 3. None means the default ----------------------------------------------------------------
@pytest.mark.parametrize("kind", [GBFlowRegressor, GBFlowClassifier])
def test_none_for_any_parameter_means_its_default(kind):
    X, y = regression_data()
    y = y if kind is GBFlowRegressor else (y > 0)
    nones = {name: None for name in kind().get_params()}  # XGBoost's constructor defaults
    model = kind(**nones).fit(X, y)
    default = kind().fit(X, y)
    assert model.get_booster().num_boosted_rounds() == 100  # n_estimators None: 100
    assert model.get_booster().to_json() == default.get_booster().to_json()


# -- 4. the classifier's objectives -----------------------------------------------------------
def _classes(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    score = X[:, 0] + 0.3 * rng.normal(size=n)
    return X, np.where(score > 0, "b", "a"), np.array(["x", "y", "z"])[np.digitize(score,
                                                                                  [-0.5, 0.5])]


def test_multi_softmax_predicts_classes_and_softmax_probabilities():
    X, _, y = _classes()
    softmax_model = GBFlowClassifier(**FAST, objective="multi:softmax").fit(X, y)
    softprob_model = GBFlowClassifier(**FAST, objective="multi:softprob").fit(X, y)
    booster = softmax_model.get_booster()
    assert booster.params.objective == "multi:softmax" and booster.params.num_class == 3
    # XGBClassifier: predict is the booster's class, predict_proba the softmax of the margins
    np.testing.assert_array_equal(softmax_model.predict(X),
                                  softmax_model.classes_[booster.predict(X).astype(int)])
    np.testing.assert_allclose(softmax_model.predict_proba(X),
                               softmax(softmax_model.predict(X, output_margin=True), axis=1))
    # the same training as multi:softprob
    np.testing.assert_allclose(softmax_model.predict_proba(X), softprob_model.predict_proba(X))
    np.testing.assert_array_equal(softmax_model.predict(X), softprob_model.predict(X))
    np.testing.assert_array_equal(softmax_model.transform(X)[:, -1], softmax_model.predict(X))


def test_binary_objectives_and_multi_softprob_for_two_classes():
    X, y, _ = _classes()
    # logitraw's margin is the logit: the model of binary:logistic from the same start
    raw = GBFlowClassifier(**FAST, objective="binary:logitraw", base_score=0.0).fit(X, y)
    logistic = GBFlowClassifier(**FAST, base_score=0.5).fit(X, y)
    np.testing.assert_allclose(raw.predict_proba(X), logistic.predict_proba(X), rtol=1e-12)
    np.testing.assert_array_equal(raw.predict(X), logistic.predict(X))
    np.testing.assert_allclose(raw.predict_proba(X)[:, 1], expit(raw.predict(X,
                                                                             output_margin=True)))
    hinge = GBFlowClassifier(**FAST, objective="binary:hinge").fit(X, y)
    proba = hinge.predict_proba(X)  # XGBoost's: 0 or 1
    assert set(np.unique(proba)) <= {0.0, 1.0}
    np.testing.assert_array_equal(hinge.predict(X), hinge.classes_[proba[:, 1].astype(int)])
    assert np.mean(hinge.predict(X) == y) > 0.85
    two = GBFlowClassifier(**FAST, objective="multi:softprob").fit(X, y)
    assert two.get_booster().params.num_class == 2
    assert two.predict_proba(X).shape == (len(X), 2)
    np.testing.assert_array_equal(two.predict(X), two.classes_[two.predict_proba(X).argmax(1)])
    three = GBFlowClassifier(**FAST, objective="binary:hinge").fit(X, _classes()[2])
    assert three.get_booster().params.objective == "multi:softprob"  # XGBoost's switch
    with pytest.raises(ValueError, match="takes a classification objective"):
        GBFlowClassifier(**FAST, objective="reg:squarederror").fit(X, y)


def test_margin_objectives_on_dask_predict_as_in_memory():
    """multi:softmax and binary:logitraw, whose probabilities come from the margins, give on a
    Dask frame the labels, probabilities and transform they give in memory."""
    pytest.importorskip("distributed")
    dd = pytest.importorskip("dask.dataframe")
    X, y, three = _classes()
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    lazy = dd.from_pandas(frame, npartitions=2)
    for objective, labels in (("binary:logitraw", y), ("multi:softmax", three)):
        model = GBFlowClassifier(**FAST, objective=objective).fit(frame, labels)
        np.testing.assert_allclose(model.predict_proba(lazy).compute().to_numpy(),
                                   model.predict_proba(frame), rtol=1e-12, atol=0)
        np.testing.assert_array_equal(model.predict(lazy).compute().to_numpy(),
                                      model.predict(frame))
        np.testing.assert_array_equal(model.transform(lazy).compute()["prediction"].to_numpy(),
                                      model.predict(frame))


# -- 5. a callable objective ------------------------------------------------------------------
def test_a_callable_objective_trains_as_in_xgboosts_wrapper():
    X, y = regression_data()

    def squared(y_true, y_pred):
        return y_pred - y_true, np.ones_like(y_pred)

    custom = GBFlowRegressor(**FAST, objective=squared).fit(X, y)
    # XGBoost's: the start is base_score 0.5; the gradients are those of reg:squarederror
    builtin = GBFlowRegressor(**FAST, base_score=0.5).fit(X, y)
    np.testing.assert_allclose(custom.predict(X), builtin.predict(X), rtol=1e-6, atol=1e-6)

    _, labels, three = _classes(200)

    def logistic(y_true, y_pred, sample_weight=None):
        p = expit(y_pred)
        w = 1.0 if sample_weight is None else sample_weight
        return (p - y_true) * w, p * (1 - p) * w

    weights = np.linspace(0.5, 2.0, 200)
    clf = GBFlowClassifier(**FAST, objective=logistic).fit(X, labels, sample_weight=weights)
    assert clf.get_booster().params.objective == "binary:logistic"  # its link: probabilities
    reference = GBFlowClassifier(**FAST, base_score=0.5).fit(X, labels, sample_weight=weights)
    np.testing.assert_allclose(clf.predict_proba(X), reference.predict_proba(X), atol=1e-6)

    def multi(y_true, y_pred):  # (n, k) margins, as XGBoost's
        p = softmax(y_pred, axis=1)
        return p - np.eye(3)[y_true.astype(int)], 2.0 * p * (1.0 - p)

    proba = GBFlowClassifier(**FAST, objective=multi).fit(X, three).predict_proba(X)
    assert proba.shape == (200, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="no sample_weight parameter"):
        GBFlowRegressor(**FAST, objective=squared).fit(X, y, sample_weight=weights)


# -- 6. the ranker ----------------------------------------------------------------------------
def _queries(n=400, n_queries=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    qid = rng.integers(0, n_queries, n)
    y = np.clip(np.round(X[:, 0] + 0.5 * rng.normal(size=n) + 1.5), 0, 3)
    return X, y, qid


def test_ranker_drops_the_qid_column_and_takes_base_margins():
    X, y, qid = _queries()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(qid=qid)
    model = GBFlowRanker(**FAST).fit(frame, y)
    features = frame.drop(columns="qid")
    np.testing.assert_array_equal(model.predict(frame), model.predict(features))
    np.testing.assert_array_equal(model.apply(frame), model.apply(features))
    assert model.score(frame, y) == model.score(features, y, qid=qid)
    with pytest.raises(NotFittedError):
        GBFlowRanker().score(frame, y)

    margin = 0.3 * X[:, 1]
    eval_margin = margin[:100]
    ranker = GBFlowRanker(**FAST).fit(
        X, y, qid=qid, base_margin=margin, eval_set=[(X[:100], y[:100])], eval_qid=[qid[:100]],
        base_margin_eval_set=[eval_margin])
    booster = gbflow.train(X, y, dict(objective="rank:ndcg", max_depth=3), 5, qid=qid,
                           base_margin=margin, verbose=False,
                           evals=[((X[:100], y[:100], None, qid[:100], eval_margin),
                                   "validation_0")])
    assert ranker.get_booster().to_json() == booster.to_json()
    assert ranker.evals_result() == booster.evals_result


# -- 7. errors --------------------------------------------------------------------------------
def test_evals_result_without_eval_set_and_a_bad_n_estimators_are_named():
    X, y = regression_data()
    model = GBFlowRegressor(**FAST).fit(X, y)
    with pytest.raises(ValueError, match="no evaluation result: fit was not given an eval_set"):
        model.evals_result()
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="n_estimators must be a non-negative integer"):
            GBFlowRegressor(n_estimators=bad).fit(X, y)


def test_an_estimator_pickled_before_the_new_parameters_loads_with_their_defaults():
    """An estimator pickled by an earlier gbflow (without missing, scale_pos_weight,
    tree_method, importance_type, callbacks) unpickles with those at their defaults: its
    parameters, importances, clone and a new fit work."""
    import pickle
    X, y = np.random.default_rng(0).standard_normal((200, 3)), np.arange(200) % 2
    model = GBFlowClassifier(n_estimators=3, max_depth=2).fit(X, y)
    old = pickle.loads(pickle.dumps(model))
    for name in ("missing", "scale_pos_weight", "tree_method", "importance_type", "callbacks"):
        del old.__dict__[name]  # as an earlier version pickled it
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.get_params()["importance_type"] == GBFlowClassifier().importance_type
    assert np.array_equal(loaded.feature_importances_, model.feature_importances_)
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert clone(loaded).fit(X, y).n_features_in_ == 3
