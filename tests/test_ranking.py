"""Learning to rank: query groups, LambdaMART's gradients and the ranking metrics, as XGBoost's."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import gbflow
from gbflow import metrics, ranking
from gbflow.backend import get_backend, numpy_kernels, to_host

OBJECTIVES = [("ndcg", "rank:ndcg"), ("pairwise", "rank:pairwise"), ("map", "rank:map")]


def _queries(n_rows=4000, n_queries=200, n_features=6, seed=0, shuffled=True):
    """Graded relevance (0..4) of documents in queries of uneven sizes, rows in any order."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features))
    qid = rng.integers(0, n_queries, n_rows) if shuffled else \
        np.sort(rng.integers(0, n_queries, n_rows))
    signal = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] - 0.3 * X[:, 3] ** 2
    y = np.clip(np.round(signal + rng.normal(scale=0.7, size=n_rows) + 1.5), 0, 4)
    return X, y, qid


def _label(kind, y):
    return (y > 2).astype(np.float64) if kind == "map" else y


def test_segment_sums_twin(kernels):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(500, 7)) * 10.0 ** rng.integers(-8, 8, size=(500, 7))
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 500), 40, replace=False)),
                             [500]]).astype(np.int64)
    expected = numpy_kernels.segment_sums(values, starts, np.empty((41, 7)))
    got = kernels.segment_sums(values, starts, np.empty((41, 7)))
    assert np.array_equal(got, expected)
    assert np.allclose(expected[3], values[starts[3]:starts[4]].sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize("kind", [numpy_kernels.RANK_NDCG, numpy_kernels.RANK_MAP,
                                  numpy_kernels.RANK_PAIRWISE])
@pytest.mark.parametrize("score_normalize", [True, False])
def test_lambda_pairs_twin(kernels, kind, score_normalize):
    rng = np.random.default_rng(kind)
    starts = np.concatenate([[0], np.cumsum(rng.integers(1, 40, 30))]).astype(np.int64)
    n, n_queries, top_k = int(starts[-1]), 30, 8
    query_of = np.repeat(np.arange(n_queries), np.diff(starts)).astype(np.int64)
    y = rng.integers(0, 2 if kind == numpy_kernels.RANK_MAP else 4, n).astype(np.float64)
    s = -np.sort(-np.round(rng.normal(size=n), 1))  # (any order: the kernel takes it as is)
    s[starts[3]:starts[4]] = 0.5  # a query of equal scores
    e = np.exp(s - s[starts[:-1]][query_of])
    e[5] = 0.0  # an underflowed pair
    relevant = np.cumsum(y)
    acc = np.cumsum(y / (np.arange(n) + 1.0))
    args = (y, s, e, 2.0 ** y - 1.0, 1.0 / np.log2(np.arange(40) + 2.0),
            rng.uniform(0.0, 1.0, n_queries), relevant, acc, starts, query_of, kind, top_k,
            score_normalize)
    own, top = numpy_kernels.lambda_pairs(*args, np.empty((n, 3)), np.empty((n_queries, 8, 2)))
    got_own, got_top = kernels.lambda_pairs(*args, np.empty((n, 3)),
                                            np.empty((n_queries, 8, 2)))
    assert np.array_equal(got_own, own) and np.array_equal(got_top, top)
    assert np.abs(own[:, 0]).max() > 0 and (top[np.diff(starts) <= 3, 3] == 0).all()


@pytest.mark.parametrize("kind,objective", OBJECTIVES)
def test_gradients_are_xgboosts(kind, objective):
    """XGBoost's -g/h of each row, read from a one-round tree whose leaves hold one row each
    (the feature is the row number, no regularisation): ours agree to float32 rounding."""
    rng = np.random.default_rng(3)
    n = 200
    qid = np.sort(rng.integers(0, 8, n))
    y = _label(kind, rng.integers(0, 4, n).astype(np.float64))
    margin = rng.normal(size=n)
    X = np.arange(n, dtype=np.float64)[:, None]
    booster = xgb.train({"objective": objective, "tree_method": "hist", "max_depth": 12,
                         "min_child_weight": 0, "lambda": 0, "eta": 1, "max_bin": 512,
                         "base_score": 0}, xgb.DMatrix(X, y, qid=qid, base_margin=margin), 1)
    theirs = booster.predict(xgb.DMatrix(X), output_margin=True)
    leaves = booster.predict(xgb.DMatrix(X), pred_leaf=True)
    ids, counts = np.unique(leaves, return_counts=True)
    alone = np.isin(leaves, ids[counts == 1])
    assert alone.sum() > 30
    g, h = ranking.lambda_gradients(np, margin, y, ranking.QueryGroups(np, qid),
                                    ranking.LambdaParams(kind))
    ours = -g[:, 0] / h[:, 0]
    assert np.allclose(ours[alone], theirs[alone], rtol=1e-5)
    assert np.allclose(g.sum(), 0.0, atol=1e-5)  # a query's pushes cancel


@pytest.mark.parametrize("kind", ["ndcg", "pairwise", "map"])
def test_gradients_depend_on_each_query_alone(device, kind):
    """Bit for bit the same gradients with the queries in one part or split over two, and with
    the rows in another order (distinct scores: no ties to break by row order)."""
    xp = get_backend(device).xp
    X, y, qid = _queries(3000)
    y = _label(kind, y)
    score = np.random.default_rng(1).normal(size=len(y))
    params = ranking.LambdaParams(kind, top_k=8)

    def gradients(rows):
        q = ranking.QueryGroups(xp, xp.asarray(qid[rows]))
        g, h = ranking.lambda_gradients(xp, xp.asarray(score[rows]), xp.asarray(y[rows]), q,
                                        params)
        return to_host(g)[:, 0], to_host(h)[:, 0]

    whole_g, whole_h = gradients(np.arange(len(y)))
    odd = np.flatnonzero(qid % 2 == 1)
    even = np.flatnonzero(qid % 2 == 0)
    for rows in (odd, even):
        g, h = gradients(rows)
        assert np.array_equal(g, whole_g[rows]) and np.array_equal(h, whole_h[rows])
    order = np.random.default_rng(2).permutation(len(y))
    g, h = gradients(order)
    assert np.array_equal(g, whole_g[order]) and np.array_equal(h, whole_h[order])
    assert np.abs(whole_g).max() > 0


def test_query_weights_scale_each_querys_gradients():
    X, y, qid = _queries(2000, 50)
    score = np.random.default_rng(1).normal(size=len(y))
    per_query = np.random.default_rng(2).uniform(0.5, 3.0, 50)
    plain = ranking.QueryGroups(np, qid)
    weighted = ranking.QueryGroups(np, qid, per_query[qid])
    weighted.set_norm(plain.n_queries / per_query[plain.ids].sum())
    params = ranking.LambdaParams("ndcg")
    g0, h0 = ranking.lambda_gradients(np, score, y, plain, params)
    g1, h1 = ranking.lambda_gradients(np, score, y, weighted, params)
    factor = per_query[qid] * plain.n_queries / per_query[plain.ids].sum()
    assert np.allclose(g1[:, 0], g0[:, 0] * factor, rtol=1e-6, atol=1e-12)
    assert np.allclose(h1[:, 0], h0[:, 0] * factor, rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="rows of query .* have different weights"):
        ranking.QueryGroups(np, qid, np.arange(len(qid), dtype=np.float64))


@pytest.mark.parametrize("name", ["ndcg", "ndcg@5", "ndcg@5-", "ndcg-", "map", "map@3",
                                  "map@3-", "pre@3", "pre", "ndcg@100", "map@50"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_queries", [40, 4])
def test_metrics_are_xgboosts(name, weighted, n_queries):
    """The value XGBoost's metric gives the same scores (given as its base margins), on
    queries of about 15 rows and of about 150 (past the 32 places a name without '@'
    counts)."""
    rng = np.random.default_rng(0)
    n = 600
    qid = np.sort(rng.integers(0, n_queries, n))
    y = rng.integers(0, 4, n).astype(np.float64)
    if not (weighted and name.startswith("ndcg")):  # (see the next test)
        y[qid == 3] = 0  # a query without a relevant document
    if not name.startswith("ndcg"):
        y = (y > 1).astype(np.float64)
    score = np.round(rng.normal(size=n), 1)  # ties too
    ids = np.unique(qid)
    # float32 weights: XGBoost's are
    group_weight = rng.uniform(0.5, 2.0, len(ids)).astype(np.float32).astype(np.float64) \
        if weighted else None
    data = xgb.DMatrix(np.zeros((n, 1)), y, qid=qid, base_margin=score)
    if weighted:
        data.set_weight(group_weight)
    booster = xgb.train({"objective": "rank:pairwise", "eval_metric": name, "base_score": 0},
                        data, 0)
    theirs = float(booster.eval(data).split(":")[1])
    weight = None if group_weight is None else group_weight[np.searchsorted(ids, qid)]
    ours = metrics.evaluate(name, y, score, weight, qid=qid)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name", ["ndcg", "ndcg-", "ndcg@3"])
def test_weighted_ndcg_is_a_weighted_mean_of_the_queries(name):
    """Queries without relevant documents weigh like the others (XGBoost adds their 1
    unweighted, and stops when its weighted NDCG passes 1)."""
    rng = np.random.default_rng(0)
    n = 600
    qid = np.sort(rng.integers(0, 60, n))
    y = rng.integers(0, 4, n).astype(np.float64)
    y[qid % 3 == 0] = 0
    score = rng.normal(size=n)
    ids = np.unique(qid)
    query_weight = rng.uniform(0.1, 0.5, len(ids))
    each = np.array([metrics.evaluate(name, y[qid == q], score[qid == q], qid=qid[qid == q])
                     for q in ids])
    weighted = metrics.evaluate(name, y, score, query_weight[np.searchsorted(ids, qid)],
                                qid=qid)
    assert weighted == pytest.approx(np.sum(each * query_weight) / query_weight.sum(),
                                     rel=1e-12)
    assert 0 < weighted <= 1


def test_metric_is_the_same_on_any_split():
    X, y, qid = _queries(3000)
    score = np.random.default_rng(1).normal(size=len(y))
    whole = metrics.evaluate("ndcg@10", y, score, qid=qid)
    order = np.random.default_rng(2).permutation(len(y))
    assert metrics.evaluate("ndcg@10", y[order], score[order], qid=qid[order]) == whole


def _xgb_ndcg(objective, X, y, qid, Xv, yv, qv, params, rounds):
    o, ov = np.argsort(qid, kind="stable"), np.argsort(qv, kind="stable")
    result = {}
    xgb.train({"objective": objective, "tree_method": "hist", **params},
              xgb.DMatrix(X[o], y[o], qid=qid[o]), rounds,
              evals=[(xgb.DMatrix(Xv[ov], yv[ov], qid=qv[ov]), "valid")],
              evals_result=result, verbose_eval=False)
    return result["valid"]


@pytest.mark.parametrize("kind,objective", OBJECTIVES)
def test_held_out_metric_as_good_as_xgboosts(device, kind, objective):
    X, y, qid = _queries(8000, 400)
    Xv, yv, qv = _queries(4000, 200, seed=1)
    y, yv = _label(kind, y), _label(kind, yv)
    params = {"max_depth": 5, "learning_rate": 0.1}
    booster = gbflow.train(X, y, {"objective": objective, "device": device, **params}, 60,
                           evals=[((Xv, yv, None, qv), "valid")], qid=qid, verbose=False)
    name = booster.params.loss.default_metric
    ours = booster.evals_result["valid"][name][-1]
    theirs = _xgb_ndcg(objective, X, y, qid, Xv, yv, qv, params, 60)[name][-1]
    assert ours >= theirs * 0.99
    predicted = booster.predict(Xv)
    assert metrics.evaluate(name, yv, predicted, qid=qv) == pytest.approx(ours, rel=1e-12)


def test_qid_column_and_array_give_one_model_and_rows_need_not_be_sorted(device):
    X, y, qid = _queries(3000)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(y=y, q=qid)
    params = {"objective": "rank:ndcg", "device": device, "max_depth": 4}
    by_name = gbflow.train(df, "y", params, 8, qid="q", evals=[(df, "train")], verbose=False)
    by_array = gbflow.train(df.drop(columns=["q", "y"]), y, params, 8, qid=qid, verbose=False)
    assert [t.to_dict() for t in by_name.trees] == [t.to_dict() for t in by_array.trees]
    assert "q" not in by_name.feature_names
    assert by_name.evals_result["train"]["ndcg@32"][-1] > by_name.evals_result["train"][
        "ndcg@32"][0]


def test_early_stopping_maximises_ndcg():
    X, y, qid = _queries(4000)
    Xv, yv, qv = _queries(2000, 100, seed=1)
    booster = gbflow.train(X, y, {"objective": "rank:ndcg", "device": "cpu"}, 200,
                           evals=[((Xv, yv, None, qv), "valid")], qid=qid,
                           early_stopping_rounds=5, verbose=False)
    history = booster.evals_result["valid"]["ndcg@32"]
    assert booster.best_score == max(history)
    assert len(history) < 200


def test_dask_partitions_at_query_boundaries_give_the_in_memory_model():
    dd = pytest.importorskip("dask.dataframe")
    X, y, qid = _queries(3000, shuffled=False)
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(y=y, q=qid)
    params = {"objective": "rank:pairwise", "device": "cpu", "max_depth": 4}
    in_memory = gbflow.train(df, "y", params, 6, qid="q", evals=[(df, "t")], verbose=False)
    ddf = dd.from_pandas(df.set_index("q", drop=False), npartitions=3).reset_index(drop=True)
    assert ddf.npartitions == 3
    on_dask = gbflow.train(ddf, "y", params, 6, qid="q", evals=[(ddf, "t")], verbose=False)
    assert on_dask.to_json() == in_memory.to_json()
    assert on_dask.evals_result == in_memory.evals_result
    split = dd.from_pandas(df, npartitions=3, sort=False)
    with pytest.raises(ValueError, match="lie in more than one partition"):
        gbflow.train(split, "y", params, 2, qid="q", verbose=False)


@pytest.mark.parametrize("params,kwargs,error,match", [
    ({"objective": "rank:ndcg"}, {}, ValueError, "give train\\(..., qid=\\)"),
    ({"objective": "rank:ndcg"}, {"qid": np.full(100, 0.5)}, ValueError, "not whole numbers"),
    ({"objective": "rank:map"}, {"qid": np.zeros(100)}, ValueError, "binary relevance"),
    ({"objective": "rank:ndcg", "lambdarank_pair_method": "mean"}, {"qid": np.zeros(100)},
     ValueError, "'mean' .* not supported"),
    ({"objective": "rank:ndcg", "lambdarank_unbiased": True}, {"qid": np.zeros(100)},
     ValueError, "lambdarank_unbiased"),
    ({"objective": "reg:squarederror", "lambdarank_num_pair_per_sample": 4}, {}, ValueError,
     "only goes with the ranking objectives"),
    ({"objective": "rank:ndcg"}, {"qid": np.zeros(100), "weight": np.arange(100.0)},
     ValueError, "ranking weights belong to queries"),
])
def test_bad_ranking_inputs_are_refused_by_name(params, kwargs, error, match):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 3)), rng.integers(0, 3, 100).astype(np.float64)
    with pytest.raises(error, match=match):
        gbflow.train(X, y, {**params, "device": "cpu"}, 2, verbose=False, **kwargs)


def test_ndcg_labels_beyond_31_are_refused_unless_the_gain_is_the_label():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 3)), rng.uniform(0, 40, 100)
    with pytest.raises(ValueError, match="whole relevance degrees 0..31"):
        gbflow.train(X, y, {"objective": "rank:ndcg"}, 2, qid=np.zeros(100), verbose=False)
    gbflow.train(X, y, {"objective": "rank:pairwise", "ndcg_exp_gain": False,
                        "device": "cpu"}, 2, qid=np.zeros(100), verbose=False)


def test_an_evaluation_set_without_query_ids_is_refused():
    X, y, qid = _queries(500, 20)
    with pytest.raises(ValueError, match="evaluation set 'valid' has no query ids"):
        gbflow.train(X, y, {"objective": "rank:ndcg", "device": "cpu"}, 2,
                     evals=[((X.copy(), y), "valid")], qid=qid, verbose=False)


def test_ranker_estimator():
    pytest.importorskip("sklearn")
    X, y, qid = _queries(3000)
    Xv, yv, qv = _queries(1000, 50, seed=1)
    names = [f"f{i}" for i in range(X.shape[1])]
    frame = pd.DataFrame(X, columns=names).assign(qid=qid)
    valid_frame = pd.DataFrame(Xv, columns=names)
    model = gbflow.GBFlowRanker(n_estimators=20, device="cpu").fit(
        frame, y, eval_set=[(valid_frame.assign(qid=qv), yv)])
    assert list(model.feature_names_in_) == names
    valid = model.evals_result_["validation_0"]["ndcg@32"]
    assert model.score(valid_frame, yv, qid=qv) == pytest.approx(valid[-1], rel=1e-12)
    same = gbflow.GBFlowRanker(n_estimators=20, device="cpu").fit(X, y, qid=qid)
    assert np.array_equal(same.predict(Xv), model.predict(valid_frame))
    per_query = np.random.default_rng(3).uniform(0.5, 2.0, len(np.unique(qid)))
    weighted = gbflow.GBFlowRanker(n_estimators=5, device="cpu").fit(
        X, y, qid=qid, sample_weight=per_query)
    rows = gbflow.GBFlowRanker(n_estimators=5, device="cpu").fit(
        X, y, qid=qid, sample_weight=per_query[np.searchsorted(np.unique(qid), qid)])
    assert weighted.get_booster().to_json() == rows.get_booster().to_json()
    with pytest.raises(ValueError, match="ranking objective"):
        gbflow.GBFlowRanker(objective="reg:squarederror").fit(X, y, qid=qid)
    # transform, as predict, takes X's "qid" column, not a feature: left out of the output,
    # as get_feature_names_out says (set_output's frame takes those names)
    out = model.transform(valid_frame.assign(qid=qv))
    assert list(out.columns) == names + ["prediction"] == list(model.get_feature_names_out())
    assert np.array_equal(out["prediction"].to_numpy(), model.predict(valid_frame))
    framed = model.set_output(transform="pandas").transform(valid_frame.assign(qid=qv))
    assert list(framed.columns) == names + ["prediction"]
    with pytest.raises(ValueError, match="eval_qid was given without eval_set"):
        gbflow.GBFlowRanker(n_estimators=2).fit(X, y, qid=qid, eval_qid=[qv])


def test_ranker_takes_xgboosts_group_sizes_once_and_one_row_queries_weigh_by_row(monkeypatch):
    """group/eval_group (each query's row count) give the qid model; the queries are given
    once (qid, group or a "qid" column: XGBoost refuses both); where every query has one row,
    the weights are the rows' (unsorted ids); a pair count k past the largest query is
    capped: the same model, no (queries, k) arrays."""
    pytest.importorskip("sklearn")
    X, y, qid = _queries(3000, shuffled=False)
    sizes = np.bincount(qid)
    sizes = sizes[sizes > 0]
    by_group = gbflow.GBFlowRanker(n_estimators=5, device="cpu").fit(
        X, y, group=sizes, eval_set=[(X, y)], eval_group=[sizes])
    by_qid = gbflow.GBFlowRanker(n_estimators=5, device="cpu").fit(
        X, y, qid=qid, eval_set=[(X, y)], eval_qid=[qid])
    assert by_group.get_booster().to_json() == by_qid.get_booster().to_json()
    assert by_group.evals_result() == by_qid.evals_result()
    frame = pd.DataFrame(X).assign(qid=qid)
    with pytest.raises(ValueError, match="give the queries once.*qid and a 'qid' column"):
        gbflow.GBFlowRanker(n_estimators=2).fit(frame, y, qid=qid)
    with pytest.raises(ValueError, match="group of X must hold each query's row count"):
        gbflow.GBFlowRanker(n_estimators=2).fit(X, y, group=sizes[:-1])
    with pytest.raises(ValueError, match="eval_group was given without eval_set"):
        gbflow.GBFlowRanker(n_estimators=2).fit(X, y, qid=qid, eval_group=[sizes])
    ten = X[:10]
    per_group = gbflow.GBFlowRanker(n_estimators=2, device="cpu").fit(
        ten, y[:10], group=[4, 6], sample_weight=[1.0, 3.0])
    by_rows = gbflow.GBFlowRanker(n_estimators=2, device="cpu").fit(
        ten, y[:10], group=[4, 6], sample_weight=np.repeat([1.0, 3.0], [4, 6]))
    assert per_group.get_booster().to_json() == by_rows.get_booster().to_json()
    # (XGBoost counts empty queries' weights in its normalisation: refused with weights)
    with pytest.raises(ValueError, match="group sizes of 0"):
        gbflow.GBFlowRanker(n_estimators=2).fit(ten, y[:10], group=[4, 0, 6],
                                                sample_weight=[1.0, 2.0, 3.0])
    assert gbflow.GBFlowRanker(n_estimators=2, device="cpu").fit(
        ten, y[:10], group=[4, 0, 6]).get_booster().num_boosted_rounds() == 2
    single = np.array([2, 0, 1, 3])
    rows = gbflow.sklearn_ranker._row_weights(np.array([10.0, 20.0, 30.0, 40.0]), single, "w")
    assert list(rows) == [10.0, 20.0, 30.0, 40.0]
    params = {"objective": "rank:ndcg", "max_depth": 3}
    small = gbflow.train(X, y, {**params, "lambdarank_num_pair_per_sample": 4}, 3, qid=qid,
                         verbose=False)
    shapes, pairs = [], ranking.lambda_pairs

    def spy(xp, *args):
        shapes.append(args[-1].shape)  # the (queries, k, 2) top-place sums
        return pairs(xp, *args)
    monkeypatch.setattr(ranking, "lambda_pairs", spy)
    every_pair = gbflow.train(X, y, {**params, "lambdarank_num_pair_per_sample": 2**20}, 3,
                              qid=qid, verbose=False)
    assert {shape[1] for shape in shapes} == {int(sizes.max())}
    wide = gbflow.train(X, y, {**params, "lambdarank_num_pair_per_sample": int(sizes.max())},
                        3, qid=qid, verbose=False)
    assert [t.to_dict() for t in every_pair.trees] == [t.to_dict() for t in wide.trees]
    assert [t.to_dict() for t in small.trees] != [t.to_dict() for t in wide.trees]


def test_exported_to_xgboost_it_ranks_and_evaluates_alike(tmp_path):
    X, y, qid = _queries(2000, 80, n_features=4, shuffled=False)
    booster = gbflow.train(X, y, {"objective": "rank:ndcg", "device": "cpu",
                                  "lambdarank_num_pair_per_sample": 8}, 5, qid=qid,
                           evals=[((X, y, None, qid), "train")], verbose=False)
    booster.save_model(tmp_path / "model.json", format="xgboost")
    theirs = xgb.Booster(model_file=str(tmp_path / "model.json"))
    config = json.loads(theirs.save_config())["learner"]["objective"]
    assert config["name"] == "rank:ndcg"
    assert config["lambdarank_param"]["lambdarank_num_pair_per_sample"] == "8"
    data = xgb.DMatrix(X, y, qid=qid, feature_names=booster.feature_names)
    assert np.allclose(theirs.predict(data, output_margin=True), booster.predict(X), atol=1e-5)
    value = float(theirs.eval(data).split("eval-ndcg@8:")[1])
    assert value == pytest.approx(booster.evals_result["train"]["ndcg@8"][-1], rel=1e-6)


def test_the_objective_made_without_parameters_takes_the_defaults():
    from gbflow.ranking import DEFAULT_TOP_K, LambdaRank
    objective = LambdaRank("rank:map")
    assert objective.default_metric == f"map@{DEFAULT_TOP_K}"
    assert objective.lambda_params.kind == "map"


@pytest.mark.parametrize("name", ["ndcg", "map@10", "pre@20", "ndcg@5-"])
def test_ranking_metrics_without_query_ids_rank_all_rows_as_one_query(name):
    """Without qid XGBoost ranks all of a set's rows as one query (precision at the top of a
    classifier's scores, say): so do gbflow's metrics, in process and in training where the
    set is one part (test_dask: over several workers' partitions it is refused). A ranking
    objective's evaluation set still needs its ids: there their absence is a slip."""
    rng = np.random.default_rng(5)
    n = 400
    y = (rng.random(n) < 0.3).astype(np.float64)
    score = np.round(rng.normal(size=n) + y, 1)  # ties too
    data = xgb.DMatrix(np.zeros((n, 1)), y, base_margin=score)
    booster = xgb.train({"objective": "rank:pairwise", "eval_metric": name, "base_score": 0},
                        data, 0)
    theirs = float(booster.eval(data).split(":")[1])
    assert metrics.evaluate(name, y, score) == pytest.approx(theirs, rel=1e-12, abs=1e-15)
    assert metrics.evaluate(name, y, score) == metrics.evaluate(name, y, score,
                                                                qid=np.zeros(n))
    X = rng.normal(size=(n, 3)) + y[:, None]
    params = {"objective": "binary:logistic", "eval_metric": name, "max_depth": 3}
    trained = gbflow.train(X[:300], y[:300], params, 4, verbose=False,
                           evals=[((X[300:], y[300:]), "valid"), ((X[:300], y[:300]), "train")])
    for part, rows in [("valid", slice(300, None)), ("train", slice(None, 300))]:
        assert trained.evals_result[part][name][-1] == metrics.evaluate(
            name, y[rows], np.asarray(trained.predict(X[rows])))
    # the training data's own queries are not needed when it is not evaluated: its row
    # weights, which queries could not take (a query's rows share one weight), are fine
    weighted = gbflow.train(X[:300], y[:300], params, 2, weight=rng.uniform(0.5, 2.0, 300),
                            evals=[((X[300:], y[300:]), "valid")], verbose=False)
    assert weighted.evals_result["valid"][name][-1] == metrics.evaluate(
        name, y[300:], np.asarray(weighted.predict(X[300:])))
    with pytest.raises(ValueError, match="no qid: its rows are one query, which takes one "
                                         "weight"):  # XGBoost refuses row weights there too
        gbflow.train(X[:300], y[:300], params, 2, verbose=False,
                     evals=[((X[300:], y[300:], rng.uniform(0.5, 2.0, 100)), "valid")])
    with pytest.raises(ValueError, match="needs binary relevance labels, 0 or 1"):
        metrics.evaluate("pre@5" if name.startswith("ndcg") else name, 2 * y, score)
    with pytest.raises(ValueError, match="evaluation set 'valid' has no query ids"):
        gbflow.train(X[:300], y[:300], {"objective": "rank:ndcg"}, 2, qid=np.zeros(300),
                     evals=[((X[300:], y[300:]), "valid")], verbose=False)  # ranking: a slip


@pytest.mark.parametrize("name,labels", [
    ("ndcg", [0, 1.5, 2]),  # a relevance degree that is not whole, under the exponential gain
    ("ndcg@5", [0, 1, 32]),  # 2**32 - 1 overflows the gain XGBoost keeps
    ("pre@3", [0, 0.5, 1]),  # pre and map: binary relevance
    ("map", [0, 0.5, 1]),
])
def test_ranking_metrics_refuse_the_labels_xgboost_refuses(name, labels):
    """A classifier's or regressor's evaluation set with a ranking metric: labels that
    XGBoost's metric refuses are refused before training, naming the metric, the rule and the
    set (a set of whole degrees, and ndcg_exp_gain=False for any degree, are fine)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    y = np.resize(np.asarray(labels, dtype=np.float64), 60)
    qid = np.repeat(np.arange(6), 10)
    with pytest.raises(xgb.core.XGBoostError):
        xgb.train({"objective": "reg:squarederror", "eval_metric": name},
                  xgb.DMatrix(X, y, qid=qid), 1,
                  evals=[(xgb.DMatrix(X, y, qid=qid), "valid")], verbose_eval=False)
    params = {"objective": "reg:squarederror", "eval_metric": name, "max_depth": 2}
    rule = "whole relevance degrees 0..31" if name.startswith("ndcg") else \
        "binary relevance labels, 0 or 1"
    with pytest.raises(ValueError, match=rf"eval_metric '{name}' needs {rule}.*evaluation "
                                         rf"set 'valid'"):
        gbflow.train(X, y, params, 1, evals=[((X, y, None, qid), "valid")], verbose=False)
    with pytest.raises(ValueError, match=rf"eval_metric '{name}' needs {rule}"):
        metrics.evaluate(name, y, rng.normal(size=60), qid=qid)
    whole = np.floor(y) if name.startswith("ndcg") else np.round(y)
    whole = np.minimum(whole, 31)
    gbflow.train(X, whole, params, 1, evals=[((X, whole, None, qid), "valid")], verbose=False)
    # whole to XGBoost's tolerance (its float32 labels): float64 rounding noise is taken
    noisy = whole * (1 + 2.0**-52) if name.startswith("ndcg") else np.where(whole > 0,
                                                                        1 + 2.0**-52, 0.0)
    gbflow.train(X, noisy, params, 1, evals=[((X, noisy, None, qid), "valid")], verbose=False)
    metrics.evaluate(name, noisy, rng.normal(size=60), qid=qid)
    objective = "rank:ndcg" if name.startswith("ndcg") else "rank:map"  # the objectives' check
    gbflow.train(X, noisy, {"objective": objective, "max_depth": 2}, 1, qid=qid, verbose=False)
    if name.startswith("ndcg"):  # the gain is the label itself: any degree
        gbflow.train(X, y, dict(params, ndcg_exp_gain=False), 1,
                     evals=[((X, y, None, qid), "valid")], verbose=False)


def test_a_rankers_callable_eval_metric_is_per_query_as_xgbrankers():
    """XGBRanker calls a callable eval_metric on each query's rows (1.0 for a query of one
    row) and averages them weighted by the queries' row counts; on features whose bins agree
    (small whole numbers) the models agree, so the histories do."""
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    X, Xv = np.round(rng.normal(size=(1200, 5)) * 3), np.round(rng.normal(size=(400, 5)) * 3)
    qid, qv = np.sort(rng.integers(0, 120, 1200)), np.sort(rng.integers(0, 40, 400))
    qv[-1] = qv.max() + 1  # a query of one row
    y, yv = rng.integers(0, 4, 1200), rng.integers(0, 4, 400)

    def top1(y_true, y_score):
        return float(y_true[np.argmax(y_score)])

    settings = dict(n_estimators=6, max_depth=4, base_score=0, eval_metric=top1)
    theirs = xgb.XGBRanker(**settings).fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv],
                                           verbose=False)
    ours = gbflow.GBFlowRanker(**settings, device="cpu").fit(
        X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
    np.testing.assert_allclose(ours.evals_result()["validation_0"]["top1"],
                               theirs.evals_result()["validation_0"]["top1"], rtol=1e-6)
