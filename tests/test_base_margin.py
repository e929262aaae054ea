"""base_margin: each row's starting margin (XGBoost's), in training, evaluation and prediction."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow
from gbflow import boosting, inputs
from gbflow.backend import get_backend
from gbflow.params import make_params


def _exposure_table(n_rows=20_000, seed=0):
    """Poisson counts over a log-exposure offset: the textbook use of a base margin."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, 3)).astype(np.float32)
    offset = np.log(rng.uniform(0.2, 5.0, size=n_rows))
    y = rng.poisson(np.exp(offset + 0.6 * X[:, 0] - 0.3 * X[:, 1] ** 2))
    return pd.DataFrame(X, columns=list("abc")).assign(y=y, offset=offset)


def test_a_column_or_an_array_gives_the_same_model_and_training_margins(device):
    df = _exposure_table(4000)
    params = {"objective": "count:poisson", "max_depth": 4, "device": device}
    by_name = gbflow.train(df, label="y", params=params, num_boost_round=10,
                           base_margin="offset", verbose=False)
    by_array = gbflow.train(df.drop(columns="offset"), label="y", params=params,
                            num_boost_round=10, base_margin=df["offset"].to_numpy(),
                            verbose=False)
    assert by_name.to_json() == by_array.to_json()
    assert "offset" not in by_name.feature_names
    part = inputs.load(df, "y", base_margin="offset")
    fitted = boosting.fit(get_backend(device), [part], make_params(params), 10, verbose=False,
                          keep_training_margins=True)
    margins = np.asarray(fitted.predict(df, output_margin=True, base_margin="offset"))
    assert np.array_equal(margins, fitted.training_margins[0][:, 0])
    assert not np.array_equal(margins, np.asarray(fitted.predict(df.drop(columns="offset"),
                                                                 output_margin=True)))


def test_poisson_with_exposure_as_xgboost():
    xgb = pytest.importorskip("xgboost")
    df = _exposure_table()
    X, y, offset = df[list("abc")].to_numpy(), df["y"].to_numpy(), df["offset"].to_numpy()
    params = {"objective": "count:poisson", "max_depth": 4, "learning_rate": 0.3}
    ours = np.asarray(gbflow.train(df, label="y", params=params, num_boost_round=30,
                                   base_margin="offset", verbose=False)
                      .predict(df, base_margin="offset"))
    theirs = xgb.train({**params, "tree_method": "hist"},
                       xgb.DMatrix(X, y, base_margin=offset), 30).predict(
                           xgb.DMatrix(X, base_margin=offset))

    def deviance(mu):
        return 2 * np.mean(np.where(y > 0, y * np.log(np.maximum(y, 1) / mu), 0) - (y - mu))
    assert deviance(ours) <= deviance(theirs) * 1.01
    without = np.asarray(gbflow.train(df.drop(columns="offset"), label="y", params=params,
                                      num_boost_round=30, verbose=False).predict(df[list("abc")]))
    assert deviance(ours) < deviance(without)  # the offset carries information


def test_a_constant_base_margin_is_a_base_score():
    df = make_table(seed=3)
    with_score = gbflow.train(df, label="y", params={"base_score": 2.5}, num_boost_round=5,
                              verbose=False)
    with_margin = gbflow.train(df, label="y", num_boost_round=5, verbose=False,
                               base_margin=np.full(len(df), 2.5))
    assert [t.to_dict() for t in with_score.trees] == [t.to_dict() for t in with_margin.trees]


def test_evaluation_sets_start_from_their_own_column():
    df, valid = _exposure_table(6000, seed=1), _exposure_table(2000, seed=2)
    booster = gbflow.train(df, label="y", params={"objective": "count:poisson",
                                                  "eval_metric": "poisson-nloglik"},
                           num_boost_round=8, base_margin="offset",
                           evals=[(valid, "valid")], verbose=False)
    mu = np.asarray(booster.predict(valid, base_margin="offset"))
    y = valid["y"].to_numpy()
    from scipy.special import gammaln
    expected = np.mean(mu - y * np.log(mu) + gammaln(y + 1))
    assert np.isclose(booster.evals_result["valid"]["poisson-nloglik"][-1], expected,
                      rtol=1e-6)
    with pytest.raises(KeyError, match="base_margin column 'offset' is not in evals"):
        gbflow.train(df, label="y", num_boost_round=1, base_margin="offset",
                     evals=[(valid.drop(columns="offset"), "valid")], verbose=False)


def test_one_margin_per_class():
    df = make_table(task="multiclass", seed=4)
    rng = np.random.default_rng(0)
    offsets = rng.normal(size=(len(df), 3))
    params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 3}
    booster = gbflow.train(df, label="y", params=params, num_boost_round=5, verbose=False,
                           base_margin=offsets)
    margins = np.asarray(booster.predict(df.drop(columns="y"), output_margin=True,
                                         base_margin=offsets))
    plain = np.asarray(booster.predict(df.drop(columns="y"), output_margin=True))
    assert np.allclose(margins - offsets, plain - booster.base_margin[None, :])
    with pytest.raises(ValueError, match="1 value\\(s\\) per row; this training has 3"):
        gbflow.train(df, label="y", params=params, num_boost_round=1, verbose=False,
                     base_margin=offsets[:, 0])


def test_continued_training_keeps_the_rows_margins():
    df = _exposure_table(4000, seed=5)
    params = {"objective": "count:poisson", "max_depth": 3}
    whole = gbflow.train(df, label="y", params=params, num_boost_round=10,
                         base_margin="offset", verbose=False)
    first = gbflow.train(df, label="y", params=params, num_boost_round=4,
                         base_margin="offset", verbose=False)
    rest = gbflow.train(df, label="y", params=params, num_boost_round=6,
                        base_margin="offset", verbose=False, xgb_model=first)
    assert rest.to_json() == whole.to_json()


@pytest.mark.parametrize("margin,error,match", [
    (np.full(100, np.nan), ValueError, "base_margin of training data has 100 NaN value"),
    (np.zeros(99), ValueError, "base_margin has 99 values but training data has 100 rows"),
    ("nope", KeyError, "base_margin column 'nope' is not in training data"),
    ("y", ValueError, "base_margin names the column 'y', which is the label"),
])
def test_bad_base_margins_are_refused_by_name(margin, error, match):
    df = make_table(n_rows=100)
    with pytest.raises(error, match=match):
        gbflow.train(df, label="y", num_boost_round=1, verbose=False, base_margin=margin)


def test_explanations_and_dask_arrays_refuse_a_base_margin():
    dd = pytest.importorskip("dask.dataframe")
    df = make_table(n_rows=200)
    booster = gbflow.train(df, label="y", num_boost_round=2, verbose=False)
    with pytest.raises(ValueError, match="explanations"):
        booster.predict(df, pred_contribs=True, base_margin=np.zeros(len(df)))
    ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(TypeError, match="base_margin must name one of its columns"):
        booster.predict(ddf, base_margin=np.zeros(len(df)))
    with pytest.raises(TypeError, match="base_margin must name one of its columns"):
        gbflow.train(ddf, label="y", num_boost_round=1, base_margin=np.zeros(len(df)),
                     verbose=False)
    with pytest.raises(KeyError, match="base_margin column 'nope' is not in prediction data"):
        booster.predict(ddf, base_margin="nope")


def test_the_estimators_take_a_base_margin():
    from gbflow.sklearn import GBFlowClassifier, GBFlowRegressor
    df = _exposure_table(4000, seed=6)
    X, y, offset = df[list("abc")], df["y"], df["offset"].to_numpy()
    model = GBFlowRegressor(objective="count:poisson", n_estimators=10).fit(X, y,
                                                                             base_margin=offset)
    direct = gbflow.train(df, label="y", params={"objective": "count:poisson", "seed": 0},
                          num_boost_round=10, base_margin="offset", verbose=False)
    assert np.array_equal(model.predict(X, base_margin=offset),
                          np.asarray(direct.predict(df, base_margin="offset")))
    labels = (y > 1).to_numpy()
    classifier = GBFlowClassifier(n_estimators=5).fit(X, labels, base_margin=offset)
    p = classifier.predict_proba(X, base_margin=offset)[:, 1]
    margin = classifier.predict(X, output_margin=True, base_margin=offset)
    assert np.allclose(p, 1 / (1 + np.exp(-margin)))
    assert (classifier.predict(X, base_margin=offset) == (p > 0.5)).all()


def test_evaluation_tuples_and_the_estimators_eval_sets_take_their_own(device):
    """(X, y, weight, qid, base_margin) evaluation tuples and ``base_margin_eval_set``: the
    values of a frame's base_margin column; without one, a tuple starts from the base score."""
    from gbflow.sklearn import GBFlowRegressor
    df, valid = _exposure_table(4000, seed=7), _exposure_table(1500, seed=8)
    X, Xv = df[list("abc")].to_numpy(), valid[list("abc")].to_numpy()
    offset, offset_v = df["offset"].to_numpy(), valid["offset"].to_numpy()
    params = {"objective": "count:poisson", "max_depth": 4, "device": device}
    kwargs = dict(params=params, num_boost_round=8, verbose=False)
    by_column = gbflow.train(df, label="y", base_margin="offset", evals=[(valid, "v")],
                             **kwargs)
    by_tuple = gbflow.train(X, df["y"].to_numpy(), base_margin=offset, evals=[
        ((Xv, valid["y"].to_numpy(), None, None, offset_v), "v")], **kwargs)
    assert by_tuple.evals_result == by_column.evals_result
    plain = gbflow.train(X, df["y"].to_numpy(), base_margin=offset, evals=[
        ((Xv, valid["y"].to_numpy()), "v")], **kwargs)
    assert plain.evals_result != by_column.evals_result
    model = GBFlowRegressor(objective="count:poisson", n_estimators=8, max_depth=4,
                            device=device).fit(X, df["y"], base_margin=offset,
                                               eval_set=[(Xv, valid["y"])],
                                               base_margin_eval_set=[offset_v])
    assert model.evals_result_ == {"validation_0": by_column.evals_result["v"]}
    with pytest.raises(ValueError, match="base_margin_eval_set has 2 entries but eval_set has 1"):
        GBFlowRegressor().fit(X, df["y"], eval_set=[(Xv, valid["y"])],
                              base_margin_eval_set=[offset_v, offset_v])
    with pytest.raises(TypeError, match=r"\(X, y, weight, qid, base_margin\)"):
        gbflow.train(X, df["y"].to_numpy(), evals=[((Xv, 1, 2, 3, 4, 5), "v")], **kwargs)
