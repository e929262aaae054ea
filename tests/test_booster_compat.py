"""XGBoost's Booster methods on gbflow's Booster (``gbflow.booster_compat``): inplace_predict,
slicing, copy, get_fscore, checked against gbflow's own predictions and against XGBoost's
methods on the same model exported (``to_xgboost``)."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gbflow

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    X = pd.DataFrame(rng.normal(size=(600, 5)).astype(np.float32), columns=list("abcde"))
    X.iloc[rng.random(600) < 0.1, 1] = np.nan
    y = (X.a + np.nan_to_num(X.b) + rng.normal(size=600) > 0).astype(np.float64)
    classes = np.digitize(X.a + rng.normal(size=600) * 0.5, [-0.5, 0.5]).astype(np.float64)
    return X, y, classes


@pytest.fixture(scope="module")
def binary(data):
    X, y, _ = data
    return gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 3}, 8,
                        verbose=False)


@pytest.fixture(scope="module")
def softprob(data):
    X, _, classes = data
    return gbflow.train(X, classes, {"objective": "multi:softprob", "num_class": 3,
                                     "max_depth": 3}, 5, verbose=False)


def test_inplace_predict_is_predict_as_a_bare_array(data, binary, softprob):
    X, _, _ = data
    for model in (binary, softprob):
        for predict_type, margin in (("value", False), ("margin", True)):
            expected = np.asarray(model.predict(X.to_numpy(), output_margin=margin))
            got = model.inplace_predict(X, predict_type=predict_type)
            assert isinstance(got, np.ndarray)
            assert np.array_equal(got, expected)
            assert np.array_equal(model.inplace_predict(sp.csr_matrix(np.nan_to_num(X))),
                                  np.asarray(model.predict(sp.csr_matrix(np.nan_to_num(X)))))
    assert binary.inplace_predict(X).shape == (600,)
    assert binary.inplace_predict(X, strict_shape=True).shape == (600, 1)
    assert softprob.inplace_predict(X, strict_shape=True).shape == (600, 3)
    assert np.array_equal(binary.inplace_predict(X, iteration_range=(0, 3)),
                          binary.predict(X, iteration_range=(0, 3)).to_numpy())
    # XGBoost's own inplace_predict on the exported model: the same probabilities to float32
    theirs = binary.to_xgboost().inplace_predict(X.to_numpy())
    np.testing.assert_allclose(binary.inplace_predict(X), theirs, rtol=1e-5, atol=1e-6)


def test_inplace_predict_refuses_what_it_cannot_honour(data, binary):
    X, _, _ = data
    with pytest.raises(ValueError, match="predict_type must be 'value' or 'margin'"):
        binary.inplace_predict(X, predict_type="leaf")
    with pytest.raises(ValueError, match=r"missing=0.0 is not this model's missing value "
                                         r"\(NaN, the training's\)"):
        binary.inplace_predict(X, missing=0.0)
    zero_missing = gbflow.train(X.fillna(0.0), (X.a > 0).astype(float), {"missing": 0.0,
                                                                         "max_depth": 2}, 2,
                                verbose=False)
    assert np.array_equal(zero_missing.inplace_predict(X.fillna(0.0), missing=0.0),
                          zero_missing.predict(X.fillna(0.0)).to_numpy())


# (steps are left out: XGBoost 3.2 fails its own checks on some, e.g. [1:8:2], or on a
# multi-class model's [1:7:2])
@pytest.mark.parametrize("rounds", [slice(2, 5), slice(None, 3), slice(3, 5), 4])
def test_slicing_keeps_those_rounds_as_xgboost_slices(data, binary, softprob, rounds):
    """booster[a:b] is the model of rounds a..b-1 (every tree of each round), the same base
    margin: its margins are those of XGBoost's own slicing of the exported model."""
    X, _, _ = data
    matrix = xgb.DMatrix(X)
    for model in (binary, softprob):
        part = model[rounds]
        picked = range(model.num_boosted_rounds())[rounds] if isinstance(rounds, slice) \
            else [rounds]
        assert part.num_boosted_rounds() == len(picked)
        assert part.best_iteration is None
        theirs = model.to_xgboost()[rounds].predict(matrix, output_margin=True)
        ours = np.asarray(part.predict(X.to_numpy(), output_margin=True), dtype=np.float64)
        np.testing.assert_allclose(ours.reshape(theirs.shape), theirs, rtol=1e-5, atol=1e-5)
    contiguous = binary[2:5]
    assert np.array_equal(contiguous.predict(X, output_margin=True).to_numpy(),
                          binary.predict(X, output_margin=True, iteration_range=(2, 5))
                          .to_numpy())
    # Python's rules for negative and beyond-the-end bounds (XGBoost refuses them), any step
    assert binary[-3:].to_json() == binary[5:].to_json()
    assert binary[-1].to_json() == binary[7].to_json()
    assert binary[5:99].to_json() == binary[5:].to_json()
    stepped = binary[1::2]
    assert [t.to_dict() for t in stepped.trees] == \
        [t.to_dict() for r in (1, 3, 5, 7) for t in binary[r].trees]


def test_slicing_refuses_bad_rounds(binary):
    with pytest.raises(ValueError, match="the step must be positive"):
        binary[::-1]
    with pytest.raises(IndexError, match="round 8 is out of range: the model has 8"):
        binary[8]
    with pytest.raises(TypeError, match="sliced by rounds"):
        binary["a"]


def test_copy_and_get_fscore(data):
    X, y, _ = data
    stopped = gbflow.train(X.iloc[:400], y[:400], {"objective": "binary:logistic"}, 50,
                           evals=[((X.iloc[400:], y[400:]), "v")], early_stopping_rounds=3,
                           verbose=False)
    for copied in (stopped.copy(), copy.deepcopy(stopped)):
        assert copied is not stopped and copied.to_json() == stopped.to_json()
        assert copied.best_iteration == stopped.best_iteration
        assert np.array_equal(copied.predict(X).to_numpy(), stopped.predict(X).to_numpy())
    assert stopped.get_fscore() == stopped.get_score(importance_type="weight")
    assert stopped.get_fscore() == {k: v for k, v in
                                    stopped.to_xgboost().get_fscore().items()}
    with pytest.raises(ValueError, match="feature map files"):
        stopped.get_fscore("featmap.txt")


def test_a_model_trained_on_an_array_exports_without_made_up_names(tmp_path):
    """XGBoost's model of an array has no feature names, and refuses an array without names
    when its model has some: the export of gbflow's array model leaves out gbflow's made-up
    f0, f1, ... (a frame's names stay), so XGBoost predicts both the array and a frame."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((400, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.float32)
    from_array = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 2}, 3,
                              verbose=False)
    path = tmp_path / "array.json"
    from_array.save_model(str(path), format="xgboost")
    theirs = xgb.Booster(model_file=str(path))
    assert theirs.feature_names is None
    np.testing.assert_allclose(theirs.predict(xgb.DMatrix(X)), from_array.predict(X),
                               rtol=1e-6, atol=1e-7)
    # the model file, copies and slices keep knowing the names were made up
    from_array.save_model(str(tmp_path / "gbflow.json"))
    for kept in (gbflow.load_model(str(tmp_path / "gbflow.json")), from_array.copy(),
                 from_array[0:2]):
        assert kept.to_xgboost().feature_names is None
    # a frame's names stay, even f0, f1, ... (XGBoost then checks a frame's columns by name)
    for columns in (["u", "v", "w"], ["f0", "f1", "f2"]):
        frame = pd.DataFrame(X, columns=columns)
        named = gbflow.train(frame, y, {"objective": "binary:logistic", "max_depth": 2}, 3,
                             verbose=False)
        named.save_model(str(path), format="xgboost")
        assert xgb.Booster(model_file=str(path)).feature_names == columns
        with pytest.raises(ValueError, match="feature_names mismatch"):
            xgb.Booster(model_file=str(path)).predict(xgb.DMatrix(frame[columns[::-1]]))
    # an array with a categorical feature: no names, the types kept
    codes = np.column_stack([X[:, :2], rng.integers(0, 4, len(X))]).astype(np.float32)
    typed = gbflow.train(codes, y, {"objective": "binary:logistic", "max_depth": 2,
                                    "feature_types": ["q", "q", "c"]}, 3, verbose=False)
    typed.save_model(str(path), format="xgboost")
    theirs = xgb.Booster(model_file=str(path))
    assert theirs.feature_names is None and theirs.feature_types == ["float", "float", "c"]
    np.testing.assert_allclose(
        theirs.predict(xgb.DMatrix(codes, feature_types=["q", "q", "c"],
                                   enable_categorical=True)), typed.predict(codes),
        rtol=1e-6, atol=1e-7)


def test_attributes_as_xgboosts(tmp_path):
    """set_attr / attr / attributes: string attributes kept by the model file, copies, slices,
    continued training and the XGBoost export; best_iteration and best_score among them as
    text (set_attr sets the model's own); None deletes; bad values are refused first."""
    rng = np.random.default_rng(12)
    X = rng.standard_normal((300, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.float32)
    model = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 2}, 4,
                         verbose=False)
    assert model.attributes() == {} and model.attr("note") is None
    model.set_attr(note="first run", owner="me")
    model.set_attr(owner=None, best_iteration="2", best_score="0.25")
    assert model.attributes() == {"note": "first run", "best_iteration": "2",
                                  "best_score": "0.25"}
    assert model.best_iteration == 2 and model.best_score == 0.25
    path = tmp_path / "m.json"
    model.save_model(str(path))
    loaded = gbflow.load_model(str(path))
    assert loaded.attributes() == model.attributes()
    assert model.copy().attr("note") == model[1:3].attr("note") == "first run"
    more = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 2}, 2,
                        xgb_model=loaded, verbose=False)
    assert more.attr("note") == "first run"
    assert model.to_xgboost().attr("note") == "first run"
    for bad, match in ((dict(note=3), "must be a string"),
                       (dict(note="x", best_iteration="4"), "not a round"),
                       (dict(best_score="high"), "not a number")):
        with pytest.raises(ValueError, match=match):
            model.set_attr(**bad)
    assert model.attr("note") == "first run" and model.best_iteration == 2


@pytest.mark.parametrize("score", ["inf", "-inf", "nan"])
def test_a_best_score_without_a_json_number_is_saved_and_loaded(tmp_path, score):
    """A metric may be infinite or NaN at its best round (mape at a zero label, a custom
    metric): the model file holds it as text, as XGBoost's attributes do, and loads it back."""
    rng = np.random.default_rng(13)
    X = rng.standard_normal((300, 3)).astype(np.float32)
    y = X[:, 0] * 2.0
    model = gbflow.train(X, y, {"max_depth": 2}, 3, verbose=False)
    model.set_attr(best_iteration="1", best_score=score)
    model.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert str(loaded.best_score) == str(float(score)) and loaded.best_iteration == 1
    assert loaded.to_json() == model.to_json()
    y = np.where(np.arange(len(y)) < 5, 0.0, np.abs(y) + 1)  # mape is inf at a zero label
    trained = gbflow.train(X, y, {"max_depth": 2, "eval_metric": "mape"}, 5,
                           evals=[((X, y), "t")], early_stopping_rounds=2, verbose=False)
    assert trained.best_score == np.inf
    trained.save_model(tmp_path / "inf.json")
    assert gbflow.load_model(tmp_path / "inf.json").best_score == np.inf


@pytest.mark.parametrize("objective, scale", [("binary:logistic", 1.0), ("reg:logistic", 1.0),
                                              ("count:poisson", 3.0)])
def test_logistic_base_scores_and_models_without_trees_export_as_xgboosts(objective, scale):
    """A logistic base score is kept within [1e-6, 1 - 1e-6] before its logit, as XGBoost's
    (given, or a single-class label's mean: margin -13.8155 or +13.7452, XGBoost's float32
    logit of the bounds; not -+16.1); a model of no trees exports predicting as gbflow does."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    y = (X[:, 0] > 0.5) * scale
    data = xgb.DMatrix(X[:5])
    cases = ((y, {}), (np.zeros(1000), {}), (np.ones(1000), {}), (y, {"base_score": 0.0}),
             (y, {"base_score": 1.0}))
    for labels, extra in cases:
        if objective == "count:poisson" and (extra or labels.min() == labels.max()):
            continue
        params = {"objective": objective, "max_depth": 3, **extra}
        ours = gbflow.train(X, label=labels, params=params, num_boost_round=3, verbose=False)
        if objective != "count:poisson":
            # XGBoost estimates its base score at its first round and stores it as given (a
            # probability, clipped when used); its margin of that score, with no tree
            theirs = xgb.train(params, xgb.DMatrix(X, labels), 1)
            score = json.loads(theirs.save_config())["learner"]["learner_model_param"][
                "base_score"]
            score = float(json.loads(score)[0] if score.startswith("[") else score)
            start = xgb.train({**params, "base_score": score}, xgb.DMatrix(X, labels), 0)
            np.testing.assert_allclose(ours.base_margin,
                                       start.predict(data, output_margin=True)[:1], rtol=1e-6)
        for model in (ours, ours[1:1], ours[:0]):
            np.testing.assert_allclose(model.to_xgboost().predict(data), model.predict(X[:5]),
                                       rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("objective", ["binary:logistic", "multi:softprob"])
def test_predict_takes_xgboosts_keywords_and_strict_shapes(objective):
    """strict_shape gives XGBoost's shapes and values for every output kind; validate_features
    and training are taken; arrays of strings, complex or timedelta values are refused at
    prediction as at training."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 4)), rng.integers(0, 3, 300)
    params = {"objective": objective, "max_depth": 2}
    if objective == "multi:softprob":
        params["num_class"] = 3
    else:
        y = (y > 0).astype(float)
    booster = gbflow.train(X, y, params, 3, verbose=False)
    exported, data = booster.to_xgboost(), xgb.DMatrix(X[:5])
    for options in ({}, {"output_margin": True}, {"pred_leaf": True},
                    {"pred_contribs": True}, {"pred_interactions": True}):
        ours = booster.predict(X[:5], strict_shape=True, validate_features=True,
                               training=False, **options)
        theirs = exported.predict(data, strict_shape=True, **options)
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    frame = pd.DataFrame(X[:5], columns=booster.feature_names)
    assert isinstance(booster.predict(frame, strict_shape=True), np.ndarray)
    for bad in (X.astype(str), X + 1j, (X * 1e3).astype("int64").astype("m8[ns]")):
        with pytest.raises(TypeError, match="prediction data is an array of dtype"):
            booster.predict(bad)


def test_save_model_refuses_what_load_model_would(tmp_path, binary):
    """A model edited by hand into one that would not load is refused, and nothing written."""
    for edit in (lambda m: setattr(m, "best_iteration", 50),
                 lambda m: setattr(m, "feature_names", ["a"] * m.num_features())):
        model = binary.copy()
        edit(model)
        with pytest.raises(ValueError, match="save_model: this model would not load back"):
            model.save_model(tmp_path / "model.json")
    assert list(tmp_path.iterdir()) == []
    binary.save_model(tmp_path / "model.json")
    assert gbflow.load_model(tmp_path / "model.json").to_json() == binary.to_json()


def test_an_empty_booster_loads_a_model_as_xgboosts(tmp_path, data, binary):
    """XGBoost's ``Booster()`` then ``load_model(path)``, and ``Booster(model_file=path)``;
    an empty Booster says it holds no model."""
    X = data[0]
    path = tmp_path / "model.json"
    binary.save_model(path)
    empty = gbflow.Booster()
    assert "without a model" in repr(empty)
    # what describes a model answers for none, as XGBoost's empty Booster
    assert (empty.num_boosted_rounds(), empty.attributes(), empty.get_dump()) == (0, {}, [])
    empty.set_attr(note="kept until a model is loaded")
    with pytest.raises(ValueError, match="holds no model yet"):
        empty.to_xgboost()
    with pytest.raises(ValueError, match="holds no model yet"):
        empty.predict(X)
    with pytest.raises(ValueError, match="holds no model yet"):
        empty.save_model(tmp_path / "other.json")
    assert not (tmp_path / "other.json").exists()
    empty.load_model(path)
    assert np.array_equal(empty.predict(X), binary.predict(X))
    assert empty.to_json() == binary.to_json()
    assert gbflow.Booster(model_file=path).to_json() == binary.to_json()
    # XGBoost's positional Booster(params, cache, model_file)
    assert gbflow.Booster({"nthread": 2}, None, path).to_json() == binary.to_json()
    (tmp_path / "broken.json").write_text("{}")
    with pytest.raises(ValueError, match="not a gbflow model file"):
        gbflow.Booster().load_model(tmp_path / "broken.json")


def test_feature_types_as_xgboosts(data, binary):
    """None for numeric features given without types; "c"/"q" where some are categorical."""
    X, y, _ = data
    assert binary.feature_types is None
    framed = X.assign(colour=pd.Categorical(np.where(X.a > 0, "red", "blue")))
    model = gbflow.train(framed, y, {"objective": "binary:logistic", "max_depth": 2}, 2,
                         verbose=False)
    assert model.feature_types == ["q"] * X.shape[1] + ["c"]


def test_a_narrower_sparse_matrix_predicts_its_absent_columns_as_missing():
    """As XGBoost reads it: the columns past a sparse matrix's width hold no entry (a dense
    array of another width is still refused)."""
    import scipy.sparse as sp
    X = sp.random(300, 6, density=0.5, format="csr", random_state=0)
    y = (X.toarray()[:, 0] > 0.3).astype(float)
    booster = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 3}, 3,
                           verbose=False)
    narrow = X[:, :4]
    padded = sp.hstack([narrow, sp.csr_matrix((300, 2))]).tocsr()
    assert np.array_equal(booster.predict(narrow.tocsc()), booster.predict(padded))
    np.testing.assert_allclose(booster.predict(narrow),
                               booster.to_xgboost().predict(xgb.DMatrix(narrow)), rtol=1e-6)
    with pytest.raises(ValueError, match="has 4 columns but the model was trained on 6"):
        booster.predict(narrow.toarray())
