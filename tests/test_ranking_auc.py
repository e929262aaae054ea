"""auc and aucpr of data with query ids: per query, as XGBoost computes them for ranking."""
from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

import gbflow
from gbflow import collective, metrics
from gbflow.backend import get_backend, numpy_kernels
from gbflow.metrics import EvalData, Evaluator


def _xgboost_value(name, label, score, qid, group_weight=None):
    """XGBoost's metric of ``score`` given as the base margins of sorted-by-qid rows."""
    data = xgb.DMatrix(np.zeros((len(label), 1)), label, qid=qid, base_margin=score)
    if group_weight is not None:
        data.set_weight(group_weight)
    booster = xgb.train({"objective": "rank:pairwise", "eval_metric": name, "base_score": 0},
                        data, 0)
    return float(booster.eval(data).split(":")[1])


def _case(seed=0, n=1500, n_queries=120, levels=4):
    rng = np.random.default_rng(seed)
    qid = np.sort(rng.integers(0, n_queries, n))
    qid = qid + 1
    qid[:2] = 0  # a query of two documents: not counted by auc
    label = rng.integers(0, levels, n).astype(np.float64)
    score = np.round(rng.normal(size=n), 1)  # ties within queries
    return rng, qid, label, score


def test_pair_order_counts_twin(kernels):
    rng = np.random.default_rng(0)
    starts = np.concatenate([[0], np.cumsum(rng.integers(1, 60, 40))]).astype(np.int64)
    n = int(starts[-1])
    query_of = np.repeat(np.arange(40), np.diff(starts)).astype(np.int64)
    values = np.round(rng.normal(size=n), 1).astype(np.float32)
    values[7] = np.nan
    values[starts[5]:starts[6]] = 0.25  # every pair of a query equal
    values[starts[8]:starts[8] + 3] = [np.inf, np.inf, -np.inf]  # equal infinities: 0
    values[starts[9]:starts[9] + 2] = -np.inf
    expected = numpy_kernels.pair_order_counts(values, starts, query_of,
                                               np.empty(n, dtype=np.int64))
    got = kernels.pair_order_counts(values, starts, query_of, np.empty(n, dtype=np.int64))
    assert np.array_equal(np.asarray(got), expected)
    # by definition: 2 for each earlier larger value of the query, 1 for each equal one
    b = starts[3] + 4
    earlier = values[starts[3]:b]
    assert expected[b] == 2 * (earlier > values[b]).sum() + (earlier == values[b]).sum()
    assert (expected[starts[:-1]] == 0).all()
    size = starts[6] - starts[5]
    assert expected[starts[5]:starts[6]].sum() == size * (size - 1) // 2
    assert list(expected[starts[8]:starts[8] + 3]) == [0, 0, 4]
    assert expected[starts[9] + 1] == 0


@pytest.mark.parametrize("weighted", [False, True])
def test_auc_is_xgboosts_per_query(weighted):
    """Graded labels, pairs of equal labels in row order, ties in the scores, a query of two
    documents (left out) and, weighted, a query of weight 0 (counted as 0)."""
    rng, qid, label, score = _case()
    ids = np.unique(qid)
    group_weight = rng.uniform(0.5, 2.0, len(ids)).astype(np.float32).astype(np.float64) \
        if weighted else None
    if weighted:
        group_weight[3] = 0.0
    weight = None if group_weight is None else group_weight[np.searchsorted(ids, qid)]
    ours = metrics.evaluate("auc", label, score, weight, qid=qid)
    assert ours == pytest.approx(_xgboost_value("auc", label, score, qid, group_weight),
                                 rel=1e-14)
    # by hand: each counted query's share of ordered pairs, over the counted queries
    values = []
    for q in ids:
        mine = qid == q
        if mine.sum() < 3:
            continue
        order = np.argsort(-label[mine], kind="stable")
        s = score[mine][order].astype(np.float32)
        above, equal = np.triu(s[:, None] > s[None, :], 1), np.triu(s[:, None] == s[None, :], 1)
        pairs = len(s) * (len(s) - 1) / 2
        zero = weighted and group_weight[np.searchsorted(ids, q)] == 0
        values.append(0.0 if zero else (above.sum() + 0.5 * equal.sum()) / pairs)
    assert ours == pytest.approx(np.mean(values), rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_aucpr_is_xgboosts_per_query(weighted):
    """Binary relevance; queries holding one class (left out of the mean)."""
    rng, qid, label, score = _case(seed=1, levels=2)
    label[qid == qid[100]] = 1.0  # a query of relevant documents only
    ids = np.unique(qid)
    group_weight = rng.uniform(0.5, 2.0, len(ids)).astype(np.float32).astype(np.float64) \
        if weighted else None
    weight = None if group_weight is None else group_weight[np.searchsorted(ids, qid)]
    ours = metrics.evaluate("aucpr", label, score, weight, qid=qid)
    assert ours == pytest.approx(_xgboost_value("aucpr", label, score, qid, group_weight),
                                 rel=1e-14)
    # one query alone is that query's binary aucpr
    q = qid == qid[600]
    assert metrics.evaluate("aucpr", label[q], score[q], qid=qid[q]) == \
        pytest.approx(metrics.evaluate("aucpr", label[q], score[q]), rel=1e-14)


def test_values_are_the_same_on_any_split_of_the_queries():
    """Equal, not close: per-query values from the query's rows alone, an exact mean."""
    _, qid, label, score = _case(seed=2, n=3000, n_queries=200)
    binary = (label > 1).astype(np.float64)
    metric_list = [metrics.metric("auc"), metrics.metric("aucpr")]
    results = []
    for splits in ([], [700, 1900], [1, 2999]):
        bounds = [0, *[int(np.searchsorted(qid, qid[s])) for s in splits], len(qid)]
        parts = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        queries = [gbflow.ranking.QueryGroups(np, qid[i]) for i in parts]
        data = EvalData("v", [binary[i] for i in parts], None, len(qid), 1.0, 1, queries,
                        query_auc=True)
        evaluator = Evaluator(get_backend("cpu"), metric_list, [data], collective.LOCAL)
        results.append(evaluator.values([[score[i] for i in parts]])[0])
    assert results[0] == results[1] == results[2]
    assert results[0][0] == metrics.evaluate("auc", binary, score, qid=qid)


def test_a_rankers_evaluation_set_takes_them_per_query(device):
    """Training's history: XGBoost's values of the model's own predictions; graded labels are
    fine for auc (pairs ordered by label)."""
    rng = np.random.default_rng(3)
    X, Xv = rng.normal(size=(3000, 5)), rng.normal(size=(1200, 5))
    y = np.clip(np.round(X[:, 0] + rng.normal(size=3000) + 1), 0, 3)
    yv = np.clip(np.round(Xv[:, 0] + rng.normal(size=1200) + 1), 0, 3)
    qid, qv = np.sort(rng.integers(0, 200, 3000)), np.sort(rng.integers(0, 80, 1200))
    booster = gbflow.train(X, y, {"objective": "rank:ndcg", "eval_metric": ["auc", "ndcg"],
                                  "max_depth": 3, "device": device}, 5, qid=qid,
                           evals=[((Xv, yv, None, qv), "valid"), ((X, y, None, qid), "train")],
                           verbose=False)
    for name, data, labels, ids in (("valid", Xv, yv, qv), ("train", X, y, qid)):
        margin = booster.predict(data, output_margin=True)
        assert booster.evals_result[name]["auc"][-1] == \
            pytest.approx(_xgboost_value("auc", labels, margin, ids), rel=1e-14)
    binary, binary_v = (y > 1).astype(np.float64), (yv > 1).astype(np.float64)
    booster = gbflow.train(X, binary, {"objective": "rank:map", "eval_metric": "aucpr",
                                       "max_depth": 3, "device": device}, 5, qid=qid,
                           evals=[((Xv, binary_v, None, qv), "valid")], verbose=False)
    margin = booster.predict(Xv, output_margin=True)
    assert booster.evals_result["valid"]["aucpr"][-1] == \
        pytest.approx(_xgboost_value("aucpr", binary_v, margin, qv), rel=1e-14)


def test_aucpr_of_graded_relevance_is_refused_before_training():
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(300, 3)), rng.integers(0, 3, 300).astype(np.float64)
    qid = np.sort(rng.integers(0, 20, 300))
    with pytest.raises(ValueError, match=r"'aucpr' needs labels in \[0, 1\].*'valid'"):
        gbflow.train(X, y, {"objective": "rank:ndcg", "eval_metric": "aucpr"}, 2, qid=qid,
                     evals=[((X, y, None, qid), "valid")], verbose=False)


@pytest.mark.parametrize("scale", [1e-6, 0.01, 1e4])
def test_query_weights_of_any_size_leave_the_values_as_they_are(scale):
    """The per-query values are not weighted: equal query weights of any size give the
    unweighted values, exactly (their exact sum's bound is 1, not the largest weight)."""
    _, qid, label, score = _case(seed=5)
    binary = (label > 1).astype(np.float64)
    weight = np.full(len(qid), scale)
    for name, labels in (("auc", label), ("aucpr", binary)):
        assert metrics.evaluate(name, labels, score, weight, qid=qid) == \
            metrics.evaluate(name, labels, score, qid=qid)


def test_infinite_ties_count_nothing_and_several_outputs_are_refused():
    """XGBoost's difference of two equal infinities is NaN: such a pair counts 0, not 1/2."""
    qid = np.zeros(4, dtype=np.int64)
    label = np.array([2.0, 1.0, 0.0, 1.0])
    score = np.array([np.inf, np.inf, 0.0, 1.0])
    assert metrics.evaluate("auc", label, score, qid=qid) == pytest.approx(
        _xgboost_value("auc", label, score, qid), rel=1e-14)
    assert metrics.evaluate("auc", label, score, qid=qid) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="with query ids takes one prediction a row"):
        metrics.evaluate("auc", label, np.ones((4, 3)) / 3, qid=qid)
