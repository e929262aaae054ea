"""Every fast kernel against its plain NumPy twin, exactly, including edge cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbflow import _dtypes, quantize
from gbflow.backend import cpu_kernels, numpy_kernels


def random_level(rng, n_rows, n_features, n_bins, n_nodes, missing=0.1):
    bins = rng.integers(1, n_bins, size=(n_rows, n_features)).astype(_dtypes.bin_dtype(n_bins))
    bins[rng.random((n_rows, n_features)) < missing] = 0
    if n_features >= 3:
        bins[:, 2] = 0  # an all-missing column
    gh = np.stack([rng.integers(-2**40, 2**40, n_rows), rng.integers(0, 2**40, n_rows)], axis=1)
    node = rng.integers(0, n_nodes, size=n_rows)
    row_index = np.argsort(node, kind="stable").astype(_dtypes.ROW_INDEX)
    count = np.bincount(node, minlength=n_nodes).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    return bins, gh, row_index, start, count


def random_partition_split(rng, n_features, n_bins, n_nodes):
    """(feature, bin_threshold, default_left, small_is_left) of n_nodes random splits."""
    return (rng.integers(0, n_features, size=n_nodes),
            rng.integers(1, max(2, n_bins - 1), size=n_nodes), rng.random(n_nodes) < 0.5,
            rng.random(n_nodes) < 0.5)


CASES = [  # n_rows, n_features, n_bins, n_nodes
    (0, 3, 16, 1), (1, 3, 16, 1), (1000, 5, 2, 3), (1000, 4, 256, 7), (777, 3, 300, 5),
    (5000, 2, 64, 64), (3001, 3, 16, 300),  # many nodes in one launch, most tiny or empty
    (30011, 40, 256, 3),  # several thread blocks per node; features in two shared-memory groups
    (2000, 2, 9000, 2),  # one feature's histogram too large for shared memory
    (20000, 200, 256, 6),  # wide: on the GPU the partition and the children's histograms are
                           # two passes (more feature groups than GBFLOW_CUDA_FUSED_MAX_GROUPS)
]


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_build_histograms(kernels, n_rows, n_features, n_bins, n_nodes):
    rng = np.random.default_rng(n_rows + n_bins)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    expected = numpy_kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
    got = kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
    assert got.dtype == np.int64 and np.array_equal(got, expected)
    # invariant: every feature's bins add up to the node's total
    if n_rows:
        totals = np.array([gh[row_index[s:s + c]].sum(axis=0) for s, c in zip(start, count)])
        assert np.array_equal(got.sum(axis=2), np.repeat(totals[:, None, :], n_features, axis=1))


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_and_histogram(kernels, n_rows, n_features, n_bins, n_nodes):
    rng = np.random.default_rng(7 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    feature = rng.integers(0, n_features, size=n_nodes)
    threshold = rng.integers(1, max(2, n_bins - 1), size=n_nodes)
    default_left = rng.random(n_nodes) < 0.5
    small_is_left = rng.random(n_nodes) < 0.5
    ref_rows = row_index.copy()
    ref_left, ref_hist = numpy_kernels.partition_and_histogram(
        bins, np.ascontiguousarray(bins.T), gh, ref_rows, start, count, feature, threshold, default_left, small_is_left, n_bins)
    rows = row_index.copy()
    left, hist = kernels.partition_and_histogram(
        bins, np.ascontiguousarray(bins.T), gh, rows, start, count, feature, threshold, default_left, small_is_left, n_bins)
    assert np.array_equal(left, ref_left)
    assert np.array_equal(rows, ref_rows)
    assert np.array_equal(hist, ref_hist)
    # children partition their parent, and stay in ascending row order (stable)
    for s, c, lc in zip(start, count, left):
        assert sorted(rows[s:s + c]) == sorted(row_index[s:s + c])
        assert np.all(np.diff(rows[s:s + lc]) > 0) and np.all(np.diff(rows[s + lc:s + c]) > 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_rows", [0, 1, 1000, 70001])
def test_quantise_gradients(kernels, n_rows, dtype):
    rng = np.random.default_rng(n_rows)
    grad = (rng.normal(size=(n_rows, 3)) * 10.0).astype(dtype)  # a column of (n, groups): strided
    hess = rng.random(size=(n_rows, 3)).astype(dtype)
    scale_g, scale_h = 2.0**3, 2.0**40
    quarter = grad[: n_rows // 4, 1]
    grad[: n_rows // 4, 1] = (np.floor(quarter * scale_g) + 0.5) / scale_g  # ties: x.5 after scaling
    expected = numpy_kernels.quantise_gradients(grad[:, 1], hess[:, 2], scale_g, scale_h)
    got = kernels.quantise_gradients(grad[:, 1], hess[:, 2], scale_g, scale_h)
    assert got.shape == (n_rows, 2) and got.dtype == np.int64
    assert np.array_equal(got, expected)
    # rounding half to even, exactly as np.rint
    assert np.array_equal(expected[:, 0], np.rint(grad[:, 1] * scale_g).astype(np.int64))


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_and_histogram_adds_into_out(kernels, n_rows, n_features, n_bins, n_nodes):
    rng = np.random.default_rng(17 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = random_partition_split(rng, n_features, n_bins, n_nodes)
    by_feature = np.ascontiguousarray(bins.T)
    ref_rows = row_index.copy()
    ref_left, ref_hist = numpy_kernels.partition_and_histogram(
        bins, by_feature, gh, ref_rows, start, count, *split, n_bins)
    # out: the second half of a level's array, holding other shards' sums already
    level = rng.integers(-2**50, 2**50, size=(2 * n_nodes, n_features, n_bins, 2))
    out = level[n_nodes:]
    prefill, siblings = out.copy(), level[:n_nodes].copy()
    rows = row_index.copy()
    left, hist = kernels.partition_and_histogram(
        bins, by_feature, gh, rows, start, count, *split, n_bins, out=out)
    assert hist is out
    assert np.array_equal(left, ref_left) and np.array_equal(rows, ref_rows)
    assert np.array_equal(out, prefill + ref_hist)
    assert np.array_equal(level[:n_nodes], siblings)  # nothing written outside out
    # out=None still allocates a new array
    _, fresh = kernels.partition_and_histogram(bins, by_feature, gh, row_index.copy(), start,
                                               count, *split, n_bins)
    assert np.array_equal(fresh, ref_hist)


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_and_histogram_into_dest(kernels, n_rows, n_features, n_bins, n_nodes):
    """With ``dest``, the listed segments' new order goes there (row_index untouched) and
    dest's other positions keep what they held: a grower ping-pongs between two arrays."""
    rng = np.random.default_rng(27 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = random_partition_split(rng, n_features, n_bins, n_nodes)
    listed = rng.random(n_nodes) < 0.7  # the other nodes' segments are not partitioned
    by_feature = np.ascontiguousarray(bins.T)
    in_place = row_index.copy()
    ref_left, ref_hist = numpy_kernels.partition_and_histogram(
        bins, by_feature, gh, in_place, start[listed], count[listed],
        *(a[listed] for a in split), n_bins)
    for module in (numpy_kernels, kernels):
        rows = row_index.copy()
        dest = np.full(n_rows, -7, dtype=_dtypes.ROW_INDEX)
        left, hist = module.partition_and_histogram(
            bins, by_feature, gh, rows, start[listed], count[listed],
            *(a[listed] for a in split), n_bins, dest=dest)
        assert np.array_equal(rows, row_index)
        assert np.array_equal(left, ref_left) and np.array_equal(hist, ref_hist)
        written = np.zeros(n_rows, dtype=bool)
        for s, c in zip(start[listed], count[listed]):
            written[s:s + c] = True
        assert np.array_equal(dest[written], in_place[written])
        assert np.all(dest[~written] == -7)


def test_partition_and_histogram_dest_checked(kernels):
    rng = np.random.default_rng(3)
    bins, gh, row_index, start, count = random_level(rng, 100, 3, 16, 2)
    args = (bins, np.ascontiguousarray(bins.T), gh, row_index, start, count, np.zeros(2, int),
            np.ones(2, int), np.zeros(2, bool), np.zeros(2, bool), 16)
    with pytest.raises(ValueError, match="dest"):
        kernels.partition_and_histogram(*args, dest=np.zeros(99, dtype=_dtypes.ROW_INDEX))
    # the host versions agree with the CUDA one: dest must not be row_index itself (the CUDA
    # wrapper is not asked here, as the test harness gives each host argument its own copy)
    for version in (numpy_kernels, cpu_kernels):
        with pytest.raises(ValueError, match="dest"):
            version.partition_and_histogram(*args, dest=np.zeros(99, dtype=_dtypes.ROW_INDEX))
        with pytest.raises(ValueError, match="dest"):
            version.partition_and_histogram(*args, dest=row_index)


@pytest.mark.parametrize("n_parents,n_split,shape", [
    (1, 1, (3, 16, 2)), (7, 4, (4, 256, 2)), (300, 200, (2, 2, 2)),  # dense layouts
    (5, 5, (1001, 2)),  # a sparse (n_slots, 2) layout, every parent split
    (3, 0, (4, 16, 2)), (2, 2, (0, 256, 2)),  # nothing split; no dense feature
])
def test_sibling_histograms(kernels, n_parents, n_split, shape):
    rng = np.random.default_rng(n_parents + n_split)
    parent = rng.integers(-2**50, 2**50, size=(n_parents,) + shape)
    split_nodes = rng.choice(n_parents, size=n_split, replace=False).astype(np.int64)  # any order
    children = np.full((2 * n_split,) + shape, 12345, dtype=np.int64)  # siblings' half: stale
    children[n_split:] = rng.integers(-2**50, 2**50, size=(n_split,) + shape)
    built = children[n_split:].copy()
    expected = numpy_kernels.sibling_histograms(parent, split_nodes, children.copy())
    got = kernels.sibling_histograms(parent, split_nodes, children)
    assert got is children
    assert np.array_equal(children, expected)
    # the built half is untouched, and each sibling plus its built child is its parent
    assert np.array_equal(children[n_split:], built)
    assert np.array_equal(children[:n_split] + children[n_split:], parent[split_nodes])


@pytest.mark.parametrize("parent_shape,children_shape", [((3, 4, 2), (2, 5, 2)),
                                                         ((3, 4, 2), (3, 4, 2))])
def test_sibling_histograms_refuses_mismatched_shapes(kernels, parent_shape, children_shape):
    """The fast versions read nodes as flat words: a mismatch must fail, not read past a node."""
    parent = np.zeros(parent_shape, dtype=np.int64)
    children = np.zeros(children_shape, dtype=np.int64)
    for version in (numpy_kernels, kernels):
        with pytest.raises(ValueError, match="sibling_histograms"):
            version.sibling_histograms(parent, np.array([0], dtype=np.int64), children)


@pytest.mark.parametrize("n_nodes,n_features,n_bins", [(1, 1, 2), (3, 4, 16), (64, 5, 256),
                                                        (2, 3, 300)])
@pytest.mark.parametrize("reg_alpha,min_child_weight", [(0.0, 1.0), (0.5, 0.0), (2.0, 50.0)])
def test_evaluate_splits(kernels, n_nodes, n_features, n_bins, reg_alpha, min_child_weight):
    rng = np.random.default_rng(n_nodes * n_bins)
    bins, gh, row_index, start, count = random_level(rng, 4000, n_features, n_bins, n_nodes)
    gh[:, 1] = rng.integers(1, 2**20, size=len(gh))
    hist = numpy_kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
    n_value_bins = rng.integers(1, n_bins, size=n_features).astype(np.int32)  # some unused bins
    allowed = rng.random(n_features) < 0.8
    args = (hist, n_value_bins, allowed, 2.0**-30, 2.0**-20, 1.0, reg_alpha, min_child_weight)
    expected = numpy_kernels.evaluate_splits(*args)
    got = kernels.evaluate_splits(*args)
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and np.array_equal(e, g), (e, g)


def test_evaluate_splits_prefers_the_first_of_equal_gains(kernels):
    hist = np.zeros((1, 2, 3, 2), dtype=np.int64)
    hist[0, :, 1] = [-10, 5]  # both features identical: the lower feature id must win
    hist[0, :, 2] = [10, 5]
    out = kernels.evaluate_splits(hist, np.array([2, 2], np.int32), np.ones(2, bool), 1.0, 1.0,
                                  1.0, 0.0, 0.0)
    assert out[1][0] == 0 and out[2][0] == 1
    assert out[3][0]  # no missing values: missing-left is listed first


def test_evaluate_splits_nothing_valid(kernels):
    hist = np.zeros((2, 3, 4, 2), dtype=np.int64)
    hist[:, :, 1] = [3, 1]  # a node holding only one bin: no threshold separates anything
    out = kernels.evaluate_splits(hist, np.full(3, 3, np.int32), np.ones(3, bool), 1.0, 1.0, 1.0,
                                  0.0, 0.5)
    assert np.all(out[0] == -np.inf) and np.all(out[1] == -1)


@pytest.mark.parametrize("n_cuts", [0, 1, 2, 7, 254, 300])
def test_bin_features(kernels, n_cuts):
    rng = np.random.default_rng(n_cuts)
    cuts = [np.unique(rng.normal(size=n_cuts)).astype(np.float32) for _ in range(3)]
    cuts[1] = cuts[1][: n_cuts // 2]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cuts])]).astype(np.int64)
    values = np.concatenate(cuts)
    X = rng.normal(size=(1001, 3)).astype(np.float32)
    X[:20, 0] = values[:20] if len(values) >= 20 else X[:20, 0]  # values exactly on a cut
    X[rng.random(X.shape) < 0.1] = np.nan
    X[0, 1] = -0.0
    dtype = _dtypes.bin_dtype(n_cuts + 2)
    expected = numpy_kernels.bin_features(X, values, offsets, np.empty(X.shape, dtype))
    got = kernels.bin_features(X, values, offsets, np.empty(X.shape, dtype))
    assert np.array_equal(got, expected)
    assert np.all(expected[np.isnan(X)] == 0) and np.all(expected[~np.isnan(X)] >= 1)


def test_add_leaf_values(kernels):
    rng = np.random.default_rng(3)
    row_index = rng.permutation(500).astype(np.int32)
    start, count = np.array([0, 100, 100, 450]), np.array([100, 0, 350, 50])
    values = rng.normal(size=4)
    margin = np.zeros((500, 2))
    expected = margin.copy()
    numpy_kernels.add_leaf_values(expected[:, 1], row_index, start, count, values)
    kernels.add_leaf_values(margin[:, 1], row_index, start, count, values)
    assert np.array_equal(margin, expected) and np.all(margin[:, 0] == 0)


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_add_split_leaf_values(kernels, n_rows, n_features, n_bins, n_nodes):
    rng = np.random.default_rng(11 + n_rows)
    bins, _, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = (rng.integers(0, n_features, size=n_nodes),
             rng.integers(1, max(2, n_bins - 1), size=n_nodes), rng.random(n_nodes) < 0.5,
             rng.normal(size=n_nodes), rng.normal(size=n_nodes))
    expected = np.full(n_rows, 0.25)
    numpy_kernels.add_split_leaf_values(expected, bins.T.copy(), row_index, start, count, *split)
    got = np.full(n_rows, 0.25)
    kernels.add_split_leaf_values(got, bins.T.copy(), row_index, start, count, *split)
    assert np.array_equal(got, expected)
    # the same as partitioning the rows and adding each child's value to its segment
    rows = row_index.copy()
    left = numpy_kernels.partition_rows(bins, rows, start, count, *split[:3])
    by_segments = np.full(n_rows, 0.25)
    numpy_kernels.add_leaf_values(by_segments, rows, np.stack([start, start + left], 1).ravel(),
                                  np.stack([left, count - left], 1).ravel(),
                                  np.stack([split[3], split[4]], 1).ravel())
    assert np.array_equal(got, by_segments)


def _random_forest(rng, n_features, n_trees, n_groups):
    trees = []
    for t in range(n_trees):
        # a complete tree of depth 3 in breadth-first order, children of i at 2i+1, 2i+2
        n_inner = 7
        feature = np.concatenate([rng.integers(0, n_features, n_inner), np.full(8, -1)])
        left = np.concatenate([2 * np.arange(n_inner) + 1, np.full(8, -1)])
        right = np.concatenate([2 * np.arange(n_inner) + 2, np.full(8, -1)])
        trees.append(dict(feature=feature, threshold=rng.normal(size=15).astype(np.float32),
                          default_left=rng.random(15) < 0.5, left=left, right=right,
                          value=rng.normal(size=15), group=t % n_groups))
    return trees


@pytest.mark.parametrize("n_groups", [1, 3])
def test_predict_margins(kernels, n_groups):
    from gbflow.predictor import FlatForest
    from gbflow.tree import Tree
    rng = np.random.default_rng(n_groups)
    raw = _random_forest(rng, 4, 9, n_groups)
    trees = [Tree(feature=t["feature"].astype(np.int32), bin_threshold=np.zeros(15, np.int32),
                  threshold=t["threshold"], default_left=t["default_left"],
                  left=t["left"].astype(np.int32), right=t["right"].astype(np.int32),
                  value=t["value"], gain=np.zeros(15), cover=np.zeros(15), group=t["group"])
             for t in raw]
    forest = FlatForest.from_trees(trees)
    X = rng.normal(size=(333, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.2] = np.nan
    X[:5, :] = forest.threshold[:5, None]  # values exactly on thresholds go right
    arrays = (forest.feature, forest.threshold, forest.default_left, forest.left, forest.right,
              forest.value, forest.tree_root, forest.tree_group)
    expected = numpy_kernels.predict_margins(X, *arrays, np.full((333, n_groups), 0.5))
    got = kernels.predict_margins(X, *arrays, np.full((333, n_groups), 0.5))
    assert np.array_equal(got, expected)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6, width=32), st.just(float('nan')),
                         st.sampled_from([0.0, -0.0, 1.0, 2.5])), min_size=1, max_size=200),
       st.integers(2, 20))
def test_bins_agree_with_thresholds(values, max_bin):
    """The bin a value falls in and the prediction-time test ``x < cut`` agree at every cut."""
    X = np.asarray(values, dtype=np.float32)[:, None]
    cuts = quantize.compute_cuts(np, [X], None, max_bin)
    bins = cpu_kernels.bin_features(X, cuts.values, cuts.offsets,
                                    np.empty(X.shape, cuts.bin_dtype))[:, 0]
    for t in range(1, len(cuts.values) + 1):  # split "bins 1..t go left" == "x < cuts[t-1]"
        present = ~np.isnan(X[:, 0])
        assert np.array_equal((bins[present] <= t), X[present, 0] < cuts.values[t - 1])
