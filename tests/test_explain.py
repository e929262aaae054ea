"""Explaining and exporting models: SHAP values and interactions, Saabas contributions, leaves,
iteration ranges, the XGBoost and Treelite exports, tables, dumps and plots."""
from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

import gbflow
from gbflow import explain, predictor
from gbflow.backend import cpu_kernels, numpy_kernels

OBJECTIVES = ("reg:squarederror", "reg:squaredlogerror", "reg:pseudohubererror", "reg:logistic",
              "binary:logistic", "binary:logitraw", "binary:hinge", "count:poisson", "reg:gamma",
              "reg:tweedie", "multi:softprob", "multi:softmax", "survival:cox")


def _frame(n=1500, seed=0, categorical=False):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(rng.normal(size=(n, 5)).astype(np.float32), columns=list("abcde"))
    df = df.mask(rng.random(df.shape) < 0.1)
    signal = df.a.fillna(0) + df.b.fillna(0) * df.c.fillna(0)
    if categorical:
        df["k"] = pd.Categorical(rng.choice(list("pqrstuvw"), n)).remove_categories(["w"])
        signal = signal + df.k.isin(list("qsu")).astype(float)
    return df, signal.to_numpy()


def _label(objective, signal):
    if objective.startswith("multi"):
        return np.digitize(signal, [-0.5, 0.5]).astype(float)
    if objective in ("binary:logistic", "binary:logitraw", "binary:hinge", "reg:logistic"):
        return (signal > 0).astype(float)
    if objective in ("count:poisson", "reg:tweedie"):
        return np.round(np.exp(signal.clip(-2, 2))).astype(float)
    if objective == "reg:gamma":
        return np.exp(signal.clip(-2, 2))
    if objective == "survival:cox":  # every third row censored
        time = np.exp(-signal.clip(-2, 2)) * (1 + 0.01 * (np.arange(len(signal)) % 7))
        return np.where(np.arange(len(signal)) % 3 == 0, -time, time)
    if objective == "reg:squaredlogerror":
        return np.abs(signal)
    return signal


def _train(objective="reg:squarederror", rounds=12, categorical=False, **params):
    df, signal = _frame(categorical=categorical)
    params = {"objective": objective, "max_depth": 4, **params}
    if objective.startswith("multi"):
        params["num_class"] = 3
    booster = gbflow.train(df, label=_label(objective, signal), params=params,
                           num_boost_round=rounds, verbose=False)
    return booster, df


def _kernel_inputs(booster, X):
    forest = predictor.FlatForest.from_trees(booster.trees)
    cover = np.concatenate([t.cover for t in booster.trees])
    sets = () if forest.cat_start is None else (forest.cat_start, forest.cat_bits)
    nodes = (forest.feature, forest.threshold, forest.default_left)
    return forest, cover, sets, nodes


@pytest.mark.parametrize("objective,categorical", [("reg:squarederror", False),
                                                   ("multi:softprob", True)])
def test_explain_kernels_equal_their_numpy_twins(kernels, objective, categorical):
    booster, df = _train(objective, rounds=4, categorical=categorical)
    X = np.asarray(gbflow.backend.frames.feature_matrix(df.iloc[:300], booster.feature_names,
                                                        booster.categories))
    forest, cover, sets, nodes = _kernel_inputs(booster, X)
    assert (forest.cat_start is not None) == categorical
    paths = explain.forest_paths(forest, cover)
    n, g, w = len(X), booster.n_groups, X.shape[1] + 1

    def both(name, *args, shape, dtype=np.float64):
        expected = getattr(numpy_kernels, name)(X, *args, np.zeros(shape, dtype), *sets)
        got = getattr(kernels, name)(X, *args, np.zeros(shape, dtype), *sets)
        assert np.array_equal(got, expected), name
        return expected

    leaves = both("predict_leaves", *nodes, forest.left, forest.right, forest.tree_root,
                  shape=(n, len(forest.tree_root)), dtype=np.int32)
    assert (leaves > 0).all()
    both("saabas_contributions", *nodes, forest.left, forest.right, forest.tree_root,
         forest.tree_group, explain.node_means(forest, cover), shape=(n, g, w))
    shap = both("shap_contributions", *nodes, *paths.arrays, shape=(n, g, w))
    assert np.abs(shap).sum() > 0
    both("shap_interactions", *nodes, *paths.arrays, shape=(n, g, w, w))


def _expected_value(tree, x, known):
    """The tree's expected output given the features ``known`` of row x (TreeSHAP's
    conditional expectation: unknown features follow the training cover)."""
    def visit(n):
        if tree.feature[n] < 0:
            return tree.value[n]
        left, right = tree.left[n], tree.right[n]
        if tree.feature[n] in known:
            v = x[tree.feature[n]]
            goes_left = tree.default_left[n] if np.isnan(v) else v < tree.threshold[n]
            return visit(left if goes_left else right)
        cl, cr = tree.cover[left], tree.cover[right]
        return (cl * visit(left) + cr * visit(right)) / (cl + cr)
    return visit(0)


def test_shap_values_are_the_shapley_values_of_the_trees():
    """Against the definition: every coalition of the 5 features, weighted."""
    booster, df = _train(rounds=3)
    X = df.to_numpy(np.float32)[:25]
    shap = booster.predict(X, pred_contribs=True)
    n_features = X.shape[1]
    for r in range(len(X)):
        expected = np.zeros(n_features + 1)
        expected[-1] = booster.base_margin[0]
        for tree in booster.trees:
            expected[-1] += _expected_value(tree, X[r], set())
            for i in range(n_features):
                others = [j for j in range(n_features) if j != i]
                for size in range(n_features):
                    weight = math.factorial(size) * math.factorial(n_features - size - 1) / \
                        math.factorial(n_features)
                    for known in itertools.combinations(others, size):
                        expected[i] += weight * (_expected_value(tree, X[r], {*known, i})
                                                 - _expected_value(tree, X[r], set(known)))
        np.testing.assert_allclose(shap[r], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("objective", ["reg:squarederror", "multi:softprob"])
def test_contributions_and_interactions_sum_to_the_margin(objective):
    booster, df = _train(objective, categorical=True)
    margin = booster.predict(df, output_margin=True).to_numpy()
    shap = booster.predict(df, pred_contribs=True)
    approx = booster.predict(df, pred_contribs=True, approx_contribs=True)
    inter = booster.predict(df, pred_interactions=True)
    g = booster.n_groups
    width = booster.num_features() + 1
    assert list(shap.columns[:width]) == (booster.feature_names + ["bias"] if g == 1 else
                                          [f"{c}_0" for c in booster.feature_names + ["bias"]])
    shap = shap.to_numpy().reshape(len(df), g, width)
    approx = approx.to_numpy().reshape(len(df), g, width)
    inter = inter.reshape(len(df), g, width, width)
    margin = margin.reshape(len(df), g)
    np.testing.assert_allclose(shap.sum(axis=2), margin, atol=1e-10)
    np.testing.assert_allclose(approx.sum(axis=2), margin, atol=1e-10)
    np.testing.assert_allclose(inter.sum(axis=(2, 3)), margin, atol=1e-10)
    np.testing.assert_allclose(inter.sum(axis=3), shap, atol=1e-10)
    np.testing.assert_allclose(inter, inter.transpose(0, 1, 3, 2), atol=1e-12)
    assert np.abs(inter[:, :, :-1, :-1] - np.eye(width - 1) * inter[:, :, :-1, :-1]).max() > 0
    assert not np.allclose(approx, shap)  # Saabas is another attribution


def test_explaining_arrays_csr_and_dask_frames_agree():
    import dask.dataframe as dd
    import scipy.sparse
    booster, df = _train()
    X = df.to_numpy(np.float32)
    dense = booster.predict(X, pred_contribs=True)
    csr = scipy.sparse.csr_matrix(np.nan_to_num(X, nan=0.0))
    zeros_missing = np.where(np.isnan(X) | (X == 0), np.nan, X)
    assert np.array_equal(booster.predict(csr, pred_contribs=True),
                          booster.predict(zeros_missing, pred_contribs=True))
    ddf = dd.from_pandas(df, npartitions=3)
    lazy = booster.predict(ddf, pred_contribs=True)
    assert list(lazy.columns) == booster.feature_names + ["bias"]
    assert np.array_equal(lazy.compute().to_numpy(), dense)
    leaves = booster.predict(ddf, pred_leaf=True).compute()
    assert list(leaves.columns) == [f"tree_{t}" for t in range(12)]
    assert (leaves.dtypes == np.int32).all()
    assert np.array_equal(leaves.to_numpy(), booster.predict(X, pred_leaf=True))
    inter = booster.predict(ddf, pred_interactions=True)
    assert np.array_equal(inter.compute(), booster.predict(X, pred_interactions=True))


def test_early_stopping_keeps_every_round_and_predicts_with_the_best():
    df, signal = _frame(3000)
    y = (signal > 0).astype(float)
    train, valid = df.iloc[:2000], df.iloc[2000:]
    params = {"objective": "binary:logistic", "learning_rate": 0.8, "max_depth": 6}
    stopped = gbflow.train(train.assign(y=y[:2000]), label="y", params=params,
                           num_boost_round=200, evals=[(valid.assign(y=y[2000:]), "valid")],
                           early_stopping_rounds=4, verbose=False)
    best = stopped.best_iteration
    assert stopped.num_boosted_rounds() == best + 1 + 4 < 200
    short = gbflow.train(train.assign(y=y[:2000]), label="y", params=params,
                         num_boost_round=best + 1, verbose=False)
    assert np.array_equal(stopped.predict(df), short.predict(df))
    assert np.array_equal(stopped.predict(df, iteration_range=(0, best + 1)), short.predict(df))
    every = stopped.predict(df, iteration_range=(0, 0))
    assert np.array_equal(every, stopped.predict(df, iteration_range=(0, best + 5)))
    assert not np.array_equal(every, short.predict(df))
    # a range's contributions sum to that range's margin
    shap = stopped.predict(df, pred_contribs=True, iteration_range=(2, 5)).sum(axis=1)
    np.testing.assert_allclose(shap, stopped.predict(df, output_margin=True,
                                                     iteration_range=(2, 5)), atol=1e-10)
    assert stopped.predict(df, pred_leaf=True, iteration_range=(2, 5)).shape == (3000, 3)


def test_prediction_options_fail_clearly():
    booster, df = _train(rounds=3)
    for bad in [(3, 2), (0, 4), (-1, 2)]:
        with pytest.raises(ValueError, match="iteration_range .* needs 0 <= begin <= end <= 3"):
            booster.predict(df, iteration_range=bad)
    # (k, k) is no tree, as XGBoost's: the base margin
    base = booster.predict(df, output_margin=True, iteration_range=(2, 2))
    assert np.all(base == booster.base_margin[0])
    with pytest.raises(TypeError, match="iteration_range must be a pair"):
        booster.predict(df, iteration_range="ab")
    with pytest.raises(ValueError, match="choose one of .* pred_leaf and pred_contribs"):
        booster.predict(df, pred_leaf=True, pred_contribs=True)
    with pytest.raises(ValueError, match="approx_contribs=True goes with pred_contribs"):
        booster.predict(df, approx_contribs=True)
    with pytest.raises(ValueError, match="output_margin does not apply to pred_contribs"):
        booster.predict(df, pred_contribs=True, output_margin=True)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_xgboost_loads_the_export_and_predicts_the_same(objective):
    xgb = pytest.importorskip("xgboost")
    booster, df = _train(objective, rounds=15)
    model = booster.to_xgboost()
    data = xgb.DMatrix(df)
    n, g = len(df), booster.n_groups
    margin = booster.predict(df, output_margin=True).to_numpy().reshape(n, g)
    scale = np.abs(margin).max()
    np.testing.assert_allclose(model.predict(data, output_margin=True).reshape(n, g), margin,
                               rtol=1e-6, atol=1e-6 * scale)
    # the log links: XGBoost's float32 margins under exp, a relative error of up to |margin|
    # float32 ulps
    exp_link = objective in ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox")
    np.testing.assert_allclose(model.predict(data).reshape(n, -1),
                               booster.predict(df).to_numpy().reshape(n, -1),
                               rtol=1e-6 + (scale * 2.0**-23 if exp_link else 0), atol=1e-6)
    assert np.array_equal(model.predict(data, pred_leaf=True),
                          booster.predict(df, pred_leaf=True).to_numpy())
    X = df.to_numpy(np.float32)
    for options in ({"pred_contribs": True}, {"pred_contribs": True, "approx_contribs": True},
                    {"pred_interactions": True}):
        ours = booster.predict(X, **options)
        np.testing.assert_allclose(model.predict(data, **options).reshape(ours.shape), ours,
                                   rtol=1e-5, atol=1e-6 * scale, err_msg=str(options))


def test_xgboost_export_with_categorical_splits_and_best_iteration():
    xgb = pytest.importorskip("xgboost")
    booster, df = _train("binary:logistic", categorical=True)
    assert any(t.categories for t in booster.trees)
    model = booster.to_xgboost()
    data = xgb.DMatrix(df, enable_categorical=True)
    np.testing.assert_allclose(model.predict(data), booster.predict(df), atol=1e-6)
    np.testing.assert_allclose(model.predict(data, pred_contribs=True),
                               booster.predict(df, pred_contribs=True), rtol=1e-5, atol=1e-6)
    assert model.feature_types == ["float"] * 5 + ["c"]
    booster.best_iteration, booster.best_score = 5, 0.25
    assert booster.to_xgboost().best_iteration == 5


def test_a_feature_named_bias_keeps_its_own_contribution_column():
    rng = np.random.default_rng(4)
    df = pd.DataFrame(rng.standard_normal((200, 2)), columns=["bias", "b"])
    booster = gbflow.train(df, rng.standard_normal(200), {"max_depth": 2}, num_boost_round=2,
                           verbose=False)
    contribs = booster.predict(df, pred_contribs=True)
    assert list(contribs.columns) == ["bias", "b", "_bias_"]
    np.testing.assert_allclose(contribs.sum(axis=1), booster.predict(df, output_margin=True),
                               rtol=1e-6, atol=1e-6)


def test_non_ascii_feature_names_reach_xgboost_as_written(tmp_path):
    """XGBoost keeps an escaped name ("\\u00e9") as those six characters: the frame's own
    column then failed its feature-name check."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(3)
    df = pd.DataFrame(rng.standard_normal((300, 2)), columns=["é", "日本"])
    booster = gbflow.train(df, rng.standard_normal(300), {"max_depth": 3}, num_boost_round=3,
                           verbose=False)
    for name in ("n.json", "n.ubj"):
        booster.save_model(tmp_path / name, format="xgboost")
        loaded = xgb.Booster(model_file=str(tmp_path / name))
        assert loaded.feature_names == ["é", "日本"]
        np.testing.assert_allclose(loaded.predict(xgb.DMatrix(df)), booster.predict(df),
                                   atol=1e-6)


def test_save_model_in_xgboost_formats(tmp_path):
    xgb = pytest.importorskip("xgboost")
    booster, df = _train("multi:softprob", rounds=5)
    before = booster.to_json()
    for name in ("m.json", "m.ubj"):
        booster.save_model(tmp_path / name, format="xgboost")
        loaded = xgb.Booster(model_file=str(tmp_path / name))
        np.testing.assert_allclose(loaded.predict(xgb.DMatrix(df)), booster.predict(df),
                                   atol=1e-6)
    assert json.loads((tmp_path / "m.json").read_text())["learner"]["objective"] == \
        {"name": "multi:softprob", "softmax_multiclass_param": {"num_class": "3"}}
    assert (tmp_path / "m.ubj").read_bytes()[:1] == b"{"
    with pytest.raises(ValueError, match="UBJSON, which gbflow's own model files are not"):
        booster.save_model(tmp_path / "own.ubj")
    with pytest.raises(ValueError, match="format must be 'gbflow' or 'xgboost'"):
        booster.save_model(tmp_path / "m2.json", format="onnx")
    assert not (tmp_path / "own.ubj").exists() and not (tmp_path / "m2.json").exists()
    booster.save_model(tmp_path / "own.json", format="gbflow")
    assert (tmp_path / "own.json").read_text() == before
    assert gbflow.load_model(tmp_path / "own.json").to_json() == before


def test_the_shap_library_explains_the_export():
    shap = pytest.importorskip("shap")
    booster, df = _train("binary:logistic")
    explainer = shap.TreeExplainer(booster.to_xgboost())
    values = explainer.shap_values(df)
    ours = booster.predict(df, pred_contribs=True).to_numpy()
    np.testing.assert_allclose(values, ours[:, :-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(explainer.expected_value, ours[0, -1], rtol=1e-5)


@pytest.mark.parametrize("objective,categorical", [
    ("reg:squarederror", True), ("binary:logistic", False), ("multi:softprob", True),
    ("count:poisson", False), ("binary:hinge", False), ("survival:cox", False)])
def test_treelite_export_predicts_the_same(objective, categorical):
    pytest.importorskip("treelite")
    import treelite.gtil
    booster, df = _train(objective, categorical=categorical)
    model = booster.to_treelite()
    X = np.asarray(gbflow.backend.frames.feature_matrix(df, booster.feature_names,
                                                        booster.categories), dtype=np.float32)
    n = len(df)
    np.testing.assert_allclose(treelite.gtil.predict(model, X, pred_margin=True).reshape(n, -1),
                               booster.predict(df, output_margin=True).to_numpy()
                               .reshape(n, -1), rtol=1e-12, atol=1e-12)
    expected = booster.predict(df).to_numpy().reshape(n, -1)
    got = treelite.gtil.predict(model, X).reshape(n, -1)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_tables_dumps_and_scores_match_xgboost():
    pytest.importorskip("xgboost")
    booster, df = _train("binary:logistic", rounds=4)
    model = booster.to_xgboost()
    ours, theirs = booster.trees_to_dataframe(), model.trees_to_dataframe()
    for column in ("Tree", "Node", "ID", "Feature", "Yes", "No", "Missing"):
        def plain(values):  # leaves' children: None here, NaN or pd.NA in XGBoost's table
            return [None if pd.isna(v) else v for v in values]
        assert plain(ours[column]) == plain(theirs[column]), column
    np.testing.assert_allclose(ours.Split, theirs.Split, rtol=1e-7)
    np.testing.assert_allclose(ours.Gain, theirs.Gain, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.Cover, theirs.Cover, rtol=1e-6)
    for kind in ("weight", "gain", "cover", "total_gain", "total_cover"):
        got = booster.get_score(importance_type=kind)
        expected = model.get_score(importance_type=kind)
        assert set(got) == set(expected)
        np.testing.assert_allclose([got[k] for k in expected], list(expected.values()),
                                   rtol=1e-5)
    for ours_tree, their_tree in zip(booster.get_dump(dump_format="json"),
                                     model.get_dump(dump_format="json")):
        a, b = json.loads(ours_tree), json.loads(their_tree)

        def same(x, y):
            assert x["nodeid"] == y["nodeid"] and ("leaf" in x) == ("leaf" in y)
            if "leaf" in x:
                return np.testing.assert_allclose(x["leaf"], y["leaf"], rtol=1e-6)
            assert (x["split"], x["yes"], x["no"], x["missing"]) == \
                (y["split"], y["yes"], y["no"], y["missing"])
            for cx, cy in zip(x["children"], y["children"]):
                same(cx, cy)
        same(a, b)
    text = booster.get_dump(with_stats=True)[0]
    assert text.startswith("0:[") and "gain=" in text and "\t1:" in text

    def stats(dump):  # each inner node's gain and cover as printed
        return re.findall(r"(gain=[^,]*),(cover=\S*)", dump)
    for ours_text, their_text in zip(booster.get_dump(with_stats=True),
                                     model.get_dump(with_stats=True)):
        assert stats(ours_text) == stats(their_text)  # XGBoost's float32 digits


def test_categorical_splits_in_tables_name_their_categories():
    """Yes is the side the listed categories take (right), as in XGBoost's dumps."""
    booster, _ = _train("binary:logistic", rounds=4, categorical=True)
    table = booster.trees_to_dataframe()
    on_categories = table[table.Category.notna()]
    assert len(on_categories)
    letters = list(booster.categories["k"])
    for row in on_categories.itertuples():
        tree = booster.trees[row.Tree]
        assert row.Feature == "k" and np.isnan(row.Split)
        assert row.Category == [letters[c] for c in tree.categories[row.Node]]
        assert row.Yes == f"{row.Tree}-{tree.right[row.Node]}"
        assert row.No == f"{row.Tree}-{tree.left[row.Node]}"
    dump = "".join(booster.get_dump())
    assert "[k:{" in dump


def test_dump_model_writes_every_tree(tmp_path):
    booster, _ = _train(rounds=3)
    booster.dump_model(tmp_path / "d.txt")
    text = (tmp_path / "d.txt").read_text()
    assert [line for line in text.splitlines() if line.startswith("booster[")] == \
        ["booster[0]:", "booster[1]:", "booster[2]:"]
    booster.dump_model(tmp_path / "d.json", with_stats=True, dump_format="json")
    trees = json.loads((tmp_path / "d.json").read_text())
    assert len(trees) == 3 and trees[0]["nodeid"] == 0 and "cover" in trees[0]
    with pytest.raises(ValueError, match="dump_format must be 'text' or 'json'"):
        booster.get_dump(dump_format="dot")
    # XGBoost's signatures put fmap first: its positional calls mean the same here, and a
    # feature map or a misplaced argument is refused by name, never taken for another one
    assert booster.get_dump("", True) == booster.get_dump(with_stats=True)
    booster.dump_model(tmp_path / "s.txt", "", True)
    assert "cover=" in (tmp_path / "s.txt").read_text()
    for call in (lambda: booster.dump_model(tmp_path / "f.txt", "featmap.txt"),
                 lambda: booster.get_dump(True), lambda: booster.trees_to_dataframe("f.txt")):
        with pytest.raises(ValueError, match="feature map files"):
            call()
    with pytest.raises(ValueError, match="pass it by keyword"):
        booster.get_score("gain")
    assert booster.get_score("", "gain") == booster.get_score(importance_type="gain")


def test_plots():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    df, signal = _frame(2000)
    y = (signal > 0).astype(float)
    booster = gbflow.train(df.iloc[:1500].assign(y=y[:1500]), label="y",
                           params={"objective": "binary:logistic", "max_depth": 3},
                           num_boost_round=30, evals=[(df.iloc[1500:].assign(y=y[1500:]), "v")],
                           early_stopping_rounds=3, verbose=False)
    ax = gbflow.plot_importance(booster, max_num_features=3)
    assert len(ax.patches) == 3
    top = max(booster.get_score(importance_type="weight").items(), key=lambda kv: kv[1])[0]
    assert ax.get_yticklabels()[-1].get_text() == top
    ax = gbflow.plot_metric(booster)
    assert ax.get_ylabel() == "logloss" and len(ax.lines) == 2  # the curve and the best round
    assert list(ax.lines[0].get_ydata()) == booster.evals_result["v"]["logloss"]
    ax = gbflow.plot_tree(booster, tree_idx=1)
    labels = [t.get_text() for t in ax.texts]
    leaves = (booster.trees[1].feature < 0).sum()
    assert sum(label.startswith("leaf ") for label in labels) == leaves
    with pytest.raises(ValueError, match="tree_idx 99 is not a tree"):
        gbflow.plot_tree(booster, tree_idx=99)
    with pytest.raises(ValueError, match="metric 'auc' was not recorded"):
        gbflow.plot_metric(booster, metric="auc")


def test_explain_on_the_data_device(device):
    """Explanations of device data (CuPy on the GPU) equal the host's exactly."""
    from gbflow.backend import get_backend
    booster, df = _train("multi:softprob", rounds=5, categorical=True)
    X = np.asarray(gbflow.backend.frames.feature_matrix(df, booster.feature_names,
                                                        booster.categories), dtype=np.float32)
    backend = get_backend(device)
    on_device = backend.xp.asarray(X)
    forest, cover, _, _ = _kernel_inputs(booster, X)
    explained = explain.ExplainedForest(forest, cover)
    for name, call in [("leaves", lambda x, b: explain.leaf_indices(b, x, forest)),
                       ("shap", lambda x, b: explain.contributions(b, x, explained,
                                                                   booster.base_margin)),
                       ("saabas", lambda x, b: explain.contributions(
                           b, x, explained, booster.base_margin, approximate=True)),
                       ("interactions", lambda x, b: explain.interactions(
                           b, x, explained, booster.base_margin))]:
        host = call(X, get_backend("cpu"))
        got = call(on_device, backend)
        got = got.get() if hasattr(got, "get") else got
        assert np.array_equal(got, host), name


def test_shap_kernel_without_shared_row_sums(kernels, monkeypatch):
    """The CUDA kernel sums a row in shared memory when a warp's rows fit there, else in
    ``out`` itself: both give the twin's values (forced here with no shared memory)."""
    if kernels is cpu_kernels:
        pytest.skip("a choice of the CUDA kernel only")
    from gbflow.backend import cuda_kernels
    monkeypatch.setattr(cuda_kernels, "_SHARED_SUMS", 0)
    booster, df = _train(rounds=3)
    X = df.to_numpy(np.float32)[:200].copy()  # writable: the GPU wrapper copies back into it
    forest, cover, sets, nodes = _kernel_inputs(booster, X)
    paths = explain.forest_paths(forest, cover)
    shape = (len(X), 1, X.shape[1] + 1)
    expected = numpy_kernels.shap_contributions(X, *nodes, *paths.arrays, np.zeros(shape))
    assert np.array_equal(kernels.shap_contributions(X, *nodes, *paths.arrays, np.zeros(shape)),
                          expected)


def _tree(feature, threshold, left, value, cover):
    from gbflow.tree import Tree
    n = len(feature)
    left = np.asarray(left, dtype=np.int32)
    return Tree(feature=np.asarray(feature, dtype=np.int32), bin_threshold=np.zeros(n, np.int32),
                threshold=np.asarray(threshold, dtype=np.float32),
                default_left=np.zeros(n, dtype=bool), left=left,
                right=np.where(left >= 0, left + 1, -1).astype(np.int32),
                value=np.asarray(value, dtype=np.float64), gain=np.zeros(n),
                cover=np.asarray(cover, dtype=np.float64))


def test_shap_kernels_with_single_leaf_trees_between_and_after(kernels):
    """Leaf-only trees have paths without edges: the kernels (the GPU's per-tree direction
    cache included) must still find each other path's tree."""
    deep = _tree([1, 0, 0, -1, -1, -1, -1], [0.5, 0.3, 0.7, 0, 0, 0, 0],
                 [1, 3, 5, -1, -1, -1, -1], [0, 0, 0, 1.0, -2.0, 3.0, 0.5],
                 [10, 6, 4, 2, 4, 1, 3])
    leaf = _tree([-1], [0], [-1], [0.25], [10])
    forest = predictor.FlatForest.from_trees([leaf, deep, leaf, deep, leaf])
    cover = np.concatenate([t.cover for t in (leaf, deep, leaf, deep, leaf)])
    paths = explain.forest_paths(forest, cover)
    X = np.random.default_rng(0).random((64, 2)).astype(np.float32)
    nodes = (forest.feature, forest.threshold, forest.default_left)
    for name, shape in (("shap_contributions", (64, 1, 3)), ("shap_interactions", (64, 1, 3, 3))):
        expected = getattr(numpy_kernels, name)(X, *nodes, *paths.arrays, np.zeros(shape))
        got = getattr(kernels, name)(X, *nodes, *paths.arrays, np.zeros(shape))
        assert np.array_equal(got, expected), name
    margin = numpy_kernels.predict_margins(X, *nodes, forest.left, forest.right, forest.value,
                                           forest.tree_root, forest.tree_group,
                                           np.zeros((64, 1)))
    shap = numpy_kernels.shap_contributions(X, *nodes, *paths.arrays, np.zeros((64, 1, 3)))
    np.testing.assert_allclose(shap.sum(axis=2), margin, atol=1e-12)


def test_empty_inputs_ranges_and_zero_round_models():
    import dask.dataframe as dd
    booster, df = _train(rounds=5)
    empty = booster.predict(df.iloc[:0], pred_contribs=True)
    assert empty.shape == (0, 6) and list(empty.columns) == booster.feature_names + ["bias"]
    filtered = dd.from_pandas(df, npartitions=3)
    filtered = filtered[filtered.a > filtered.a.max().compute() - 1e-3]  # some partitions empty
    assert len(booster.predict(filtered, pred_contribs=True).compute()) == \
        len(filtered.compute())
    # XGBoost's end 0: the last round
    assert np.array_equal(booster.predict(df, iteration_range=(2, 0)),
                          booster.predict(df, iteration_range=(2, 5)))
    with pytest.raises(TypeError, match="iteration_range must be a pair"):
        booster.predict(df, iteration_range=(0, 2.5))
    none = gbflow.train(df, label=np.zeros(len(df)), num_boost_round=0, verbose=False)
    assert np.array_equal(none.predict(df, iteration_range=(0, 0)), none.predict(df))
    assert none.predict(df, pred_leaf=True).shape == (len(df), 0)


def test_plot_metric_without_evaluation_results_is_a_clear_error():
    pytest.importorskip("matplotlib")
    from gbflow import GBFlowRegressor
    booster, df = _train(rounds=2)
    model = GBFlowRegressor(n_estimators=2).fit(df.to_numpy(), np.arange(len(df), dtype=float))
    for source in (model, booster):
        with pytest.raises(ValueError, match="no evaluation results"):
            gbflow.plot_metric(source)
