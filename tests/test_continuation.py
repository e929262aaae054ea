"""Continued training (``xgb_model``): n rounds and then m more are the model of n + m rounds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow

PARAMS = {
    "regression": {"objective": "reg:squarederror", "max_depth": 4, "subsample": 0.8,
                   "colsample_bytree": 0.7, "seed": 3},
    "binary": {"objective": "binary:logistic", "max_depth": 3, "learning_rate": 0.2},
    "multiclass": {"objective": "multi:softprob", "num_class": 3, "max_depth": 3},
}


@pytest.mark.parametrize("task", list(PARAMS))
def test_n_rounds_then_m_more_equal_n_plus_m(device, task, tmp_path):
    """The same model file and the same evaluation values (the continued run's are the last
    ones of the single run), with row and feature sampling, weights and an evaluation set."""
    df = make_table(n_rows=3000, task=task, seed=31)
    df["w"] = np.linspace(0.5, 2.0, len(df))
    valid = make_table(n_rows=800, task=task, seed=32).assign(w=1.0)
    params = {**PARAMS[task], "device": device}
    kwargs = dict(label="y", weight="w", params=params, verbose=False)
    whole = gbflow.train(df, num_boost_round=9, evals=[(valid, "valid")], **kwargs)
    first = gbflow.train(df, num_boost_round=4, **kwargs)
    path = tmp_path / "first.json"
    first.save_model(path)
    for start in (first, str(path)):
        rest = gbflow.train(df, num_boost_round=5, evals=[(valid, "valid")], xgb_model=start,
                            **kwargs)
        assert rest.to_json() == whole.to_json()
        assert rest.num_boosted_rounds() == 9
        for metric, values in whole.evals_result["valid"].items():
            assert rest.evals_result["valid"][metric] == values[4:]
    assert first.num_boosted_rounds() == 4  # the model continued from is not changed


def test_continued_early_stopping_counts_the_models_rounds(caplog):
    """best_iteration and eval_rounds count the continued model's rounds (XGBoost's
    best_iteration does; its evals_result holds the continuation's values alone); the progress
    lines count the continuation's, as XGBoost's log lines do."""
    df = make_table(n_rows=2000, task="binary", seed=33)
    valid = make_table(n_rows=600, task="binary", seed=34)
    params = {"objective": "binary:logistic", "max_depth": 3, "learning_rate": 0.5}
    first = gbflow.train(df, label="y", params=params, num_boost_round=3, verbose=False)
    with caplog.at_level("INFO", logger="gbflow"):
        rest = gbflow.train(df, label="y", params=params, num_boost_round=60, verbose=1,
                            evals=[(valid, "valid")], early_stopping_rounds=3, xgb_model=first)
    local_best = int(np.argmin(rest.evals_result["valid"]["logloss"]))
    assert rest.best_iteration == 3 + local_best
    n_evaluated = len(rest.evals_result["valid"]["logloss"])
    assert rest.eval_rounds == list(range(3, 3 + n_evaluated))
    lines = [r.getMessage() for r in caplog.records if r.name == "gbflow"]
    assert lines[0].startswith("[ 1/60] valid-logloss:")
    assert f"best round {local_best + 1}," in lines[-1], lines[-1]
    # every round trained is kept; prediction stops at the best one
    assert rest.num_boosted_rounds() == 3 + len(rest.evals_result["valid"]["logloss"])
    assert rest.num_boosted_rounds() == rest.best_iteration + 1 + 3
    assert rest.trees[:3] == first.trees


def test_continued_training_may_change_the_learning_rate():
    df = make_table(n_rows=1500, seed=35)
    first = gbflow.train(df, label="y", params={"max_depth": 3}, num_boost_round=3,
                         verbose=False)
    rest = gbflow.train(df, label="y", params={"max_depth": 5, "learning_rate": 0.05},
                        num_boost_round=2, xgb_model=first, verbose=False)
    assert rest.num_boosted_rounds() == 5 and rest.params.learning_rate == 0.05
    X = df.drop(columns="y")
    # the first three trees' predictions plus the new ones'
    assert not np.allclose(rest.predict(X), first.predict(X))


@pytest.mark.parametrize("change,match", [
    ({"objective": "reg:pseudohubererror"}, "objective='reg:squarederror'"),
    ({"max_bin": 64}, "max_bin=256"),
])
def test_continuing_with_another_objective_or_max_bin_is_refused(change, match):
    df = make_table(n_rows=500, seed=36)
    first = gbflow.train(df, label="y", params={"max_depth": 2}, num_boost_round=2,
                         verbose=False)
    with pytest.raises(ValueError, match=match):
        gbflow.train(df, label="y", params={"max_depth": 2, **change}, num_boost_round=2,
                     xgb_model=first, verbose=False)


@pytest.mark.parametrize("given", [{}, None, [("eta", 0.1)], {"max_depth": 3}])
def test_continuing_takes_the_models_objective_and_max_bin_where_params_are_silent(given,
                                                                                   tmp_path):
    """As XGBoost, whose model files keep the objective: params that do not name the
    objective (or max_bin, feature_types) continue with the model's, its own parameters
    included, from a Booster or a file; the trees equal those of a run given them all.
    An objective that is named must still be the model's."""
    df = make_table(n_rows=600, seed=38)
    full = {"objective": "reg:pseudohubererror", "huber_slope": 2.0, "max_bin": 64,
            "max_depth": 3}
    first = gbflow.train(df, label="y", params=full, num_boost_round=2, verbose=False)
    first.save_model(str(tmp_path / "first.json"))
    for model in (first, str(tmp_path / "first.json")):
        rest = gbflow.train(df, label="y", params=given, num_boost_round=2, xgb_model=model,
                            verbose=False)
        assert (rest.params.objective, rest.params.huber_slope, rest.params.max_bin) == \
            ("reg:pseudohubererror", 2.0, 64)
    if given == {"max_depth": 3}:  # every parameter that shapes the trees: one run's trees
        whole = gbflow.train(df, label="y", params=full, num_boost_round=4, verbose=False)
        assert [t.to_dict() for t in rest.trees] == [t.to_dict() for t in whole.trees]
    with pytest.raises(ValueError, match="objective='reg:absoluteerror'"):
        gbflow.train(df, label="y", params={"objective": "reg:absoluteerror"},
                     num_boost_round=1, xgb_model=first, verbose=False)
    # naming the model's own objective keeps its settings, as XGBoost
    named = gbflow.train(df, label="y", params={"objective": "reg:pseudohubererror"},
                         num_boost_round=1, xgb_model=first, verbose=False)
    assert named.params.huber_slope == 2.0


def test_continuing_takes_the_objectives_own_settings():
    """count:poisson's max_delta_step (its hessian's factor) and multi:softprob's num_class
    come from the model too: the trees equal one run's."""
    df = make_table(n_rows=600, seed=39)
    counts = df.assign(y=np.round(np.exp(df["y"].clip(-2, 2))))
    poisson = {"objective": "count:poisson", "max_delta_step": 1.5, "max_depth": 3}
    first = gbflow.train(counts, label="y", params=poisson, num_boost_round=2, verbose=False)
    rest = gbflow.train(counts, label="y", params={"max_depth": 3}, num_boost_round=2,
                        xgb_model=first, verbose=False)
    whole = gbflow.train(counts, label="y", params=poisson, num_boost_round=4, verbose=False)
    assert rest.params.max_delta_step == 1.5
    assert [t.to_dict() for t in rest.trees] == [t.to_dict() for t in whole.trees]
    classes = df.assign(y=(df["y"] > df["y"].median()).astype(int) + (df["y"] > 1))
    three = gbflow.train(classes, label="y", params={"objective": "multi:softprob",
                                                     "num_class": 3}, num_boost_round=1,
                         verbose=False)
    more = gbflow.train(classes, label="y", params={"objective": "multi:softprob"},
                        num_boost_round=1, xgb_model=three, verbose=False)
    assert more.params.num_class == 3 and more.num_boosted_rounds() == 2


def test_continuing_on_other_features_is_refused():
    df = make_table(n_rows=500, seed=37)
    first = gbflow.train(df, label="y", params={"max_depth": 2}, num_boost_round=2,
                         verbose=False)
    renamed = df.rename(columns={df.columns[0]: "other"})
    with pytest.raises(ValueError, match="names and order must match.*position 0, 'x0' "
                                         "against 'other'"):
        gbflow.train(renamed, label="y", num_boost_round=1, xgb_model=first, verbose=False)
    fewer = df.drop(columns=df.columns[3])
    with pytest.raises(ValueError, match=f"{first.num_features()} features differ from the "
                                         f"training data's {first.num_features() - 1}"):
        gbflow.train(fewer, label="y", num_boost_round=1, xgb_model=first, verbose=False)
    with pytest.raises(TypeError, match="xgb_model must be a gbflow Booster"):
        gbflow.train(df, label="y", num_boost_round=1, xgb_model=3, verbose=False)
    xgb = pytest.importorskip("xgboost")
    theirs = xgb.train({}, xgb.DMatrix(df.drop(columns="y"), df["y"]), 1)
    with pytest.raises(TypeError, match="got an xgboost.Booster; gbflow continues its own"):
        gbflow.train(df, label="y", num_boost_round=1, xgb_model=theirs, verbose=False)
    with pytest.raises(TypeError, match="as in XGBoost's train\\(params, dtrain"):
        gbflow.train({"max_depth": 2}, df, 1)


def test_continued_training_on_workers_equals_in_process():
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    df = make_table(n_rows=1600, seed=38)
    params = {"max_depth": 3, "subsample": 0.9}
    whole = gbflow.train(df, label="y", params=params, num_boost_round=6, verbose=False)
    ddf = dd.from_pandas(df, npartitions=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        first = gbflow.train(ddf, label="y", params=params, num_boost_round=2, verbose=False,
                             client=client)
        rest = gbflow.train(ddf, label="y", params=params, num_boost_round=4, verbose=False,
                            client=client, xgb_model=first)
    assert [t.to_dict() for t in rest.trees] == [t.to_dict() for t in whole.trees]
    assert isinstance(rest.predict(df.drop(columns="y")), pd.Series)
