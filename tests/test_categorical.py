"""Categorical features: category columns by value, the split search, the walk kernels, the
model file, and the same model whatever the category order, partitioning or device."""
from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import gbflow
from gbflow import boosting, category_splits, inputs, predictor
from gbflow.backend import cuda_available, get_backend, numpy_kernels
from gbflow.collective import LOCAL
from gbflow.tree import Tree
from gbflow.xgboost_format import to_xgboost_dict


def _table(n=4000, n_categories=40, seed=0, missing=0.05):
    """A frame with a string-valued category column carrying per-category effects, a small
    integer-valued category column, a numeric column, and a regression label y."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(size=n_categories)
    code = rng.integers(0, n_categories, n)
    small = rng.integers(0, 3, n)
    x = rng.normal(size=n)
    y = effect[code] + 0.8 * (small == 1) + 0.5 * x + 0.3 * rng.normal(size=n)
    city = pd.Series([f"c{i:03d}" for i in code], dtype="category")
    city[rng.random(n) < missing] = None
    return pd.DataFrame({"city": city, "small": pd.Categorical(small), "x": x, "y": y})


needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU with CuPy on this machine")
PARAMS = {"max_depth": 4, "learning_rate": 0.3, "max_cat_to_onehot": 4}


# -- the split search --------------------------------------------------------------------------

def _search(xp, hist, n_categories, rule, constants=(1.0, 1.0, 0.0, 0.0, 0.0)):
    n_features = hist.shape[1]
    if xp is np:
        kernels = numpy_kernels
    else:
        from gbflow.backend import cuda_kernels as kernels
    return category_splits.search(kernels, xp.asarray(hist), np.arange(n_features),
                                  np.asarray(n_categories), np.ones(n_features, dtype=bool),
                                  constants, rule)


def _gain(G, H, GL, HL):
    return GL * GL / HL + (G - GL) ** 2 / (H - HL) - G * G / H


@pytest.mark.parametrize("seed", range(6))
def test_partition_search_finds_the_best_of_all_subsets(seed):
    """Without regularisation the sorted-prefix scan finds the best of every subset of the
    categories (Fisher's result for the score G^2 / H), checked by brute force."""
    rng = np.random.default_rng(seed)
    K = 6
    hist = np.zeros((1, 1, K + 1, 2), dtype=np.int64)
    hist[0, 0, 1:, 0] = rng.integers(-50, 50, K)
    hist[0, 0, 1:, 1] = rng.integers(1, 30, K)
    rule = category_splits.CategoryRule(max_cat_to_onehot=1, max_cat_threshold=64,
                                        cat_smooth=0.0, cat_l2=0.0, cat_noise_penalty=0.0)
    gain, feature, right_bins, default_left, left_sum = _search(np, hist, [K], rule)
    g, h = hist[0, 0, 1:, 0].astype(float), hist[0, 0, 1:, 1].astype(float)
    best = max(_gain(g.sum(), h.sum(), g[list(s)].sum(), h[list(s)].sum())
               for r in range(1, K) for s in itertools.combinations(range(K), r))
    assert feature[0] == 0 and np.isclose(gain[0], best, rtol=1e-12)
    left = ~right_bins[0, 1:]
    assert left_sum[0, 0] == hist[0, 0, 1:, 0][left].sum()
    assert left_sum[0, 1] == hist[0, 0, 1:, 1][left].sum()


def test_one_hot_search_tries_each_category_and_both_sides_for_missing():
    hist = np.zeros((1, 1, 4, 2), dtype=np.int64)
    hist[0, 0, :, 0] = [-30, 5, 40, -6]  # missing, then categories 0, 1, 2
    hist[0, 0, :, 1] = [10, 10, 10, 10]
    rule = category_splits.CategoryRule(max_cat_to_onehot=4, max_cat_threshold=64,
                                        cat_smooth=0.0, cat_l2=0.0, cat_noise_penalty=0.0)
    gain, feature, right_bins, default_left, left_sum = _search(np, hist, [3], rule)
    g = hist[0, 0, :, 0].astype(float)
    candidates = {}
    for k in range(3):
        for missing_right in (False, True):
            GR = g[k + 1] + (g[0] if missing_right else 0)
            HR = 10.0 * (2 if missing_right else 1)
            candidates[(k, missing_right)] = _gain(g.sum(), 40.0, g.sum() - GR, 40.0 - HR)
    (k, missing_right), best = max(candidates.items(), key=lambda kv: kv[1])
    assert np.isclose(gain[0], best, rtol=1e-12)
    assert right_bins[0].tolist() == [b == k + 1 for b in range(4)]
    assert bool(default_left[0]) == (not missing_right)


def test_cat_smooth_leaves_light_categories_out_and_cat_l2_lowers_the_gain():
    hist = np.zeros((1, 1, 5, 2), dtype=np.int64)
    hist[0, 0, 1:, 0] = [-40, 40, 30, -100]
    hist[0, 0, 1:, 1] = [20, 20, 20, 2]  # the last category holds little hessian
    plain = category_splits.CategoryRule(1, 64, 0.0, 0.0, 0.0)
    smooth = category_splits.CategoryRule(1, 64, 5.0, 0.0, 0.0)
    penalised = category_splits.CategoryRule(1, 64, 5.0, 10.0, 0.0)
    found = _search(np, hist, [4], plain)
    # unsmoothed, the light and extreme category wins alone: what cat_smooth is for
    assert found[2][0].tolist() == [False, False, False, False, True]
    smoothed = _search(np, hist, [4], smooth)
    assert not smoothed[2][0, 4]  # left out of the sort: it stays left
    assert smoothed[2][0].tolist() == [False, False, True, True, False]
    assert _search(np, hist, [4], penalised)[0][0] < smoothed[0][0]


@pytest.mark.parametrize("m", [5, 30, 300])
def test_noise_gain_is_the_gain_the_search_finds_in_noise(m):
    """Categories of equal hessian whose gradient sums differ by noise alone (variance 4 per
    unit of hessian): the unpenalised search's mean gain over 300 such nodes is 4 x
    noise_gain(m, 64), within the approximation's few percent and the mean's error."""
    rng = np.random.default_rng(m)
    n_nodes, hessian, variance = 300, 400, 4.0
    hist = np.zeros((n_nodes, 1, m + 1, 2), dtype=np.int64)
    hist[:, 0, 1:, 0] = np.rint(rng.normal(0.0, np.sqrt(variance * hessian), (n_nodes, m)))
    hist[:, 0, 1:, 1] = hessian
    rule = category_splits.CategoryRule(1, 64, 0.0, 0.0, cat_noise_penalty=0.0)
    gain = _search(np, hist, [m], rule)[0]
    expected = variance * category_splits.noise_gain(m, 64)
    assert abs(gain.mean() / expected - 1) < 0.08
    # the penalty is that gain, scaled by the dispersion and the parameter, and no more
    penalised = _search(np, hist, [m], dataclasses.replace(rule, cat_noise_penalty=1.5,
                                                             dispersion=variance))[0]
    assert np.allclose(penalised, gain - 1.5 * expected, rtol=0, atol=1e-9 * expected)


def test_noise_gain_grows_with_the_categories_and_stops_at_the_threshold():
    gains = [category_splits.noise_gain(m, 64) for m in (0, 1, 2, 10, 100, 1000)]
    assert gains[:2] == [0.0, 0.0] and all(a < b for a, b in zip(gains[1:], gains[2:]))
    assert np.isclose(category_splits.noise_gain(10_000, 5_000), 2 * 10_000 / np.pi)
    # a set of at most 8 categories finds less than one of at most 64
    assert category_splits.noise_gain(1000, 8) < category_splits.noise_gain(1000, 64)


def test_each_tree_gets_its_outputs_dispersion(monkeypatch):
    """Multiclass: tree k of a round is grown with sum g_k^2 / sum h_k of that round's
    gradients for output k (here round 0, from the base margins)."""
    rng = np.random.default_rng(6)
    n = 900
    df = pd.DataFrame({"c": pd.Categorical(rng.integers(0, 30, n)), "x": rng.normal(size=n),
                       "y": rng.integers(0, 3, n)})
    params = gbflow.Params(**{**PARAMS, "objective": "multi:softprob", "num_class": 3})
    seen = []
    original = boosting.grow_tree

    def recording(shardset, gh, scales, cuts, rules, *args, **kwargs):
        seen.append(rules.category.dispersion)
        return original(shardset, gh, scales, cuts, rules, *args, **kwargs)
    monkeypatch.setattr(boosting, "grow_tree", recording)
    model = boosting.fit(get_backend("cpu"), [inputs.load(df, "y")], params, 1, verbose=False)
    margin = np.tile(model.base_margin, (n, 1))
    g, h = params.loss.gradients(np, margin, df.y.to_numpy(np.float64), None)
    g, h = np.asarray(g, dtype=np.float64), np.asarray(h, dtype=np.float64)
    expected = (g ** 2).sum(axis=0) / h.sum(axis=0)
    assert len(seen) == 3 and len(set(seen)) == 3
    assert np.allclose(seen, expected, rtol=1e-9)


def test_n_sorted_counts_the_categories_the_search_sorts(kernels):
    """n_sorted (what the noise penalty is taken at) counts the categories 1..K whose scaled
    hessian is positive and at least cat_smooth (equal counts: the test is >=), never bins
    past the feature's K; one-hot features sort none. The twin's count by hand, every
    backend's equal to it."""
    rng = np.random.default_rng(4)
    hist, total = _category_histograms(rng, 6, [9, 30], ties=False)
    hist[:, 1, 5:9, 1] = 6  # scaled by 0.5: exactly cat_smooth 3.0
    hist[:, 0, 10:, 1] = 50  # past feature 0's 9 categories: never counted
    args = (hist, total, np.array([0, 1]), np.array([9, 30]))
    for smooth in (0.0, 3.0, 1e9):
        expected = numpy_kernels.categorical_splits(*args, False, 64, 0.5, 0.5, 1.0, 0.0, 0.0,
                                                    smooth, 0.0)[5]
        for f, k in enumerate([9, 30]):
            scaled = hist[:, f, 1:k + 1, 1] * 0.5
            assert expected[:, f].tolist() == \
                ((scaled > 0) & (scaled >= smooth)).sum(axis=1).tolist()
        got = kernels.categorical_splits(*args, False, 64, 0.5, 0.5, 1.0, 0.0, 0.0, smooth,
                                         0.0)[5]
        assert np.asarray(got).dtype == np.int32 and np.array_equal(expected, got)
    assert (expected == 0).all()  # no category holds 2e9 hessian
    onehot = kernels.categorical_splits(*args, True, 64, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0)[5]
    assert not np.asarray(onehot).any()


def test_each_feature_pays_the_penalty_of_its_own_sorted_categories():
    """Two sorted-partition features whose nodes sort very different numbers of categories:
    each (node, feature)'s gain is its unpenalised gain less the penalty at its own n_sorted
    (a penalty read from another feature's counts would pick another feature or gain)."""
    rng = np.random.default_rng(8)
    hist, total = _category_histograms(rng, 5, [12, 400], ties=False)
    rule = category_splits.CategoryRule(4, 64, 0.0, 0.0, cat_noise_penalty=0.0)
    free = category_splits.score(numpy_kernels, hist, np.array([0, 1]), np.array([12, 400]),
                                 np.ones(2, dtype=bool), (0.5, 0.25, 1.0, 0.0, 0.0), rule)
    (members, result), = free.groups
    raw_gain, n_sorted = result[0], result[5]
    assert (n_sorted[:, 1] > 10 * n_sorted[:, 0]).all()
    penalised = dataclasses.replace(rule, cat_noise_penalty=0.7, dispersion=2.0)
    scores = category_splits.score(numpy_kernels, hist, np.array([0, 1]), np.array([12, 400]),
                                   np.ones(2, dtype=bool), (0.5, 0.25, 1.0, 0.0, 0.0),
                                   penalised)
    gain, feature = scores.best(scores.arrays(), hist.shape[2])[:2]
    own = raw_gain - np.stack([penalised.penalty(n_sorted[:, j]) for j in range(2)], axis=1)
    assert np.array_equal(feature, np.argmax(own, axis=1))
    assert np.array_equal(gain, own[np.arange(len(own)), feature])


def test_gradient_dispersions_are_exact_and_do_not_depend_on_the_parts(device):
    """sum(g^2) / sum(h) per output, the same to the bit whether the rows come as one part or
    three, on the CPU and the GPU."""
    backend = get_backend(device)
    rng = np.random.default_rng(0)
    g = rng.normal(size=(5000, 3)).astype(np.float32)
    h = rng.uniform(0.1, 2.0, size=(5000, 3)).astype(np.float32)
    h[:100] = 0.0  # rows sampled out
    largest = np.array([[np.abs(g[:, k]).max(), h[:, k].max()] for k in range(3)])
    one = category_splits.gradient_dispersions(
        backend, LOCAL, [(backend.asarray(g), backend.asarray(h))], largest, 5000)
    three = category_splits.gradient_dispersions(
        backend, LOCAL, [(backend.asarray(g[a:b]), backend.asarray(h[a:b]))
                         for a, b in ((0, 1000), (1000, 1001), (1001, 5000))], largest, 5000)
    assert one.tobytes() == three.tobytes()
    direct = (g.astype(float) ** 2).sum(axis=0) / h.astype(float).sum(axis=0)
    assert np.allclose(one, direct, rtol=1e-12)
    if device == "cuda":
        on_cpu = category_splits.gradient_dispersions(get_backend("cpu"), LOCAL, [(g, h)],
                                                      largest, 5000)
        assert on_cpu.tobytes() == one.tobytes()


def _noise_and_signal_table(n, seed, signal, n_categories=500):
    """A binary label of a numeric effect plus, where ``signal``, per-category effects of a
    many-category column; the column is pure noise otherwise."""
    rng = np.random.default_rng(seed)
    code = rng.integers(0, n_categories, n)
    x = rng.normal(size=n)
    effect = rng.normal(0.0, 0.7, n_categories) if signal else np.zeros(n_categories)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x + effect[code])))).astype(np.float32)
    return pd.DataFrame({"tag": pd.Categorical(code), "x": x, "y": y})


@pytest.mark.parametrize("signal", [False, True])
def test_the_noise_penalty_keeps_noise_categories_out_and_signal_in(signal):
    """A 500-category column of noise: unpenalised category sets split on it and lose
    held-out log loss; penalised, the sets pay for the noise and the model is better. A column
    whose categories carry effects still gets sets, and they beat its ordinal codes."""
    from sklearn.metrics import log_loss
    df = _noise_and_signal_table(60_000, 3, signal)
    train, test = df.iloc[:40_000], df.iloc[40_000:]
    params = {"objective": "binary:logistic", "max_depth": 4, "learning_rate": 0.3}
    models = {penalty: gbflow.train(train, label="y", params={**params, "cat_noise_penalty":
                                                               penalty},
                                    num_boost_round=20, verbose=False)
              for penalty in (0.0, 1.0)}
    loss = {k: log_loss(test.y, m.predict(test).to_numpy()) for k, m in models.items()}
    sets = {k: sum(bool(t.categories) for t in m.trees) for k, m in models.items()}
    codes = train.assign(tag=train.tag.cat.codes.astype(float))
    ordinal = gbflow.train(codes, label="y", params=params, num_boost_round=20, verbose=False)
    ordinal_loss = log_loss(test.y, ordinal.predict(test.assign(
        tag=test.tag.cat.codes.astype(float))).to_numpy())
    if signal:
        assert sets[1.0] >= 5 and loss[1.0] < ordinal_loss - 0.01
    else:  # (measured: 16 and 2 sets; log loss 0.6093 and 0.6016, codes 0.6008)
        assert sets[0.0] >= 10 and sets[1.0] < sets[0.0] / 4
        assert loss[1.0] < loss[0.0] - 0.005 and loss[1.0] < ordinal_loss + 0.002


def _category_histograms(rng, n_nodes, n_categories, ties):
    """(hist (N, F, B, 2) int64, total (N, 2)): random sums per category (some empty, some
    without hessian), feature 0's bins summing to the nodes' totals, the others' missing bins
    making up the rest; ``ties`` copies one category's sums onto a run of others."""
    n_bins = int(max(n_categories)) + 1
    hist = np.zeros((n_nodes, len(n_categories), n_bins, 2), dtype=np.int64)
    for f, K in enumerate(n_categories):
        hist[:, f, :K + 1, 0] = rng.integers(-40, 40, (n_nodes, K + 1)) * \
            (rng.random((n_nodes, K + 1)) < 0.7)
        hist[:, f, :K + 1, 1] = rng.integers(0, 25, (n_nodes, K + 1)) * \
            (rng.random((n_nodes, K + 1)) < 0.8)
        if ties and K > 8:
            hist[:, f, 4:8] = hist[:, f, 2:3]
    total = hist[:, 0].sum(axis=1)
    for f in range(1, len(n_categories)):
        hist[:, f, 0] += total - hist[:, f].sum(axis=1)
    return hist, total


@pytest.mark.parametrize("onehot", [True, False])
@pytest.mark.parametrize("n_nodes,n_categories,threshold,smooth", [
    (1, [1], 64, 0.0), (3, [6, 2, 30], 64, 0.0), (5, [40, 7, 40], 4, 3.0),
    (4, [100, 3000, 17], 64, 1.0), (2, [5000], 8, 10.0), (7, [2, 2, 2, 2], 1, 0.0)])
def test_categorical_splits_kernel_against_its_twin(kernels, onehot, n_nodes, n_categories,
                                                    threshold, smooth):
    """Every (node, feature)'s best set, bit for bit; the twin's result names a set whose sums
    are its right_sum, of at most one category (one-hot) or max_cat_threshold, and for one-hot
    its gain is the best over every category and side (brute force)."""
    rng = np.random.default_rng(n_nodes + sum(n_categories) + threshold)
    for ties in (False, True):
        hist, total = _category_histograms(rng, n_nodes, n_categories, ties)
        columns = np.arange(len(n_categories))[::-1].copy()  # any order of columns
        args = (hist, total, columns, np.array(n_categories)[columns], onehot, threshold,
                0.5, 0.25, 1.0, 0.0, 0.5, smooth, 2.0)
        expected = numpy_kernels.categorical_splits(*args)
        got = kernels.categorical_splits(*args)
        assert len(expected) == len(got) == 6
        for a, b in zip(expected, got):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        # bounded weights (max_delta_step, the nodes' monotone bounds)
        node_bounds = np.stack([rng.normal(size=n_nodes) - 0.2, np.full(n_nodes, np.inf)], 1)
        bounded = numpy_kernels.categorical_splits(*args, bounds=(0.4, node_bounds, None))
        for a, b in zip(bounded, kernels.categorical_splits(*args,
                                                            bounds=(0.4, node_bounds, None))):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        gain, missing_right, right_sum, size, order, _ = expected
        for n in range(n_nodes):
            for j, f in enumerate(columns):
                if gain[n, j] == -np.inf:
                    assert size[n, j] == 0 and (order[n, j] == -1).all()
                    continue
                right = order[n, j, :size[n, j]]
                assert (order[n, j, size[n, j]:] == -1).all() and len(set(right)) == len(right)
                sums = hist[n, f, right + 1].sum(axis=0) + (hist[n, f, 0] if missing_right[n, j]
                                                            else 0)
                assert np.array_equal(right_sum[n, j], sums)
                assert size[n, j] <= (1 if onehot else threshold)
                if onehot:  # the best of every single category on either side, recomputed
                    tg, th = int(total[n, 0]), int(total[n, 1])
                    parent = numpy_kernels._score(tg * 0.5, th * 0.25, 1.0, 0.0)
                    best = max(numpy_kernels._candidate_gain(
                        tg - int(c[0]) - side * int(hist[n, f, 0, 0]),
                        th - int(c[1]) - side * int(hist[n, f, 0, 1]), tg, th, parent,
                        0.5, 0.25, 1.0, 0.0, 0.5)
                        for c in hist[n, f, 1:n_categories[f] + 1] if c.any() for side in (0, 1))
                    assert gain[n, j] == best


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("limit", [None, 512])
def test_the_gpu_sorts_many_categories_in_shared_or_global_memory(limit, monkeypatch):
    """Features of thousands of categories: the block's sort in shared memory, or (a lower
    cap) in global scratch, both the twin's result."""
    from conftest import _OnDevice

    from gbflow.backend import cuda_kernels
    monkeypatch.setattr(cuda_kernels, "_CATEGORY_SORT_LIMIT", limit)
    rng = np.random.default_rng(21)
    hist, total = _category_histograms(rng, 3, [700, 5000, 9000], ties=True)
    args = (hist, total, np.array([2, 0, 1]), np.array([9000, 700, 5000]), False, 64,
            0.5, 0.25, 1.0, 0.0, 0.5, 1.0, 2.0)
    expected = numpy_kernels.categorical_splits(*args)
    got = _OnDevice(cuda_kernels).categorical_splits(*args)
    assert len(expected) == len(got) == 6
    for a, b in zip(expected, got):
        assert np.array_equal(a, b)
    assert (expected[3] > 0).all()  # every (node, feature) found a set


@pytest.mark.gpu
@needs_gpu
def test_the_search_is_the_same_on_the_gpu():
    import cupy
    rng = np.random.default_rng(5)
    hist = np.zeros((7, 3, 30, 2), dtype=np.int64)
    hist[..., 0] = rng.integers(-100, 100, hist.shape[:3])
    hist[..., 1] = rng.integers(0, 40, hist.shape[:3])
    hist[:, :, 5:9] = hist[:, :, 1:2]  # equal sort keys: ties broken by category
    rule = category_splits.CategoryRule(4, 8, 3.0, 2.0)
    constants = (0.5, 0.25, 1.0, 0.5, 1.0)
    on_cpu = _search(np, hist, [2, 29, 17], rule, constants)
    on_gpu = _search(cupy, hist, [2, 29, 17], rule, constants)
    for a, b in zip(on_cpu, on_gpu):
        assert np.array_equal(a, cupy.asnumpy(b))


# -- the walk kernels --------------------------------------------------------------------------

def _categorical_forest(rng, n_features=3, n_trees=6, n_categories=70):
    """Depth-2 trees whose inner nodes split on numeric feature 0 or categorical features 1, 2
    (random category sets, some beyond one 32-bit word)."""
    trees = []
    for t in range(n_trees):
        feature = np.array([1, t % n_features, 2, -1, -1, -1, -1], dtype=np.int32)
        categories = {}
        for node in (0, 1, 2):
            if feature[node] > 0:
                size = rng.integers(1, n_categories)
                categories[node] = np.sort(rng.choice(n_categories, size, replace=False)) \
                    .astype(np.int32)
        threshold = np.where(feature == 0, rng.integers(1, 5, 7), 0).astype(np.float32)
        trees.append(Tree(feature=feature, bin_threshold=threshold.astype(np.int32),
                          threshold=threshold, default_left=rng.random(7) < 0.5,
                          left=np.array([1, 3, 5, -1, -1, -1, -1], dtype=np.int32),
                          right=np.array([2, 4, 6, -1, -1, -1, -1], dtype=np.int32),
                          value=rng.normal(size=7), gain=np.zeros(7), cover=np.zeros(7),
                          categories=categories))
    return trees


def test_category_walks_agree_with_the_twins_and_with_each_other(kernels):
    rng = np.random.default_rng(3)
    forest = predictor.FlatForest.from_trees(_categorical_forest(rng))
    X = rng.integers(0, 70, (500, 3)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[:, 0] = np.where(np.isnan(X[:, 0]), np.nan, X[:, 0] % 6)
    bins = np.where(np.isnan(X), 0, X + 1).astype(np.uint8)  # category k, value k: bin k + 1
    common = (forest.feature, forest.threshold, forest.default_left, forest.left, forest.right,
              forest.value, forest.tree_root, forest.tree_group)
    binned = (forest.feature, forest.bin_threshold) + common[2:]
    sets = (forest.cat_start, forest.cat_bits)
    start = np.zeros((500, 1))
    raw = numpy_kernels.predict_margins(X, *common, start.copy(), *sets)
    assert np.array_equal(numpy_kernels.predict_margins_binned(bins, *binned, start.copy(),
                                                               *sets), raw)
    assert np.array_equal(kernels.predict_margins(X, *common, start.copy(), *sets), raw)
    assert np.array_equal(kernels.predict_margins_binned(bins, *binned, start.copy(), *sets),
                          raw)


def test_a_categorical_stump_sends_its_set_right_and_missing_by_default():
    stump = Tree(feature=np.array([0, -1, -1], dtype=np.int32), bin_threshold=np.zeros(3, np.int32),
                 threshold=np.zeros(3, np.float32), default_left=np.array([False, False, False]),
                 left=np.array([1, -1, -1], dtype=np.int32),
                 right=np.array([2, -1, -1], dtype=np.int32), value=np.array([0.0, -1.0, 1.0]),
                 gain=np.zeros(3), cover=np.zeros(3),
                 categories={0: np.array([1, 40], dtype=np.int32)})
    forest = predictor.FlatForest.from_trees([stump])
    X = np.array([[0], [1], [2], [40], [41], [500], [np.nan]], dtype=np.float32)
    got = predictor.predict_margin(get_backend("cpu"), X, forest, np.zeros(1))[:, 0]
    assert got.tolist() == [-1, 1, -1, 1, -1, -1, 1]  # NaN: default right


# -- training ------------------------------------------------------------------------------------

def test_categories_are_matched_by_value_not_by_code(device):
    df = _table()
    model = gbflow.train(df, label="y", params={**PARAMS, "device": device},
                         num_boost_round=8, verbose=False)
    assert model.categories["small"].tolist() == [0, 1, 2]
    assert any(t.categories for t in model.trees)
    other = df.copy()
    cats = list(other["city"].cat.categories)
    other["city"] = other["city"].cat.set_categories(cats[::-1] + ["never seen"])
    again = gbflow.train(other, label="y", params={**PARAMS, "device": device},
                         num_boost_round=8, verbose=False)
    assert again.to_json() == model.to_json()
    assert np.array_equal(model.predict(other).to_numpy(), model.predict(df).to_numpy())


def test_training_margins_equal_predictions_and_the_model_file_round_trips(tmp_path):
    df = _table(missing=0.1)
    params = gbflow.Params(**{**PARAMS, "max_cat_threshold": 5})
    dataset = inputs.load(df, "y")
    booster = boosting.fit(get_backend("cpu"), [dataset], params, 10, verbose=False,
                           keep_training_margins=True)
    assert np.array_equal(booster.training_margins[0][:, 0], booster.predict(df, True))
    booster.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert loaded.to_json() == booster.to_json()
    assert np.array_equal(loaded.predict(df).to_numpy(), booster.predict(df).to_numpy())
    sets = [t.categories for t in booster.trees if t.categories]
    assert all(len(s) <= 5 for tree_sets in sets for s in tree_sets.values() if len(s) > 3)


def test_unseen_categories_and_missing_values_take_the_default_direction():
    df = _table()
    model = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5, verbose=False)
    new = df.head(50).copy()
    new["city"] = pd.Categorical(["not in training"] * 50)
    missing = df.head(50).copy()
    missing["city"] = pd.Categorical([None] * 50, categories=["c000"])
    assert np.array_equal(model.predict(new).to_numpy(), model.predict(missing).to_numpy())


@pytest.mark.parametrize("extra", [{}, {"colsample_bynode": 0.5, "seed": 2}])
def test_the_model_does_not_depend_on_the_partitioning(extra):
    """Parts holding different categories (sorted by category: disjoint sets) give the model
    of one part; with a feature sample per node too (the category sets masked per node)."""
    df = _table(n=3000).sort_values("city").reset_index(drop=True)
    params = gbflow.Params(**PARAMS, **extra)
    one = boosting.fit(get_backend("cpu"), [inputs.load(df, "y")], params, 6, verbose=False)
    pieces = [df.iloc[:1000], df.iloc[1000:1700], df.iloc[1700:]]
    parts = [inputs.load(p.assign(city=p.city.astype(str).astype("category")), "y")
             for p in pieces]
    assert [len(p.categories["city"]) for p in parts] != [40] * 3
    three = boosting.fit(get_backend("cpu"), parts, params, 6, verbose=False)
    assert three.to_json() == one.to_json()


def test_categorical_splits_beat_ordinal_codes_on_held_out_data():
    df = _table(n=8000, n_categories=300, seed=1)
    train, test = df.iloc[:6000], df.iloc[6000:]
    params = {**PARAMS, "max_depth": 4, "learning_rate": 0.2}
    model = gbflow.train(train, label="y", params=params, num_boost_round=40, verbose=False)

    def ordinal(d):
        return d.assign(city=d.city.cat.codes.astype(float), small=d.small.cat.codes)
    plain = gbflow.train(ordinal(train), label="y", params=params, num_boost_round=40,
                         verbose=False)
    error = np.mean((model.predict(test).to_numpy() - test.y) ** 2)
    plain_error = np.mean((plain.predict(ordinal(test)).to_numpy() - test.y) ** 2)
    assert error < 0.8 * plain_error


def test_eval_sets_and_continued_training_with_categories():
    df = _table(n=3000)
    train, valid = df.iloc[:2000], df.iloc[2000:].copy()
    valid["city"] = valid["city"].cat.add_categories(["only in valid"])
    valid.loc[valid.index[:20], "city"] = "only in valid"
    result = {}
    full = gbflow.train(train, label="y", params=PARAMS, num_boost_round=10,
                        evals=[(valid, "valid")], verbose=False)
    result = full.evals_result["valid"]["rmse"]
    assert np.isclose(result[-1], np.sqrt(np.mean((full.predict(valid) - valid.y) ** 2)),
                      rtol=1e-9)
    first = gbflow.train(train, label="y", params=PARAMS, num_boost_round=4, verbose=False)
    rest = gbflow.train(train, label="y", params=PARAMS, num_boost_round=6, verbose=False,
                        xgb_model=first)
    assert rest.to_json() == gbflow.train(train, label="y", params=PARAMS, num_boost_round=10,
                                          verbose=False).to_json()


def test_a_model_without_categories_writes_no_categorical_entries():
    df = _table().drop(columns=["city", "small"])
    d = json.loads(gbflow.train(df, label="y", num_boost_round=2, verbose=False).to_json())
    assert "categories" not in d and "max_cat_to_onehot" not in d["params"]
    assert all("categories" not in t for t in d["trees"])


# -- errors --------------------------------------------------------------------------------------

def test_string_columns_are_told_to_become_categories():
    df = _table().assign(city=lambda d: d.city.astype(str))
    with pytest.raises(TypeError, match=r"'city' \((object|str)\).*astype\('category'\)"):
        gbflow.train(df, label="y", verbose=False)


def test_enable_categorical_false_refuses_category_columns():
    with pytest.raises(TypeError, match=r"'city', 'small'.*enable_categorical=False"):
        gbflow.train(_table(), label="y", params={"enable_categorical": False}, verbose=False)


def test_prediction_needs_the_training_dtypes():
    df = _table()
    model = gbflow.train(df, label="y", params=PARAMS, num_boost_round=2, verbose=False)
    with pytest.raises(TypeError, match=r"'city'.*categorical in training"):
        model.predict(df.assign(city=df.city.cat.codes))
    with pytest.raises(TypeError, match=r"ndarray.*categorical features"):
        model.predict(np.zeros((3, 3)))
    numeric = gbflow.train(df.assign(small=df.small.astype(int)), label="y", params=PARAMS,
                           num_boost_round=2, verbose=False)
    with pytest.raises(TypeError, match=r"'small'.*numeric in training"):
        numeric.predict(df)


def test_categories_of_another_kind_than_trainings_are_refused():
    """Number categories in training, the same as strings at prediction (or in an evaluation
    set): no value matches, so every row silently took the missing branch. Now a TypeError
    naming the column; number categories of another dtype (float for int) still match."""
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.standard_normal(300),
                       "d": pd.Categorical(rng.choice([1, 2, 3], 300))})
    df["y"] = df["a"] + df["d"].astype(int)
    model = gbflow.train(df, label="y", params=PARAMS, num_boost_round=3, verbose=False)
    as_floats = df.assign(d=pd.Categorical(df["d"].astype(float)))
    assert np.array_equal(model.predict(as_floats), model.predict(df))
    as_strings = df.assign(d=pd.Categorical(df["d"].astype(str)))
    match = r"categorical feature 'd' has categories of strings here \(e\.g\. '1'\) where " \
            r"the model's are numbers \(e\.g\. 1\)"
    with pytest.raises(TypeError, match=match):
        model.predict(as_strings)
    with pytest.raises(TypeError, match=match):
        gbflow.train(df, label="y", params=PARAMS, num_boost_round=1, verbose=False,
                     evals=[(as_strings, "v")])


def test_a_categorical_feature_also_splits_by_value_order():
    """Categories whose effect follows their value order: the value-order split (plain
    reg_lambda) beats the category set, which pays cat_l2, and is written as a threshold."""
    rng = np.random.default_rng(2)
    level = rng.integers(0, 30, 3000)
    df = pd.DataFrame({"level": pd.Categorical(level), "y": (level >= 15) + 0.1 * rng.normal(
        size=3000)})
    model = gbflow.train(df, label="y", params={"max_depth": 1}, num_boost_round=1,
                         verbose=False)
    root = model.trees[0]
    assert root.feature[0] == 0 and not root.categories and root.threshold[0] == 15
    penalty_free = gbflow.train(df, label="y", params={"max_depth": 1, "cat_l2": 0.0},
                                num_boost_round=1, verbose=False)
    assert not penalty_free.trees[0].categories  # a tie: the value-order split wins it
    assert np.array_equal(penalty_free.predict(df), model.predict(df))


def _assert_dask_gives_the_local_model(ddf, df, local) -> None:
    """Training on ``ddf`` on a two-worker LocalCluster gives ``local`` (trained on ``df``, the
    same rows) to the byte, and its predictions of ``ddf`` are local's of ``df``."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        model = gbflow.train(ddf, label="y", params=PARAMS, num_boost_round=5, verbose=False)
        predicted = model.predict(ddf).compute()
    assert model.to_json() == local.to_json()
    assert np.array_equal(predicted.to_numpy(), local.predict(df).to_numpy())


def test_dask_partitions_with_unknown_categories_give_the_in_process_model():
    dd = pytest.importorskip("dask.dataframe")
    df = _table(n=3000).sort_values("city").reset_index(drop=True)
    text = df.assign(city=df.city.astype(str).where(df.city.notna()))
    ddf = dd.from_pandas(text, npartitions=3)
    ddf = ddf.assign(city=ddf.city.astype("category"))  # each partition: its own categories
    assert not ddf.city.cat.known
    local = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5, verbose=False)
    _assert_dask_gives_the_local_model(ddf, df, local)


def test_dask_category_columns_read_from_parquet_give_the_in_process_model(tmp_path):
    """Category columns written to Parquet by pandas and read back by Dask in several files (a
    pipeline's shape): the in-process model and its predictions, on a LocalCluster."""
    dd = pytest.importorskip("dask.dataframe")
    df = _table(n=3000, n_categories=300)
    dd.from_pandas(df, npartitions=3).to_parquet(tmp_path / "table")
    ddf = dd.read_parquet(tmp_path / "table")
    assert isinstance(ddf.city.dtype, pd.CategoricalDtype) and ddf.npartitions == 3
    local = gbflow.train(df, label="y", params=PARAMS, num_boost_round=5, verbose=False)
    assert any(t.categories for t in local.trees)  # category sets, not value order alone
    _assert_dask_gives_the_local_model(ddf, df, local)


@pytest.mark.gpu
@needs_gpu
def test_cudf_category_columns_give_the_pandas_model():
    cudf = pytest.importorskip("cudf")
    df = _table()
    on_gpu = cudf.from_pandas(df)
    params = {**PARAMS, "device": "cuda"}
    model = gbflow.train(on_gpu, label="y", params=params, num_boost_round=6, verbose=False)
    same = gbflow.train(df, label="y", params=params, num_boost_round=6, verbose=False)
    assert model.to_json() == same.to_json()
    assert np.array_equal(model.predict(on_gpu).to_numpy(), same.predict(df).to_numpy())


def test_the_estimators_take_the_categorical_parameters():
    pytest.importorskip("sklearn")
    df = _table(n=1500)
    X, y = df.drop(columns="y"), df["y"]
    model = gbflow.GBFlowRegressor(n_estimators=5, max_cat_to_onehot=50, cat_smooth=2.0,
                                   cat_l2=1.0).fit(X, y)
    direct = gbflow.train(X, y, params={"max_cat_to_onehot": 50, "cat_smooth": 2.0,
                                        "cat_l2": 1.0}, num_boost_round=5, verbose=False)
    assert model.get_booster().params.max_cat_to_onehot == 50
    assert np.array_equal(model.predict(X), np.asarray(direct.predict(X)))
    with pytest.raises(TypeError, match="enable_categorical=False"):
        gbflow.GBFlowClassifier(enable_categorical=False).fit(X, (y > 0).astype(int))


# -- feature_types: numeric columns whose values are categories ---------------------------------

CODES = np.arange(60) * 7 + 3  # category codes with gaps: their positions are not the codes


def _coded_arrays(n=4000, seed=0):
    """(X (n, 2) float32: category codes 3, 10, ..., 416 with NaN missing, a numeric column;
    y; the same as a frame with a category column)."""
    rng = np.random.default_rng(seed)
    which = rng.integers(0, 60, n)
    code = CODES[which].astype(np.float32)
    code[rng.random(n) < 0.05] = np.nan
    effect = rng.normal(size=60)
    x = rng.normal(size=n).astype(np.float32)
    y = np.where(np.isnan(code), 0.0, effect[which]) + 0.5 * x
    frame = pd.DataFrame({"f0": pd.Categorical(code), "f1": x})
    return np.stack([code, x], axis=1), y, frame


def _trees(model):
    return [t.to_dict() for t in model.trees]


def test_feature_types_make_an_arrays_codes_categorical(device):
    """Codes in an array marked "c" train the trees of the same codes as a category column
    (categories by value), on the CPU and the GPU; prediction takes arrays and numeric frames,
    values unseen in training go with missing ones, and the model file keeps the types."""
    X, y, frame = _coded_arrays()
    params = {**PARAMS, "device": device, "feature_types": ["c", "q"]}
    given = _on(device, X)
    typed = gbflow.train(given, _on(device, y), params=params, num_boost_round=6,
                         verbose=False)
    assert np.array_equal(to_host(given), X, equal_nan=True)  # the caller's array: unwritten
    assert typed.categories["f0"].tolist() == CODES.tolist()
    dtyped = gbflow.train(frame, y, params={**PARAMS, "device": device}, num_boost_round=6,
                          verbose=False)
    assert list(typed.categories) == ["f0"] and any(t.categories for t in typed.trees)
    assert _trees(typed) == _trees(dtyped)
    on_arrays = np.asarray(to_host(typed.predict(given)))
    assert np.array_equal(to_host(given), X, equal_nan=True)
    assert np.array_equal(on_arrays, dtyped.predict(frame).to_numpy())
    assert np.array_equal(np.asarray(to_host(typed.predict(given))), on_arrays)
    numeric_frame = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1]})
    assert np.array_equal(typed.predict(numeric_frame).to_numpy(), on_arrays)
    unseen = X[:5].copy()
    unseen[:, 0] = 1000.0
    missing = X[:5].copy()
    missing[:, 0] = np.nan
    assert np.array_equal(typed.predict(unseen), typed.predict(missing))
    again = gbflow.Booster.from_dict(json.loads(typed.to_json()))
    assert again.params.feature_types == ("c", "q")
    assert np.array_equal(again.predict(X), typed.predict(X))


def _on(device, array):
    if device == "cuda":
        import cupy
        return cupy.asarray(array)
    return array


def to_host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def test_feature_types_with_eval_sets_batches_and_missing():
    """An evaluation set's codes unseen in training, batches whose parts hold different codes,
    and XGBoost's missing (a value read as missing before the values become categories)."""
    X, y, frame = _coded_arrays(n=3000)
    params = {**PARAMS, "feature_types": ["c", "q"]}
    shifted = X[:500] + np.float32([7, 0])  # codes 10..423: all but 423 seen in training
    one = gbflow.train(X, y, params=params, num_boost_round=5, verbose=False,
                       evals=[((shifted, y[:500]), "shifted")])
    rmse = np.sqrt(np.mean((one.predict(shifted) - y[:500]) ** 2))
    assert np.isclose(one.evals_result["shifted"]["rmse"][-1], rmse, rtol=1e-6)
    order = np.argsort(np.nan_to_num(X[:, 0], nan=-1), kind="stable")  # disjoint code sets
    pieces = [(X[order[a:b]], y[order[a:b]]) for a, b in ((0, 1000), (1000, 3000))]
    batched = gbflow.train(pieces, params=params, num_boost_round=5, verbose=False)
    whole = gbflow.train(X[order], y[order], params=params, num_boost_round=5, verbose=False)
    assert _trees(batched) == _trees(whole)
    as_missing = X.copy()
    as_missing[np.isnan(as_missing[:, 0]), 0] = -1.0
    with_missing = gbflow.train(as_missing, y, params={**params, "missing": -1.0},
                                num_boost_round=5, verbose=False)
    assert _trees(with_missing) == _trees(gbflow.train(X, y, params=params, num_boost_round=5,
                                                       verbose=False))
    assert -1.0 not in with_missing.categories["f0"]


def test_typed_categories_export_as_their_values_to_xgboost_and_treelite():
    """XGBoost given the same array (feature_types "c") reads the values as category codes:
    the exported sets hold the values, so XGBoost predicts what gbflow does."""
    xgb = pytest.importorskip("xgboost")
    X, y, _ = _coded_arrays()
    model = gbflow.train(X, y, params={**PARAMS, "feature_types": ["c", "q"]},
                         num_boost_round=6, verbose=False)
    ours = model.predict(X)
    theirs = model.to_xgboost().predict(xgb.DMatrix(X, feature_names=["f0", "f1"],
                                                    feature_types=["c", "q"],
                                                    enable_categorical=True))
    assert np.allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    treelite = pytest.importorskip("treelite")
    leaves = treelite.gtil.predict(model.to_treelite(), X)
    assert np.allclose(np.ravel(leaves), ours, rtol=1e-6, atol=1e-6)
    fractional = gbflow.train(X + np.float32([0.5, 0]), y, params={
        **PARAMS, "feature_types": ["c", "q"]}, num_boost_round=2, verbose=False)
    with pytest.raises(ValueError, match="whole numbers"):
        fractional.to_xgboost()


def test_typed_values_are_canonical_and_checked():
    """-0.0 and 0.0 are one category whichever comes first (the model does not depend on the
    parts); infinite values and values beyond float32's whole numbers are refused by name;
    at prediction they are unseen categories."""
    rng = np.random.default_rng(1)
    code = rng.integers(0, 5, 600).astype(np.float32)
    y = code + rng.normal(size=600)
    X = np.stack([code, rng.normal(size=600).astype(np.float32)], axis=1)
    params = {**PARAMS, "feature_types": ["c", "q"]}
    plus, minus = X.copy(), X.copy()
    minus[code == 0, 0] = -0.0
    one = gbflow.train(minus, y, params=params, num_boost_round=3, verbose=False)
    halves = gbflow.train([(minus[:300], y[:300]), (plus[300:], y[300:])], params=params,
                          num_boost_round=3, verbose=False)
    assert one.to_json() == halves.to_json()
    assert one.categories["f0"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    for bad in (np.inf, 2.0**24):
        wrong = X.copy()
        wrong[7, 0] = bad
        with pytest.raises(ValueError, match="'f0' is categorical.*2\\*\\*24"):
            gbflow.train(wrong, y, params=params, num_boost_round=1, verbose=False)
        unseen = X[:3].copy()
        unseen[:, 0] = bad
        gone = X[:3].copy()
        gone[:, 0] = np.nan
        assert np.array_equal(one.predict(unseen), one.predict(gone))


def test_continuing_a_typed_model_needs_its_feature_types():
    """What counts is which features are categorical by value: a category column's model
    continues with or without feature_types; a typed model continues with its own (taken from
    the model when params do not name them, as XGBoost's model files keep them), not others."""
    X, y, frame = _coded_arrays(n=1000)
    params = {**PARAMS, "feature_types": ["c", "q"]}
    model = gbflow.train(X, y, params=params, num_boost_round=2, verbose=False)
    with pytest.raises(ValueError, match="feature_types"):
        gbflow.train(X, y, params={**PARAMS, "feature_types": ["q", "q"]}, num_boost_round=2,
                     verbose=False, xgb_model=model)
    whole = _trees(gbflow.train(X, y, params=params, num_boost_round=4, verbose=False))
    for given in (params, PARAMS):
        again = gbflow.train(X, y, params=given, num_boost_round=2, verbose=False,
                             xgb_model=model)
        assert _trees(again) == whole
    on_frame = gbflow.train(frame, y, params=PARAMS, num_boost_round=2, verbose=False)
    gbflow.train(frame, y, params=params, num_boost_round=1, verbose=False,
                 xgb_model=on_frame)


def test_category_columns_with_feature_types_export_as_positions():
    """feature_types marking a category column (numeric categories) changes nothing for it:
    its frames carry positions as codes, and the exports write positions."""
    xgb = pytest.importorskip("xgboost")
    X, y, frame = _coded_arrays()
    frame["f0"] = frame["f0"].cat.rename_categories(lambda v: int(v))  # int categories
    model = gbflow.train(frame, y, params={**PARAMS, "feature_types": ["c", "q"]},
                         num_boost_round=5, verbose=False)
    assert model.by_value == () and list(model.categories) == ["f0"]
    theirs = model.to_xgboost().predict(xgb.DMatrix(frame, enable_categorical=True))
    assert np.allclose(theirs, model.predict(frame).to_numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params", [{"max_depth": 4}, {"max_depth": 3, "max_cat_threshold": 1}])
def test_the_xgboost_export_records_the_categories_and_tests_them_by_set(params):
    """The export carries ASCII string category columns' categories (XGBoost's "cats"), so
    XGBoost predicts a frame whose categories come in another order as gbflow does (it predicted
    them by position); value-order splits on a category column are written as sets, which
    XGBoost's dumps read (they refused a numeric test of a categorical feature). Integer or
    non-ASCII categories leave the record out (XGBoost 3.2 needs the frame's integer type and
    mishandles other bytes): frames in the model's sorted order predict as before."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(21)
    n = 2000
    frame = pd.DataFrame({"a": rng.normal(size=n),
                          "c": pd.Categorical(rng.choice(["lo", "mid", "hi", "zz", "ab"], n),
                                              categories=["lo", "mid", "hi", "zz", "ab"]),
                          "k": pd.Categorical(rng.choice(["x", "y"], n))})
    y = frame["c"].isin(["mid", "ab"]) * 2.0 + (frame["k"] == "y") + frame["a"]
    model = gbflow.train(frame, y, params=params, num_boost_round=8, verbose=False)
    theirs = model.to_xgboost()
    reordered = frame.assign(c=frame["c"].cat.reorder_categories(["ab", "zz", "hi", "mid", "lo"]))
    ours = model.predict(frame).to_numpy()
    assert np.array_equal(model.predict(reordered).to_numpy(), ours)
    for data in (frame, reordered):
        np.testing.assert_allclose(theirs.predict(xgb.DMatrix(data, enable_categorical=True)),
                                   ours, rtol=1e-5, atol=1e-5)
    assert len(theirs.get_dump()) == 8 and len(theirs.trees_to_dataframe())
    for other in (pd.Categorical(rng.choice([30, 10, 20, 5], n)),
                  pd.Categorical(rng.choice(["café", "naïve", "x"], n))):
        typed = frame.assign(k=other)
        model = gbflow.train(typed, y, params=params, num_boost_round=3, verbose=False)
        assert "cats" not in to_xgboost_dict(model)["learner"]["gradient_booster"]["model"]
        in_order = typed.assign(
            c=typed["c"].cat.reorder_categories(sorted(typed["c"].cat.categories)))
        np.testing.assert_allclose(
            model.to_xgboost().predict(xgb.DMatrix(in_order, enable_categorical=True)),
            model.predict(typed).to_numpy(), rtol=1e-5, atol=1e-5)


def test_a_feature_without_any_category_round_trips():
    """An all-missing categorical feature (a typed column, or a category column whose rows
    are all null) has an empty category list; its model file loads."""
    X, y, frame = _coded_arrays(n=500)
    X[:, 0] = np.nan
    frame["f0"] = pd.Categorical([None] * 500, categories=[1.0])
    for data, params in ((X, {**PARAMS, "feature_types": ["c", "q"]}), (frame, PARAMS)):
        model = gbflow.train(data, y, params=params, num_boost_round=2, verbose=False)
        assert len(model.categories["f0"]) == 0
        loaded = gbflow.Booster.from_dict(json.loads(model.to_json()))
        assert loaded.by_value == model.by_value
        assert np.array_equal(np.asarray(loaded.predict(data)), np.asarray(model.predict(data)))


def test_a_bool_category_column_round_trips_through_the_model_file(tmp_path):
    """A bool column made categorical (categories False, True) is written as JSON's false and
    true; the file loads (it was refused as "neither numbers nor strings") and predicts as the
    trained model, also for a frame whose column knows only one of the values. Mixed kinds are
    still refused."""
    rng = np.random.default_rng(8)
    n = 2000
    frame = pd.DataFrame({"a": rng.normal(size=n),
                          "flag": pd.Categorical(rng.random(n) < 0.4)})
    y = (frame["a"] + 1.5 * frame["flag"].astype(bool) + 0.3 * rng.normal(size=n) > 0.7)
    model = gbflow.train(frame, y.astype(float), params=PARAMS, num_boost_round=4,
                         verbose=False)
    assert model.categories["flag"].tolist() == [False, True]
    assert any(t.categories for t in model.trees) or \
        any(f == 1 for t in model.trees for f in t.feature)
    model.save_model(tmp_path / "m.json")
    loaded = gbflow.load_model(tmp_path / "m.json")
    assert loaded.to_json() == model.to_json()
    assert np.array_equal(loaded.predict(frame).to_numpy(), model.predict(frame).to_numpy())
    true_only = frame[frame["flag"].astype(bool)].copy()
    true_only["flag"] = pd.Categorical([True] * len(true_only))
    assert np.array_equal(loaded.predict(true_only).to_numpy(),
                          model.predict(frame[frame["flag"].astype(bool)]).to_numpy())
    d = json.loads(model.to_json())
    d["categories"]["flag"] = [False, 1]
    with pytest.raises(ValueError, match="mixes kinds"):
        gbflow.Booster.from_dict(d)


def test_a_categorical_model_file_from_before_the_noise_penalty_keeps_it_off():
    """A file without cat_noise_penalty was trained without it: it loads with 0, so continued
    training grows the trees it would have."""
    model = gbflow.train(_table(n=1000), label="y", params=PARAMS, num_boost_round=2,
                         verbose=False)
    d = json.loads(model.to_json())
    assert d["params"]["cat_noise_penalty"] == 1.0
    del d["params"]["cat_noise_penalty"]
    assert gbflow.Booster.from_dict(d).params.cat_noise_penalty == 0.0


def test_feature_types_errors_name_what_is_wrong():
    X, y, frame = _coded_arrays(n=200)
    cases = [({"feature_types": ["c"]}, X, ValueError, "lists 1 types but training data has 2"),
             ({"feature_types": ["c", "category"]}, X, ValueError, r"feature_types\[1\]"),
             ({"feature_types": "cq"}, X, TypeError, "list of one type per feature"),
             ({"feature_types": ["c", "q"], "enable_categorical": False}, X, ValueError,
              "enable_categorical=False"),
             ({"feature_types": ["q", "q"]}, frame, TypeError, "marks the category column"),
             ({"feature_types": ["c", "q"]}, sparse.csr_matrix(np.nan_to_num(X)), TypeError,
              "sparse matrix")]
    for params, data, error, message in cases:
        with pytest.raises(error, match=message):
            gbflow.train(data, y, params=params, num_boost_round=1, verbose=False)


def test_the_estimators_take_feature_types():
    X, y, _ = _coded_arrays(n=2000)
    model = gbflow.GBFlowRegressor(n_estimators=4, feature_types=["c", "q"]).fit(X, y)
    direct = gbflow.train(X, y, params={"feature_types": ["c", "q"], "seed": 0},
                          num_boost_round=4, verbose=False)
    assert list(model.get_booster().categories) == ["f0"]
    assert np.array_equal(model.predict(X), direct.predict(X))


def test_dask_partitions_with_typed_codes_give_the_in_process_model():
    distributed = pytest.importorskip("distributed")
    dd = pytest.importorskip("dask.dataframe")
    X, y, _ = _coded_arrays(n=3000)
    df = pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "y": y}).sort_values("f0").reset_index(
        drop=True)
    params = {**PARAMS, "feature_types": ["c", "q"]}
    local = gbflow.train(df, label="y", params=params, num_boost_round=5, verbose=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        ddf = dd.from_pandas(df, npartitions=3)  # each partition: its own codes
        model = gbflow.train(ddf, label="y", params=params, num_boost_round=5, verbose=False)
        predicted = model.predict(ddf).compute()
    assert model.to_json() == local.to_json()
    assert np.array_equal(predicted.to_numpy(), local.predict(df).to_numpy())


@pytest.mark.parametrize("n_categories", [12, 30])
def test_missing_values_a_sorted_set_never_saw_go_as_xgboosts(device, n_categories):
    """A category-set split (sorted, not one hot) at a node without missing values keeps them
    on the missing-right side, as XGBoost's: a model trained without NaN predicts NaN rows
    as XGBoost's does, and every category too (one split of the categories' codes)."""
    xgb = pytest.importorskip("xgboost")
    for seed in range(3):
        rng = np.random.default_rng(seed)
        n = 3000
        codes = rng.integers(0, n_categories, n)
        x = rng.integers(0, 10, n).astype(np.float32)
        y = (rng.normal(size=n_categories) * 2)[codes] + 0.3 * x + rng.normal(size=n) * 0.3
        df = pd.DataFrame({"c": pd.Categorical(codes, categories=range(n_categories)), "x": x})
        params = {"max_depth": 1, "max_cat_to_onehot": 4}
        ours = gbflow.train(df, y, {**params, "device": device}, 1, verbose=False)
        theirs = xgb.train({**params, "tree_method": "hist"},
                           xgb.DMatrix(df, y, enable_categorical=True), 1)
        probe = pd.DataFrame({"c": pd.Categorical(list(range(n_categories)) + [np.nan],
                                                  categories=range(n_categories)),
                              "x": np.zeros(n_categories + 1, np.float32)})
        np.testing.assert_allclose(
            np.asarray(ours.predict(probe)),
            theirs.predict(xgb.DMatrix(probe, enable_categorical=True)), atol=1e-5)
