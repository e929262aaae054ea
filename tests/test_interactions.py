"""Interaction constraints: XGBoost's rule on every device, store and shard count."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_table

import gbflow
from gbflow import boosting, inputs
from gbflow.backend import get_backend
from gbflow.interactions import InteractionSets
from gbflow.params import make_params


def _table(n_rows=8000, seed=0):
    """Two products (a*b, c*d) and a lone term in e."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, 5)).astype(np.float32)
    y = X[:, 0] * X[:, 1] + X[:, 2] * X[:, 3] + np.sin(X[:, 4]) + \
        rng.normal(scale=0.3, size=n_rows)
    return pd.DataFrame(X, columns=list("abcde")).assign(y=y)


def _path_features(tree) -> list[set]:
    """The distinct features split on along each root-to-leaf path of a tree."""
    paths, stack = [], [(0, frozenset())]
    while stack:
        node, above = stack.pop()
        if tree.feature[node] < 0:
            paths.append(set(above))
            continue
        here = above | {int(tree.feature[node])}
        stack += [(int(tree.left[node]), here), (int(tree.right[node]), here)]
    return paths


def _obeys(booster, sets) -> bool:
    """Every path's features lie in one set, or are one feature (a feature in no set)."""
    return all(len(p) <= 1 or any(p <= set(s) for s in sets)
               for tree in booster.trees for p in _path_features(tree))


@pytest.mark.parametrize("constraints,sets", [
    ([[0, 1], [2, 3]], [{0, 1}, {2, 3}]),
    ('[["a", "b"], ["c", "d", "e"]]', [{0, 1}, {2, 3, 4}]),
    ([[0, 2], [1, 3], [0, 4]], [{0, 2}, {1, 3}, {0, 4}]),
])
def test_every_path_keeps_to_one_set(device, constraints, sets):
    df = _table()
    free = gbflow.train(df, label="y", params={"max_depth": 5, "device": device},
                        num_boost_round=10, verbose=False)
    assert not _obeys(free, sets)  # unconstrained trees mix the sets
    booster = gbflow.train(df, label="y", params={"max_depth": 5, "device": device,
                                                  "interaction_constraints": constraints},
                           num_boost_round=10, verbose=False)
    assert _obeys(booster, sets)
    used = {int(f) for t in booster.trees for f in t.feature if f >= 0}
    assert len(used) >= 4  # every set's features are used (c is no use without d in set 3)


def test_the_rule_node_by_node():
    sets = InteractionSets.of(((0, 1), (1, 2), ("d",)), ["a", "b", "c", "d", "e"])
    paths = np.zeros((5, 5), dtype=bool)
    paths[1, 1] = True          # b: in both sets -> a, b, c
    paths[2, [0, 1]] = True     # a and b: only the first set -> a, b
    paths[3, 4] = True          # e: in no set -> only e again
    paths[4, [0, 2]] = True     # a and c: no set holds both -> only a and c themselves
    allowed = sets.allowed(paths)
    assert allowed[0].all()
    assert allowed[1].tolist() == [True, True, True, False, False]
    assert allowed[2].tolist() == [True, True, False, False, False]
    assert allowed[3].tolist() == [False, False, False, False, True]
    assert allowed[4].tolist() == [True, False, True, False, False]


def test_constrained_training_matches_xgboost():
    xgb = pytest.importorskip("xgboost")
    df = _table(20_000, seed=1)
    X, y = df.drop(columns="y").to_numpy(), df["y"].to_numpy()
    ours = gbflow.train(df, label="y", params={"max_depth": 5,
                                               "interaction_constraints": [[0, 1], [2, 3]]},
                        num_boost_round=40, verbose=False).predict(df.drop(columns="y"))
    theirs = xgb.train({"max_depth": 5, "tree_method": "hist",
                        "interaction_constraints": "[[0, 1], [2, 3]]"}, xgb.DMatrix(X, y),
                       40).predict(xgb.DMatrix(X))
    rmse = [np.sqrt(np.mean((np.asarray(p) - y) ** 2)) for p in (ours, theirs)]
    assert rmse[0] <= rmse[1] * 1.01, rmse


def test_same_model_on_shards_stores_and_with_node_sampling(device):
    df = make_table(task="regression", seed=8)
    extra = {"max_depth": 5, "interaction_constraints": [["x0", "x1", "x2"], ["x3", "x4"]]}
    params = make_params(extra)
    backend = get_backend(device)
    one = boosting.fit(backend, [inputs.load(df, "y")], params, 6, verbose=False,
                       keep_training_margins=True)
    cut = [0, 1, 900, 2000, len(df)]
    parts = [inputs.load(df.iloc[a:b], "y") for a, b in zip(cut[:-1], cut[1:])]
    assert boosting.fit(backend, parts, params, 6, verbose=False).to_json() == one.to_json()
    sparse = boosting.fit(backend, [inputs.load(df, "y")],
                          make_params({**extra, "sparse_threshold": 0.0}), 6, verbose=False)
    assert [t.to_dict() for t in sparse.trees] == [t.to_dict() for t in one.trees]
    predicted = np.asarray(one.predict(df, output_margin=True)).reshape(len(df), -1)
    assert np.array_equal(predicted, one.training_margins[0])
    sampled = gbflow.train(df, label="y", params={**extra, "colsample_bynode": 0.5,
                                                  "device": device},
                           num_boost_round=6, verbose=False)
    assert _obeys(sampled, [{0, 1, 2}, {3, 4}])
    assert sampled.params.interaction_constraints == (("x0", "x1", "x2"), ("x3", "x4"))


@pytest.mark.parametrize("constraints,error,match", [
    ([[0, 7]], ValueError, "position 7, out of range for 5 features"),
    ([["a", "zz"]], ValueError, "names feature 'zz'"),
    ("[[0, 1]", ValueError, "JSON list of lists"),
    ([0, 1], TypeError, "list of lists"),
    ([[0, 1.5]], TypeError, "holds 1.5"),
])
def test_bad_constraints_are_refused_by_name(constraints, error, match):
    with pytest.raises(error, match=match):
        gbflow.train(_table(100), label="y", params={"interaction_constraints": constraints},
                     num_boost_round=1, verbose=False)
