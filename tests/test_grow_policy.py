"""max_leaves and grow_policy="lossguide": XGBoost's trees, node for node, on every device,
store, shard and worker count."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import make_table, same_model_everywhere
from test_growing import RULES, _cuts, _random_binned, _shard_set

import gbflow
from gbflow.backend import get_backend
from gbflow.grow import finished_tree, grow_tree
from gbflow.grow.best_first import grow_tree_best_first
from gbflow.rules import Scales
from gbflow.sampling import FeatureSample

# (grow_policy, max_leaves, max_depth): budgets that stop trees before their depth limit
SETTINGS = [("lossguide", 31, 0), ("lossguide", 16, 6), ("lossguide", 7, 3),
            ("lossguide", 100, 0), ("depthwise", 20, 6), ("depthwise", 5, 0)]


def _integer_table(n=5000, n_features=6, seed=1, missing=True):
    """Features of 16 integer values (fewer than max_bin: gbflow's and XGBoost's cuts are the
    same, so are their histograms), 5% missing, and a noisy target."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 16, (n, n_features)).astype(np.float32)
    X[(rng.random(X.shape) < 0.05) & missing] = np.nan
    x = np.nan_to_num(X, nan=8.0)
    y = np.sin(x[:, 0]) * 2 + x[:, 1] * 0.3 + (x[:, 2] > 7) * x[:, 3] * 0.2 + rng.normal(size=n)
    return X, y.astype(np.float32)


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("policy,max_leaves,max_depth", SETTINGS)
def test_trees_are_xgboosts_node_for_node(device, policy, max_leaves, max_depth, missing):
    """On the same bins XGBoost grows the same trees: the leaves hold the same rows, the
    predictions agree to float32 rounding, and without missing values every row reaches the
    leaf of the same node id (XGBoost numbers nodes in the order its driver splits them). With
    missing values a node whose rows of one side are exactly its missing ones has two equal
    splits (present values versus missing, or a value threshold with missing values beside the
    values that have no rows); gbflow and XGBoost write them with the sides swapped."""
    xgb = pytest.importorskip("xgboost")
    X, y = _integer_table(missing=missing)
    params = dict(objective="reg:squarederror", grow_policy=policy, max_leaves=max_leaves,
                  max_depth=max_depth, learning_rate=0.3, base_score=0.5)
    ours = gbflow.train(X, y, dict(params, device=device), num_boost_round=10, verbose=False)
    dtrain = xgb.DMatrix(X, label=y)
    theirs = xgb.train(dict(params, tree_method="hist"), dtrain, 10)
    assert [int((t.feature < 0).sum()) for t in ours.trees] == \
        [dump.count("leaf=") for dump in theirs.get_dump()]
    assert all((t.feature < 0).sum() <= max_leaves for t in ours.trees)
    our_leaf = np.asarray(ours.predict(X, pred_leaf=True)).astype(np.int64)
    their_leaf = theirs.predict(dtrain, pred_leaf=True).astype(np.int64)
    for a, b in zip(our_leaf.T, their_leaf.T):  # the same partition of the rows into leaves
        pairs = len(np.unique(a * (b.max() + 1) + b))
        assert pairs == len(np.unique(a)) == len(np.unique(b))
    if not missing:
        assert np.array_equal(our_leaf, their_leaf)
    np.testing.assert_allclose(np.asarray(ours.predict(X)), theirs.predict(dtrain),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("sparse", [(), (1, 3)])
def test_a_budget_that_never_binds_grows_the_level_loops_tree(device, sparse):
    """The best-first loop with room for every split grows the level loop's nodes (numbered
    in the order of their gains instead of breadth first) and the same training margins."""
    rng = np.random.default_rng(3)
    bins, gh, n_value_bins = _random_binned(rng)
    backend = get_backend(device)
    scales, cuts = Scales(64.0, 16.0), _cuts(n_value_bins)
    allowed = FeatureSample(np.ones((RULES.max_depth, len(n_value_bins)), bool))
    results = []
    for grow in (grow_tree, grow_tree_best_first):
        shardset = _shard_set(backend, bins, gh, sparse, level_plans=False)
        rules = RULES if grow is grow_tree else dataclasses.replace(
            RULES, max_leaves=2 ** RULES.max_depth, lossguide=True)
        tree, rows = grow(shardset, [backend.xp.asarray(gh)], scales, cuts, rules, allowed, 0)
        margin = backend.xp.zeros(len(gh))
        rows[0].add_to(backend.kernels, margin)
        tree = finished_tree(tree)
        nodes = sorted(zip(tree.cover, tree.feature, tree.bin_threshold, tree.default_left,
                           tree.value, tree.gain))
        results.append((nodes, backend.to_host(margin), tree))
    (levels, level_margin, _), (best_first, best_first_margin, tree) = results
    assert best_first == levels and len(levels) > 7
    assert np.array_equal(best_first_margin, level_margin)
    _assert_split_in_drivers_order(tree)


def _assert_split_in_drivers_order(tree):
    """Node ids follow XGBoost's lossguide driver: each split is, among the leaves then, the one
    of the largest gain (ties: the smaller id), and its children take the next two ids."""
    leaves = {0}
    for node in sorted(np.flatnonzero(tree.feature >= 0), key=lambda k: tree.left[k]):
        splittable = [k for k in leaves if tree.feature[k] >= 0]
        assert node == min(splittable, key=lambda k: (-tree.gain[k], k))
        leaves.remove(node)
        leaves |= {int(tree.left[node]), int(tree.right[node])}


def test_tied_gains_leave_no_needed_split_unsearched():
    """A mirrored table (two halves of opposite targets) makes gains tie exactly; the budget's
    bookkeeping must still search every split the driver takes (it once closed one: "the top
    leaf is not split ahead")."""
    rng = np.random.default_rng(5)
    half = rng.integers(0, 6, (300, 3)).astype(np.float32)
    y_half = rng.integers(-3, 4, 300).astype(np.float32)
    X = np.vstack([np.c_[np.zeros(300, np.float32), half], np.c_[np.ones(300, np.float32), half]])
    y = np.concatenate([y_half, -y_half])
    params = {"grow_policy": "lossguide", "max_leaves": 10, "max_depth": 4, "reg_lambda": 0,
              "base_score": 0}
    booster = gbflow.train(X, y, params, num_boost_round=3, verbose=False)
    for tree in booster.trees:
        _assert_split_in_drivers_order(tree)
        assert int((tree.feature < 0).sum()) <= 10


def test_the_depthwise_budget_splits_a_levels_nodes_in_id_order():
    """Under max_leaves the depthwise tree is the full one's first nodes in breadth-first
    order: the same node ids, the splits past the budget left as leaves."""
    df = make_table(task="regression", seed=8)
    full = gbflow.train(df, "y", {"max_depth": 5}, num_boost_round=1, verbose=False).trees[0]
    for leaves in (2, 9, 20):
        tree = gbflow.train(df, "y", {"max_depth": 5, "max_leaves": leaves}, num_boost_round=1,
                            verbose=False).trees[0]
        assert int((tree.feature < 0).sum()) == leaves
        kept = np.flatnonzero(tree.feature >= 0)
        assert np.array_equal(kept, np.flatnonzero(full.feature >= 0)[: leaves - 1])
        assert np.array_equal(tree.feature[kept], full.feature[kept])
        assert np.array_equal(tree.value[: tree.n_nodes], full.value[: tree.n_nodes])


@pytest.mark.parametrize("extra", [
    {},
    {"monotone_constraints": (1, -1, 0, 0, 1, 0), "max_delta_step": 0.3},
    {"interaction_constraints": [[0, 1], [2, 3, 4]]},
    {"colsample_bynode": 0.5, "colsample_bylevel": 0.8, "subsample": 0.8, "seed": 5},
])
def test_same_model_on_shards_stores_and_reference_kernels(device, extra):
    """The leaf budget changes no promise (``conftest.same_model_everywhere``)."""
    params = {"grow_policy": "lossguide", "max_leaves": 12, "max_depth": 0, **extra}
    one = same_model_everywhere(device, make_table(task="regression", seed=4), params)
    assert max(int((t.feature < 0).sum()) for t in one.trees) == 12


def test_constraints_hold_in_best_first_trees():
    """Monotone constraints and interaction sets bound a best-first tree as a level one."""
    df = make_table(task="regression", seed=6)
    X = df.drop(columns="y")
    common = {"grow_policy": "lossguide", "max_leaves": 24, "max_depth": 0}
    booster = gbflow.train(df, "y", {**common, "monotone_constraints": {"x0": 1}},
                           num_boost_round=15, verbose=False)
    probe = X.iloc[:50].loc[lambda d: d.index.repeat(41)].copy()
    probe["x0"] = np.tile(np.linspace(-3, 3, 41, dtype=np.float32), 50)
    sweep = np.asarray(booster.predict(probe)).reshape(50, 41)
    assert (np.diff(sweep, axis=1) >= 0).all()
    sets = [{0, 1}, {2, 3, 4}]
    booster = gbflow.train(df, "y", {**common, "interaction_constraints": [[0, 1], [2, 3, 4]]},
                           num_boost_round=10, verbose=False)
    for tree in booster.trees:
        parent = {int(c): i for i in np.flatnonzero(tree.feature >= 0)
                  for c in (tree.left[i], tree.right[i])}
        for leaf in np.flatnonzero(tree.feature < 0):
            path, node = set(), leaf
            while node in parent:
                node = parent[node]
                path.add(int(tree.feature[node]))
            assert any(path <= s for s in sets), path


def test_categorical_features_and_paged_training_take_the_budget(device):
    """Category-set splits in best-first trees; paging (a tiny device_memory_limit) changes
    nothing."""
    rng = np.random.default_rng(2)
    n = 4000
    df = pd.DataFrame({"c": pd.Categorical(rng.choice(list("abcdefghij"), n)),
                       "x": rng.normal(size=n).astype(np.float32)})
    effect = dict(zip("abcdefghij", rng.normal(size=10) * 2))
    df["y"] = df["c"].map(effect).astype(float) + df["x"] + rng.normal(size=n) * 0.3
    params = {"grow_policy": "lossguide", "max_leaves": 10, "max_depth": 0, "device": device}
    resident = gbflow.train(df, "y", params, num_boost_round=6, verbose=False)
    assert any(t.categories for t in resident.trees)
    assert max(int((t.feature < 0).sum()) for t in resident.trees) == 10
    rmse = np.sqrt(np.mean((np.asarray(resident.predict(df)) - df["y"]) ** 2))
    assert rmse < 0.6 * df["y"].std()
    X = df[["x"]].to_numpy()
    y = df["y"].to_numpy()
    plain = gbflow.train(X, y, params, num_boost_round=4, verbose=False)
    paged = gbflow.train(X, y, dict(params, device_memory_limit=4000), num_boost_round=4,
                         verbose=False)
    assert paged.to_json() == plain.to_json()


def test_lossguide_without_a_binding_budget_is_the_depthwise_model():
    """Without a budget below 2**max_depth leaves both policies split every leaf worth it."""
    df = make_table(task="regression", seed=7)
    kwargs = dict(num_boost_round=5, verbose=False)
    depthwise = gbflow.train(df, "y", {"max_depth": 4}, **kwargs)
    for extra in ({}, {"max_leaves": 16}, {"max_leaves": 1000}):
        lossguide = gbflow.train(df, "y", {"max_depth": 4, "grow_policy": "lossguide", **extra},
                                 **kwargs)
        assert [t.to_dict() for t in lossguide.trees] == \
            [t.to_dict() for t in depthwise.trees]


def test_the_policy_travels_in_the_model_file_and_to_xgboost(tmp_path):
    xgb = pytest.importorskip("xgboost")
    X, y = _integer_table(2000)
    params = {"grow_policy": "lossguide", "max_leaves": 9, "max_depth": 0}
    booster = gbflow.train(X, y, params, num_boost_round=4, verbose=False)
    booster.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert loaded.params.grow_policy == "lossguide" and loaded.params.max_leaves == 9
    assert np.array_equal(np.asarray(loaded.predict(X)), np.asarray(booster.predict(X)))
    default = gbflow.train(X, y, {}, num_boost_round=1, verbose=False).to_json()
    assert "grow_policy" not in default and "max_leaves" not in default
    booster.save_model(tmp_path / "x.json", format="xgboost")
    theirs = xgb.Booster(model_file=str(tmp_path / "x.json"))
    dmatrix = xgb.DMatrix(X, feature_names=booster.feature_names)
    np.testing.assert_allclose(theirs.predict(dmatrix), np.asarray(booster.predict(X)),
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("params,match", [
    ({"max_depth": 0}, "max_depth=0 .* needs max_leaves"),
    ({"grow_policy": "leafwise"}, "grow_policy must be 'depthwise' or 'lossguide'"),
    ({"max_leaves": -1}, "max_leaves must lie in"),
    ({"max_leaves": 2.5}, "max_leaves must be a whole number"),
    ({"num_leaves": 31}, "num_leaves is max_leaves here"),
    ({"max_depth": 31, "max_leaves": 8}, "max_depth must lie in"),
])
def test_bad_growth_parameters_are_refused_by_name(params, match):
    with pytest.raises(ValueError, match=match):
        gbflow.train(*_integer_table(100), params, num_boost_round=1, verbose=False)


def test_the_estimators_take_the_policy():
    from gbflow.sklearn import GBFlowRegressor
    X, y = _integer_table(2000)
    model = GBFlowRegressor(n_estimators=5, grow_policy="lossguide", max_leaves=6,
                            max_depth=0).fit(X, y)
    assert model.get_params()["max_leaves"] == 6
    assert all((t.feature < 0).sum() == 6 for t in model.get_booster().trees)
