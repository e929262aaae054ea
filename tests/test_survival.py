"""survival:cox and cox-nloglik: the partial likelihood's derivatives, XGBoost's gradients,
metric and models, and the same model however the rows are split (parts, workers, pages)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import same_model_everywhere

import gbflow
from gbflow import metrics
from gbflow.backend import get_backend
from gbflow.collective import LOCAL
from gbflow.params import make_params
from gbflow.survival import RiskSets


def _survival(n, seed=0, tied=False, n_features=6):
    """Integer features (both libraries bin them alike) and Cox labels: |label| the time of an
    event (> 0) or of censoring (< 0), hazards driven by two features. tied: times rounded to
    a tenth (many rows share a time)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 30, size=(n, n_features)).astype(np.float64)
    hazard = np.exp((X[:, 0] - 15) / 8 - 0.5 * (X[:, 1] - 15) / 8)
    event_time = rng.exponential(1 / hazard)
    censor_time = rng.exponential(2.0, size=n)
    time = np.minimum(event_time, censor_time)
    if tied:
        time = np.round(time, 1) + 0.1
    return X, np.where(event_time < censor_time, time, -time)


def _host(a):
    return np.asarray(a.get() if hasattr(a, "get") else a)


def _partial_likelihood(m, y):
    """Breslow's negative log partial likelihood: sum over events of log R(t) - m."""
    t, event = np.abs(y), y > 0
    p = np.exp(m)
    return sum(np.log(p[t >= t[i]].sum()) - m[i] for i in np.flatnonzero(event))


def test_gradients_are_the_partial_likelihoods_derivatives(device):
    """With tied times (Breslow): gradient = dL/dm, hessian = d2L/dm2 (the diagonal), by
    central differences, on the device."""
    xp = get_backend(device).xp
    rng = np.random.default_rng(1)
    y = np.round(rng.uniform(0.1, 3.0, 60), 1) * np.where(rng.random(60) < 0.7, 1, -1)
    m = rng.normal(size=60)
    g, h = make_params({"objective": "survival:cox"}).loss.gradients(
        xp, xp.asarray(m[:, None]), xp.asarray(y), None)
    g, h = _host(g)[:, 0], _host(h)[:, 0]
    assert g.dtype == np.float32 and h.dtype == np.float32
    step = 1e-4
    for k in range(60):
        up, down = m.copy(), m.copy()
        up[k] += step
        down[k] -= step
        here = _partial_likelihood(m, y)
        d1 = (_partial_likelihood(up, y) - _partial_likelihood(down, y)) / (2 * step)
        d2 = (_partial_likelihood(up, y) - 2 * here + _partial_likelihood(down, y)) / step**2
        assert g[k] == pytest.approx(d1, rel=1e-4, abs=1e-5)
        assert h[k] == pytest.approx(d2, rel=2e-3, abs=1e-4)


def _xgboost_gradients(m, y, w):
    """XGBoost's CoxRegression rule, walked row by row in time order (stable): the risk-set
    sum drops the rows of earlier times when the time moves on; an event adds its 1/R and
    1/R**2 when reached."""
    order = np.argsort(np.abs(y), kind="stable")
    p = np.exp(m)
    remaining, passed, last_p, last_t = p.sum(), 0.0, 0.0, 0.0
    before = before_sq = 0.0
    g, h = np.zeros(len(y)), np.zeros(len(y))
    for i in order:
        passed += last_p
        if last_t < abs(y[i]):
            remaining, passed = remaining - passed, 0.0
        if y[i] > 0:
            before += 1 / remaining
            before_sq += 1 / remaining**2
        g[i] = (p[i] * before - (y[i] > 0)) * w[i]
        h[i] = (p[i] * before - p[i] ** 2 * before_sq) * w[i]
        last_t, last_p = abs(y[i]), p[i]
    return g, h


def test_without_tied_times_the_gradients_are_xgboosts(device):
    xp = get_backend(device).xp
    X, y = _survival(400, seed=2)
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(y))
    m = np.random.default_rng(3).normal(size=len(y))
    g, h = make_params({"objective": "survival:cox"}).loss.gradients(
        xp, xp.asarray(m[:, None]), xp.asarray(y), xp.asarray(w))
    expected_g, expected_h = _xgboost_gradients(m, y, w)
    np.testing.assert_allclose(_host(g)[:, 0], expected_g, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(_host(h)[:, 0], expected_h, rtol=1e-5, atol=1e-7)


def test_cox_nloglik_is_xgboosts():
    """XGBoost's value of its own predictions, with tied times and censored rows."""
    xgb = pytest.importorskip("xgboost")
    for tied in (False, True):
        X, y = _survival(3000, seed=4, tied=tied)
        data = xgb.DMatrix(X, label=y)
        history = {}
        model = xgb.train({"objective": "survival:cox", "max_depth": 3}, data, 5,
                          evals=[(data, "train")], evals_result=history, verbose_eval=False)
        ours = metrics.evaluate("cox-nloglik", y, model.predict(data).astype(np.float64))
        assert ours == pytest.approx(history["train"]["cox-nloglik"][-1], rel=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_cox_model_is_xgboosts(device, weighted):
    """Without tied times, the same trees as XGBoost's hist: the same metric at every round
    (float32 rounding), leaves and predictions (hazard ratios, with XGBoost's base score);
    held out no worse. Weighted rows too."""
    xgb = pytest.importorskip("xgboost")
    X, y = _survival(6000, seed=5)
    Xt, yt = _survival(2000, seed=6)
    w = np.random.default_rng(5).uniform(0.5, 2.0, len(y)) if weighted else None
    params = {"objective": "survival:cox", "max_depth": 4, "learning_rate": 0.1,
              "max_bin": 256}
    booster = gbflow.train(X, y, {**params, "device": device}, 40, weight=w,
                           evals=[((X, y, w), "train"), ((Xt, yt), "test")], verbose=False)
    history = {}
    data, test = xgb.DMatrix(X, label=y, weight=w), xgb.DMatrix(Xt, label=yt)
    theirs = xgb.train({**params, "tree_method": "hist", "nthread": 2}, data, 40,
                       evals=[(data, "train"), (test, "test")], evals_result=history,
                       verbose_eval=False)
    for name in ("train", "test"):
        np.testing.assert_allclose(booster.evals_result[name]["cox-nloglik"],
                                   history[name]["cox-nloglik"], rtol=1e-6)
    assert np.array_equal(booster.predict(Xt, pred_leaf=True), theirs.predict(
        test, pred_leaf=True))
    np.testing.assert_allclose(booster.predict(Xt), theirs.predict(test), rtol=1e-4)
    assert booster.evals_result["test"]["cox-nloglik"][-1] <= \
        history["test"]["cox-nloglik"][-1] * 1.01


def test_tied_times_stay_close_to_xgboost():
    """With tied times XGBoost's rule depends on row order within a time (see
    ``survival.Cox``), gbflow's does not: the models differ a little, not in quality."""
    xgb = pytest.importorskip("xgboost")
    X, y = _survival(6000, seed=7, tied=True)
    Xt, yt = _survival(2000, seed=8, tied=True)
    params = {"objective": "survival:cox", "max_depth": 4, "learning_rate": 0.1}
    booster = gbflow.train(X, y, params, 40, evals=[((Xt, yt), "test")], verbose=False)
    history = {}
    theirs = xgb.train({**params, "tree_method": "hist", "nthread": 2},
                       xgb.DMatrix(X, label=y), 40,
                       evals=[(xgb.DMatrix(Xt, label=yt), "test")], evals_result=history,
                       verbose_eval=False)
    assert booster.evals_result["test"]["cox-nloglik"][-1] <= \
        history["test"]["cox-nloglik"][-1] * 1.01
    assert np.corrcoef(np.log(booster.predict(Xt)),
                       np.log(theirs.predict(xgb.DMatrix(Xt))))[0, 1] > 0.99


def test_one_model_however_the_rows_are_split(device):
    """Risk sets span every part: 1 or 5 parts (one of a single row), the sparse store and
    (CPU) the NumPy twins give the same model; with subsampling and tied times."""
    X, y = _survival(3000, seed=9, tied=True)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    df["y"] = y
    same_model_everywhere(device, df, {"objective": "survival:cox", "max_depth": 4,
                                       "subsample": 0.8, "device": device})


def test_risk_set_sums_are_exact_for_any_split():
    """The risk-set sums of hazards spanning many orders of magnitude: the same bits for any
    split into parts, and within a few ulps of an exact (fractions) sum."""
    from fractions import Fraction
    rng = np.random.default_rng(10)
    y = np.round(rng.uniform(0.1, 5.0, 500), 1)
    hazards = np.exp(rng.uniform(-30, 30, 500))
    cpu = get_backend("cpu")
    whole = RiskSets(cpu, [y], LOCAL).totals([hazards])
    cut = [0, 1, 200, 333, 500]
    split = RiskSets(cpu, [y[a:b] for a, b in zip(cut[:-1], cut[1:])], LOCAL).totals(
        [hazards[a:b] for a, b in zip(cut[:-1], cut[1:])])
    assert np.array_equal(whole, split)
    times = np.unique(y)
    exact = [float(sum(Fraction(h) for h, t in zip(hazards, y) if t >= s)) for s in times]
    # the grid is 2**-62 of the count times the largest hazard: the tail sums keep that
    # absolute precision
    np.testing.assert_allclose(whole, exact, rtol=1e-12, atol=hazards.max() * 500 * 2.0**-60)


def _xgboost_base_score(X, y, w=None):
    import json
    xgb = pytest.importorskip("xgboost")
    model = xgb.train({"objective": "survival:cox", "tree_method": "hist"},
                      xgb.DMatrix(X, label=y, weight=w), 1)
    return float(json.loads(model.save_config())["learner"]["learner_model_param"][
        "base_score"].strip("[]"))


def test_predictions_are_hazard_ratios_and_the_base_score_is_xgboosts():
    """XGBoost's default start: one Newton step from margin 0 (exact sums: the same on
    several parts); with weights it is not 0. A given base_score is a hazard ratio."""
    X, y = _survival(3000, seed=11)
    w = np.random.default_rng(11).uniform(0.5, 2.0, len(y))
    loss = make_params({"objective": "survival:cox"}).loss
    for weights in (None, w):
        ours = loss.base_margin(np, [y], None if weights is None else [weights], None)[0]
        assert np.exp(ours) == pytest.approx(_xgboost_base_score(X, y, weights), rel=1e-6)
        parts = np.split(y, [7, 1000])
        assert loss.base_margin(np, parts, None if weights is None else np.split(
            weights, [7, 1000]), None)[0] == ours
    assert abs(loss.base_margin(np, [y], None, None)[0]) < 1e-8  # float32 gradients' rounding
    assert abs(loss.base_margin(np, [y], [w], None)[0]) > 1e-4
    booster = gbflow.train(X, y, {"objective": "survival:cox", "max_depth": 3}, 5, weight=w,
                           verbose=False)
    margin = np.asarray(booster.predict(X, output_margin=True))
    np.testing.assert_allclose(booster.predict(X), np.exp(margin))
    given = gbflow.train(X, y, {"objective": "survival:cox", "max_depth": 3,
                                "base_score": 2.0}, 1, verbose=False)
    assert given.base_margin.tolist() == [np.log(2.0)]
    assert make_params({"objective": "survival:cox"}).metrics == ("cox-nloglik",)


def test_the_training_labels_are_ranked_once(monkeypatch):
    """The default base score and the training loop share one ``RiskSets`` of the training
    labels (a sort of every row; collective calls on several processes)."""
    import gbflow.survival as survival
    made = []
    real = survival.RiskSets.__init__

    def counted(self, backend, labels, collective):
        made.append(len(labels))
        real(self, backend, labels, collective)

    monkeypatch.setattr(survival.RiskSets, "__init__", counted)
    X, y = _survival(500, seed=3)
    booster = gbflow.train(X, y, {"objective": "survival:cox", "max_depth": 2,
                                  "eval_metric": "rmse"}, 3, verbose=False)
    assert len(made) == 1 and booster.num_boosted_rounds() == 3
    import pickle
    again = pickle.loads(pickle.dumps(booster))  # the objective keeps no risk sets after it
    np.testing.assert_array_equal(again.predict(X), booster.predict(X))


def test_overflowing_hazards_stop_training_with_a_clear_error():
    X, y = _survival(500, seed=15)
    with pytest.raises(FloatingPointError, match="gradients are not finite .* round 0"):
        gbflow.train(X, y, {"objective": "survival:cox"}, 2, verbose=False,
                     base_margin=np.where(np.arange(500) == 3, 800.0, 0.0))
    from gbflow.backend import get_backend as backend_of
    risk = RiskSets(backend_of("cpu"), [y], LOCAL)
    assert np.isinf(risk.totals([np.full(500, np.inf)])).all()


def test_continued_training_is_one_uninterrupted_run():
    X, y = _survival(2000, seed=16, tied=True)
    params = {"objective": "survival:cox", "max_depth": 3}
    whole = gbflow.train(X, y, params, 6, verbose=False)
    first = gbflow.train(X, y, params, 3, verbose=False)
    resumed = gbflow.train(X, y, params, 3, verbose=False, xgb_model=first)
    assert [t.to_dict() for t in resumed.trees] == [t.to_dict() for t in whole.trees]


def test_early_stopping_watches_cox_nloglik():
    X, y = _survival(3000, seed=17)
    Xt, yt = _survival(1000, seed=18)
    booster = gbflow.train(X, y, {"objective": "survival:cox", "max_depth": 6,
                                  "learning_rate": 0.5}, 200, evals=[((Xt, yt), "test")],
                           early_stopping_rounds=5, verbose=False)
    history = booster.evals_result["test"]["cox-nloglik"]
    assert len(history) < 200
    assert booster.best_score == min(history)
    assert booster.best_iteration == int(np.argmin(history))


@pytest.mark.parametrize("params,match", [
    ({"base_score": 0.0}, "base_score must be > 0 for survival:cox"),
    ({"objective": "multi:softprob", "num_class": 3, "eval_metric": "cox-nloglik"},
     "cox-nloglik"),
])
def test_bad_input_is_refused_before_training(params, match):
    X, y = _survival(200, seed=12)
    if params.get("num_class"):
        y = np.abs(y) // 1 % 3
    with pytest.raises(ValueError, match=match):
        gbflow.train(X, y, {"objective": "survival:cox", **params}, 2,
                     evals=[((X, y), "train")], verbose=False)


def test_the_scikit_learn_regressor_takes_it():
    from gbflow.sklearn import GBFlowRegressor
    X, y = _survival(2000, seed=13)
    model = GBFlowRegressor(objective="survival:cox", n_estimators=5, max_depth=3).fit(X, y)
    direct = gbflow.train(X, y, {"objective": "survival:cox", "max_depth": 3, "seed": 0}, 5,
                          verbose=False)
    assert np.array_equal(model.predict(X), np.asarray(direct.predict(X)))


def test_workers_give_the_in_process_model_and_metric(device):
    """Two workers (on the device): the risk sets and cox-nloglik span both workers' rows
    through the collective, which carries host arrays only; tied times, weights."""
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    import dask
    X, y = _survival(3000, seed=14, tied=True)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    df["y"], df["w"] = y, np.random.default_rng(14).uniform(0.5, 2.0, len(y))
    parts = [df.iloc[a:b] for a, b in ((0, 1000), (1000, 1700), (1700, 3000))]
    ddf = dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=parts[0].iloc[:0],
                          verify_meta=False)
    params = {"objective": "survival:cox", "max_depth": 4, "device": device}
    kwargs = dict(label="y", weight="w", params=params, num_boost_round=6, verbose=False)
    expected = gbflow.train(df, evals=[(df, "train")], **kwargs)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        got = gbflow.train(ddf, evals=[(ddf, "train")], client=client, **kwargs)
    assert len(got.worker_report) == 2
    assert got.to_json() == expected.to_json()
    assert got.evals_result == expected.evals_result
