"""Every fast kernel against its plain NumPy twin, exactly, including edge cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbflow import _dtypes, objectives, sketch
from gbflow.backend import common, cpu_kernels, numpy_kernels
from gbflow.metrics import tallies


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
    (180000, 3, 16, 5),  # nodes of 36K rows on average: on the CPU each node's rows go over
                         # every thread (fewer rows a node: one thread a node)
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
        bins, np.ascontiguousarray(bins.T), gh, ref_rows, start, count, feature, threshold,
        default_left, small_is_left, n_bins)
    rows = row_index.copy()
    left, hist = kernels.partition_and_histogram(
        bins, np.ascontiguousarray(bins.T), gh, rows, start, count, feature, threshold,
        default_left, small_is_left, n_bins)
    assert np.array_equal(left, ref_left)
    assert np.array_equal(rows, ref_rows)
    assert np.array_equal(hist, ref_hist)
    # children partition their parent, and stay in ascending row order (stable)
    for s, c, lc in zip(start, count, left):
        assert sorted(rows[s:s + c]) == sorted(row_index[s:s + c])
        assert np.all(np.diff(rows[s:s + lc]) > 0) and np.all(np.diff(rows[s + lc:s + c]) > 0)


def random_widths_level(rng, n_rows, widths, n_nodes):
    """random_level's rows and gradients with feature f's bins drawn uniformly from
    0..widths[f] - 1 (bin 0: missing). Returns (bins, gh, row_index, start, count,
    n_value_bins = widths - 1, n_bins = the widest)."""
    widths = np.asarray(widths)
    n_bins = int(widths.max())
    bins, gh, row_index, start, count = random_level(rng, n_rows, len(widths), n_bins, n_nodes)
    bins = (rng.integers(0, 2**31, size=bins.shape) % widths[None, :]).astype(bins.dtype)
    return bins, gh, row_index, start, count, widths - 1, n_bins


WIDTH_CASES = [  # n_rows, widths, n_nodes
    (5000, [3, 257, 5002, 12, 1, 257, 257, 1001], 3),  # mixed: categorical beside numeric
    (40000, [257] * 20 + [11, 101, 501, 1001, 5001], 4),  # F9's benchmark's columns
    (3000, [2] * 300 + [9000, 17], 2),  # one feature too wide for shared memory
    (20000, [257] * 150 + [5000, 3], 5),  # many groups: a second pass after the partition
    (100, [1, 1, 2], 1),  # all-missing columns
]


@pytest.mark.parametrize("n_rows,widths,n_nodes", WIDTH_CASES)
def test_histograms_with_per_feature_bin_counts(kernels, n_rows, widths, n_nodes):
    """The histogram kernels given each feature's bin count (the CUDA ones pack their shared
    memory by it) give the NumPy twin's sums, which do not depend on it."""
    rng = np.random.default_rng(n_rows + len(widths))
    bins, gh, row_index, start, count, n_value_bins, n_bins = random_widths_level(
        rng, n_rows, widths, n_nodes)
    expected = numpy_kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
    assert np.array_equal(numpy_kernels.build_histograms(
        bins, gh, row_index, start, count, n_bins, n_value_bins), expected)
    got = kernels.build_histograms(bins, gh, row_index, start, count, n_bins, n_value_bins)
    assert np.array_equal(got, expected)
    by_feature = np.ascontiguousarray(bins.T)
    split = random_partition_split(rng, len(widths), n_bins, n_nodes)
    ref_rows = row_index.copy()
    ref_left, ref_hist = numpy_kernels.partition_and_histogram(
        bins, by_feature, gh, ref_rows, start, count, *split, n_bins)
    rows = row_index.copy()
    left, hist = kernels.partition_and_histogram(bins, by_feature, gh, rows, start, count, *split,
                                                 n_bins, n_value_bins=n_value_bins)
    assert np.array_equal(left, ref_left) and np.array_equal(rows, ref_rows)
    assert np.array_equal(hist, ref_hist)
    work = common.work_list_rows(start, count, 700)
    out = np.zeros_like(ref_hist)
    dest = np.full_like(row_index, -1)
    left = kernels.partition_planned(bins, by_feature, gh, row_index, work,
                                     np.array([len(work)], dtype=np.int64), *split, n_bins, out,
                                     dest, n_value_bins)
    assert np.array_equal(left, ref_left) and np.array_equal(out, ref_hist)
    assert np.array_equal(dest, ref_rows)  # every row is in a listed segment


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes",
                         [(1000, 4, 256, 7), (30011, 40, 300, 3), (3001, 3, 16, 300),
                          (20000, 200, 256, 6), (0, 3, 16, 1)])
def test_partition_through_a_side_map(kernels, n_rows, n_features, n_bins, n_nodes):
    """A partition given a side map sends each row by its bin's side (0 missing, 1 left,
    2 right) at threshold 1: what the two passes it replaces did (map_sides into a column, then
    the partition of that column), on every version."""
    rng = np.random.default_rng(5 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    by_feature = np.ascontiguousarray(bins.T)
    feature, _, default_left, small_is_left = random_partition_split(rng, n_features, n_bins,
                                                                     n_nodes)
    side_map = rng.integers(1, 3, size=(n_nodes, n_bins)).astype(np.uint8)
    side_map[:, 0] = 0
    ones = np.ones(n_nodes, dtype=np.int32)
    column = np.zeros((1, n_rows), dtype=bins.dtype)
    numpy_kernels.map_sides(by_feature, row_index, start, count, feature, side_map, column[0])
    two_pass_rows = row_index.copy()
    two_pass = numpy_kernels.partition_and_histogram(
        bins, column, gh, two_pass_rows, start, count, np.zeros(n_nodes, dtype=np.int64), ones,
        default_left, small_is_left, n_bins)
    ref_rows = row_index.copy()
    ref_left, ref_hist = numpy_kernels.partition_and_histogram(
        bins, by_feature, gh, ref_rows, start, count, feature, ones, default_left, small_is_left,
        n_bins, side_map=side_map)
    assert np.array_equal(ref_left, two_pass[0]) and np.array_equal(ref_hist, two_pass[1])
    assert np.array_equal(ref_rows, two_pass_rows)
    dest = np.full_like(row_index, -1)
    left, hist = kernels.partition_and_histogram(
        bins, by_feature, gh, row_index.copy(), start, count, feature, ones, default_left,
        small_is_left, n_bins, dest=dest, side_map=side_map)
    assert np.array_equal(left, ref_left) and np.array_equal(hist, ref_hist)
    listed = np.concatenate([np.arange(a, a + c) for a, c in zip(start, count)] + [[]]).astype(int)
    assert np.array_equal(dest[listed], ref_rows[listed])
    with pytest.raises(ValueError, match="side_map must have shape"):
        kernels.partition_and_histogram(
            bins, by_feature, gh, row_index.copy(), start, count, feature, ones, default_left,
            small_is_left, n_bins, side_map=side_map[:, :-1])


def test_the_numpy_histograms_refuse_a_bin_above_its_features_count():
    rng = np.random.default_rng(3)
    bins, gh, row_index, start, count = random_level(rng, 50, 3, 16, 2)
    bins[:, 1] %= 9
    bins[7, 1] = 9
    with pytest.raises(ValueError, match="feature 1 has bin 9 above its n_value_bins 8"):
        numpy_kernels.build_histograms(bins, gh, row_index, start, count, 16, [15, 8, 15])
    with pytest.raises(ValueError, match="n_value_bins must hold 3 counts in 0..15"):
        numpy_kernels.build_histograms(bins, gh, row_index, start, count, 16, [15, 16, 15])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_rows", [0, 1, 1000, 70001])
def test_quantise_gradients(kernels, n_rows, dtype):
    rng = np.random.default_rng(n_rows)
    grad = (rng.normal(size=(n_rows, 3)) * 10.0).astype(dtype)  # a column of (n, groups): strided
    hess = rng.random(size=(n_rows, 3)).astype(dtype)
    scale_g, scale_h = 2.0**3, 2.0**40
    quarter = grad[: n_rows // 4, 1]
    # ties: x.5 after scaling
    grad[: n_rows // 4, 1] = (np.floor(quarter * scale_g) + 0.5) / scale_g
    expected = numpy_kernels.quantise_gradients(grad[:, 1], hess[:, 2], scale_g, scale_h)
    got = kernels.quantise_gradients(grad[:, 1], hess[:, 2], scale_g, scale_h)
    assert got.shape == (n_rows, 2) and got.dtype == np.int64
    assert np.array_equal(got, expected)
    # rounding half to even, exactly as np.rint
    assert np.array_equal(expected[:, 0], np.rint(grad[:, 1] * scale_g).astype(np.int64))


@pytest.mark.parametrize("implementation", ["numpy", "fast"])
def test_quantise_gradients_into_out(kernels, implementation):
    """``out`` (training reuses one array every tree) is overwritten whole and returned; an
    array of another shape, dtype or layout is refused."""
    module = numpy_kernels if implementation == "numpy" else kernels
    rng = np.random.default_rng(3)
    grad, hess = rng.normal(size=777), rng.random(size=777)
    out = np.full((777, 2), -12345, dtype=np.int64)
    got = module.quantise_gradients(grad, hess, 2.0**20, 2.0**30, out=out)
    assert got is out
    assert np.array_equal(out, numpy_kernels.quantise_gradients(grad, hess, 2.0**20, 2.0**30))
    for bad in (np.zeros((776, 2), np.int64), np.zeros((777, 2), np.int32),
                np.zeros((2, 777), np.int64).T):
        with pytest.raises(ValueError, match="out must be a C-contiguous"):
            module.quantise_gradients(grad, hess, 2.0**20, 2.0**30, out=bad)


def by_feature_of(bins, layout: str):
    """The kernels' (F, n) bins-by-feature matrix: a column-major copy, or a transposed view of
    the row-major bins (a store without the copy: paged, or one binned copy)."""
    return np.ascontiguousarray(bins.T) if layout == "copy" else bins.T


@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_and_histogram_adds_into_out(kernels, n_rows, n_features, n_bins, n_nodes,
                                               layout):
    rng = np.random.default_rng(17 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = random_partition_split(rng, n_features, n_bins, n_nodes)
    by_feature = by_feature_of(bins, layout)
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


@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_and_histogram_into_dest(kernels, n_rows, n_features, n_bins, n_nodes,
                                           layout):
    """With ``dest``, the listed segments' new order goes there (row_index untouched) and
    dest's other positions keep what they held: a grower ping-pongs between two arrays."""
    rng = np.random.default_rng(27 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = random_partition_split(rng, n_features, n_bins, n_nodes)
    listed = rng.random(n_nodes) < 0.7  # the other nodes' segments are not partitioned
    by_feature = by_feature_of(bins, layout)
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


@pytest.mark.parametrize("n_valid", [0, 3, 7])
def test_sibling_histograms_of_the_first_n_valid_splits(kernels, n_valid):
    """A planned level's arrays hold every node that could split: only the first n_valid
    siblings are written, the others keep what they held."""
    rng = np.random.default_rng(n_valid)
    parent = rng.integers(-2**50, 2**50, size=(9, 3, 8, 2))
    split_nodes = np.zeros(7, dtype=np.int64)
    split_nodes[:n_valid] = rng.choice(9, size=n_valid, replace=False)
    children = rng.integers(-2**50, 2**50, size=(14, 3, 8, 2))
    before = children.copy()
    count = np.array([n_valid], dtype=np.int64)
    expected = numpy_kernels.sibling_histograms(parent, split_nodes, children.copy(), count)
    got = kernels.sibling_histograms(parent, split_nodes, children, count)
    assert got is children and np.array_equal(children, expected)
    assert np.array_equal(children[n_valid:], before[n_valid:])
    assert np.array_equal(children[:n_valid] + children[7:7 + n_valid],
                          parent[split_nodes[:n_valid]])


def random_found(rng, cap, n_features=6):
    """A split search's (cap,) results with some nodes without a split and some tied gains."""
    gain = rng.choice([-np.inf, 0.0, 1e-7, 0.5, 2.0, 3.0], size=cap)
    feature = np.where(gain > -np.inf, rng.integers(0, n_features, cap), -1).astype(np.int32)
    threshold = rng.integers(1, 200, cap).astype(np.int32)
    default_left = rng.random(cap) < 0.5
    totals = np.stack([rng.integers(-2**40, 2**40, cap), rng.integers(0, 2**40, cap)], axis=1)
    left_sum = np.stack([rng.integers(-2**40, 2**40, cap),
                         (totals[:, 1] * rng.random(cap)).astype(np.int64)], axis=1)
    left_sum[::5, 1] = totals[::5, 1] // 2  # ties: the left child is built
    return gain, feature, threshold, default_left, left_sum, totals


def plan_outputs(cap):
    return [np.full(1, -9, dtype=np.int64), np.full(cap, -9, dtype=np.int64),
            np.full(cap, -9, dtype=np.int32), np.full(cap, -9, dtype=np.int32),
            np.ones(cap, dtype=bool), np.ones(cap, dtype=bool), np.full(cap, -9.0),
            np.full((2 * cap, 2), -9, dtype=np.int64), np.ones(cap, dtype=bool)]


@pytest.mark.parametrize("cap,half,n_parent", [(1, 1, 1), (2, 1, 1), (8, 4, 3), (16, 8, 0),
                                               (600, 300, 250), (2048, 1024, 1024)])
def test_plan_level(kernels, cap, half, n_parent):
    rng = np.random.default_rng(cap + n_parent)
    gain, feature, threshold, default_left, left_sum, totals = random_found(rng, cap)
    min_gain = 1e-6
    args = (np.array([n_parent], dtype=np.int64), half, gain, feature, threshold, default_left,
            left_sum, totals, min_gain)
    expected = plan_outputs(cap)
    numpy_kernels.plan_level(*args, *expected)
    got = plan_outputs(cap)
    kernels.plan_level(*args, *got)
    for e, g in zip(expected, got):
        assert np.array_equal(e, g)
    n_split, split_node, split_feature, _, _, built_left, split_gain, child_totals, is_leaf = got
    # what the plan means: the nodes that split, in slot order, and their children's sums
    holds = np.arange(cap) % half < n_parent
    splits = np.flatnonzero(holds & (feature >= 0) & (gain > min_gain))
    n = len(splits)
    assert n_split[0] == n and np.array_equal(split_node[:n], splits)
    assert np.array_equal(split_feature[:n], feature[splits])
    assert np.array_equal(split_gain[:n], gain[splits])
    assert np.array_equal(child_totals[:n] + child_totals[cap:cap + n], totals[splits])
    built = np.where(built_left[:n, None], left_sum[splits], totals[splits] - left_sum[splits])
    assert np.array_equal(child_totals[cap:cap + n], built)
    assert (child_totals[cap:cap + n, 1] <= child_totals[:n, 1]).all()  # the smaller is built
    assert not split_node[n:].any() and not child_totals[n:cap].any() and \
        not child_totals[cap + n:].any() and not built_left[n:].any()
    assert np.array_equal(np.flatnonzero(is_leaf), np.setdiff1d(np.flatnonzero(holds), splits))


LEAF_CONSTANTS = [(2.0**-30, 2.0**-31, 1.0, 0.0, 0.3), (2.0**-20, 2.0**-40, 0.0, 0.5, 1.0),
                  (2.0**-30, 2.0**-31, 1.0, 0.5, 0.3, 2e-4)]  # max_delta_step: capped


@pytest.mark.parametrize("constants", LEAF_CONSTANTS)
def test_add_planned_leaf_values(kernels, constants):
    """A level's leaves into the margins: what add_leaf_values does with the leaves' segments
    and weights, through a column view."""
    rng = np.random.default_rng(3)
    n_rows, cap = 5000, 12
    row_index = rng.permutation(n_rows).astype(_dtypes.ROW_INDEX)
    bounds = np.sort(rng.choice(np.arange(1, n_rows), size=cap - 1, replace=False))
    seg_start = np.concatenate([[0], bounds]).astype(np.int64)
    seg_count = np.diff(np.concatenate([seg_start, [n_rows]])).astype(np.int64)
    seg_count[3] = 0  # an empty leaf
    is_leaf = rng.random(cap) < 0.6
    totals = np.stack([rng.integers(-2**40, 2**40, cap), rng.integers(0, 2**40, cap)], axis=1)
    totals[5, 1] = 0  # H + lambda may be 0: weight 0
    margin = rng.normal(size=(n_rows, 3))
    expected = margin.copy()
    args = (row_index, seg_start, seg_count, is_leaf, totals, *constants)
    numpy_kernels.add_planned_leaf_values(expected[:, 1], *args)
    kernels.add_planned_leaf_values(margin[:, 1], *args)
    assert np.array_equal(margin, expected)
    reference = margin[:, 0].copy()  # any margins: the updates are compared
    values = numpy_kernels.leaf_weights(totals, *constants)
    by_segments = reference.copy()
    numpy_kernels.add_leaf_values(by_segments, row_index, seg_start[is_leaf], seg_count[is_leaf],
                                  values[is_leaf])
    kernels.add_planned_leaf_values(reference, *args)
    assert np.array_equal(reference, by_segments)


@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("constants", LEAF_CONSTANTS)
@pytest.mark.parametrize("n_split", [0, 1, 5])
def test_add_planned_split_values(kernels, constants, n_split, layout):
    """The last level's leaves through their parents' splits: what add_split_leaf_values does
    with the children's weights on the sides the plan built."""
    rng = np.random.default_rng(n_split)
    n_rows, n_features, n_bins, cap = 4000, 4, 32, 8
    bins, _, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, cap)
    bins_by_feature = by_feature_of(bins, layout)
    feature, threshold, default_left, built_left = random_partition_split(
        rng, n_features, n_bins, cap)
    feature, threshold = feature.astype(np.int32), threshold.astype(np.int32)
    child_half = 6  # the children's level may be sized to the split count
    child_totals = np.stack([rng.integers(-2**40, 2**40, 2 * child_half),
                             rng.integers(0, 2**40, 2 * child_half)], axis=1)
    margin = rng.normal(size=(n_rows, 2))
    expected = margin.copy()
    args = (bins_by_feature, row_index, start, count, np.array([n_split], dtype=np.int64),
            feature, threshold, default_left, built_left, child_totals, child_half, *constants)
    numpy_kernels.add_planned_split_values(expected[:, 0], *args)
    kernels.add_planned_split_values(margin[:, 0], *args)
    assert np.array_equal(margin, expected)
    values = numpy_kernels.leaf_weights(child_totals, *constants)
    j = np.arange(n_split)
    built, sibling = values[child_half + j], values[j]
    by_splits = margin[:, 1].copy()
    numpy_kernels.add_split_leaf_values(
        by_splits, bins_by_feature, row_index, start[:n_split], count[:n_split],
        feature[:n_split], threshold[:n_split], default_left[:n_split],
        np.where(built_left[:n_split], built, sibling),
        np.where(built_left[:n_split], sibling, built))
    kernels.add_planned_split_values(margin[:, 1], *args)
    assert np.array_equal(margin[:, 1], by_splits)


def random_parent_level(rng, n_rows, half, n_parent):
    """A parent level's split segments tiling [0, n_rows) in a shuffled order, left counts and
    built sides, for a level of 2 * half slots."""
    n_cuts = min(n_parent - 1, max(n_rows - 1, 0))
    cuts = np.sort(rng.choice(np.arange(1, max(n_rows, 2)), size=n_cuts, replace=False))
    bounds = np.concatenate([[0], cuts, [n_rows]]).astype(np.int64)
    start, count = bounds[:-1], np.diff(bounds)
    start = np.concatenate([start, np.zeros(n_parent - len(start), dtype=np.int64)])
    count = np.concatenate([count, np.zeros(n_parent - len(count), dtype=np.int64)])
    order = rng.permutation(n_parent)
    start, count = start[order], count[order]
    pad = half - n_parent
    left = (count * rng.random(n_parent)).astype(np.int64)
    return (np.concatenate([start, np.full(pad, 77)]), np.concatenate([count, np.full(pad, 5)]),
            np.concatenate([left, np.full(pad, 3)]),
            np.concatenate([rng.random(n_parent) < 0.5, np.ones(pad, dtype=bool)]))


def segment_outputs(cap, max_blocks):
    return [np.full(cap, -9, dtype=np.int64) for _ in range(4)] + \
        [np.full((max_blocks, 5), -9, dtype=np.int64), np.full(1, -9, dtype=np.int64)]


@pytest.mark.parametrize("n_rows,half,n_parent,rows_per_block", [
    (0, 0, 1, 2048), (5000, 0, 1, 2048), (100000, 0, 1, 2048),  # the root
    (5000, 4, 3, 2048), (30000, 8, 8, 1000), (30000, 300, 211, 512), (10, 16, 16, 2048)])
def test_level_segments(kernels, n_rows, half, n_parent, rows_per_block):
    rng = np.random.default_rng(n_rows + half)
    cap = 1 if half == 0 else 2 * half
    if half:
        parent = random_parent_level(rng, n_rows, half, n_parent)
        n_valid = n_parent
    else:
        parent = (np.zeros(1, dtype=np.int64),) * 3 + (np.zeros(1, dtype=bool),)
        n_valid = 1
    holds = np.flatnonzero(np.arange(cap) % max(half, 1) < n_valid)
    splits = np.sort(rng.choice(holds, size=len(holds) * 2 // 3 or len(holds), replace=False))
    split_node = np.zeros(cap, dtype=np.int64)
    split_node[:len(splits)] = splits
    max_blocks = -(-n_rows // rows_per_block) + cap
    args = (n_rows, half, np.array([n_parent], dtype=np.int64), *parent,
            np.array([len(splits)], dtype=np.int64), split_node, rows_per_block)
    expected = segment_outputs(cap, max_blocks)
    numpy_kernels.level_segments(*args, *expected)
    got = segment_outputs(cap, max_blocks)
    kernels.level_segments(*args, *got)
    for e, g in zip(expected, got):
        assert np.array_equal(e, g)
    seg_start, seg_count, split_start, split_count, work, n_work = got
    # the level's segments tile the rows its nodes hold; the work list deals the splits' rows
    ranges = sorted((a, a + c) for a, c in zip(seg_start[holds], seg_count[holds]) if c)
    assert sum(b - a for a, b in ranges) == (n_rows if half == 0 else
                                             parent[1][:n_parent].sum())
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))
    rows = work[: n_work[0]]
    assert not work[n_work[0]:].any()
    for i, slot in enumerate(splits):
        mine = rows[rows[:, 0] == i]
        assert (mine[:, 2] - mine[:, 1]).sum() == seg_count[slot] == split_count[i]
        assert (mine[:, 2] - mine[:, 1] <= rows_per_block).all()
        if len(mine):
            assert (mine[:, 4] == seg_start[slot]).all() and mine[0, 1] == seg_start[slot]


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_partition_planned(kernels, n_rows, n_features, n_bins, n_nodes):
    """The partition over a planned work list (a level's splits among more slots) does what
    partition_and_histogram does over the same segments."""
    rng = np.random.default_rng(11 + n_rows)
    bins, gh, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = random_partition_split(rng, n_features, n_bins, n_nodes)
    cap = n_nodes + 3  # slots without a split: no block, left count 0, histogram untouched
    split = [np.concatenate([a, np.zeros(3, dtype=a.dtype)]) for a in split]
    rows_per_block = 1000
    work = np.zeros((-(-n_rows // rows_per_block) + cap, 5), dtype=np.int64)
    listed = common.work_list_rows(start, count, rows_per_block)
    work[: len(listed)] = listed
    n_work = np.array([len(listed)], dtype=np.int64)
    expected_dest = np.full_like(row_index, -1)
    expected_left, expected_hist = numpy_kernels.partition_and_histogram(
        bins, np.ascontiguousarray(bins.T), gh, row_index, start, count,
        *(a[:n_nodes] for a in split), n_bins, dest=expected_dest)
    out = np.zeros((cap, n_features, n_bins, 2), dtype=np.int64)
    dest = np.full_like(row_index, -1)
    left = kernels.partition_planned(bins, np.ascontiguousarray(bins.T), gh, row_index, work,
                                     n_work, *split, n_bins, out, dest)
    assert np.array_equal(left[:n_nodes], expected_left) and not left[n_nodes:].any()
    assert np.array_equal(dest, expected_dest)
    assert np.array_equal(out[:n_nodes], expected_hist) and not out[n_nodes:].any()


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
    # a mask per node (colsample_bynode): each node's result is its search under its own mask
    per_node = rng.random((n_nodes, n_features)) < 0.6
    args = (hist, n_value_bins, per_node) + args[3:]
    expected = numpy_kernels.evaluate_splits(*args)
    for n in range(n_nodes):
        alone = numpy_kernels.evaluate_splits(hist[n:n + 1], n_value_bins, per_node[n],
                                              *args[3:])
        for e, a in zip(expected, alone):
            assert np.array_equal(e[n:n + 1], a)
    for e, g in zip(expected, kernels.evaluate_splits(*args)):
        assert e.dtype == g.dtype and np.array_equal(e, g), (e, g)


def test_evaluate_splits_prefers_the_first_of_equal_gains(kernels):
    hist = np.zeros((1, 2, 3, 2), dtype=np.int64)
    hist[0, :, 1] = [-10, 5]  # both features identical: the lower feature id must win
    hist[0, :, 2] = [10, 5]
    out = kernels.evaluate_splits(hist, np.array([2, 2], np.int32), np.ones(2, bool), 1.0, 1.0,
                                  1.0, 0.0, 0.0)
    assert out[1][0] == 0 and out[2][0] == 1
    # no missing values: both directions are one split, kept with missing values right
    # (XGBoost's default direction); the twin gives the same
    assert not out[3][0]
    assert not numpy_kernels.evaluate_splits(hist, np.array([2, 2], np.int32), np.ones(2, bool),
                                             1.0, 1.0, 1.0, 0.0, 0.0)[3][0]


def test_evaluate_splits_nothing_valid(kernels):
    hist = np.zeros((2, 3, 4, 2), dtype=np.int64)
    hist[:, :, 1] = [3, 1]  # a node holding only one bin: no threshold separates anything
    out = kernels.evaluate_splits(hist, np.full(3, 3, np.int32), np.ones(3, bool), 1.0, 1.0, 1.0,
                                  0.0, 0.5)
    assert np.all(out[0] == -np.inf) and np.all(out[1] == -1)


def _present_or_missing_histograms(rng, n_rows=3000, n_nodes=3):
    """Histograms of three features over a few nodes: feature 0 holds one value or is missing
    (a one-hot column: value bin 1 or the missing bin), and decides the gradient's sign;
    features 1 and 2 are noise with missing values of their own."""
    bins = np.zeros((n_rows, 3), np.uint8)
    present = rng.random(n_rows) < 0.4
    bins[:, 0] = present
    bins[:, 1:] = rng.integers(0, 17, size=(n_rows, 2))
    gh = np.stack([np.where(present, -1000, 1000) + rng.integers(-300, 300, n_rows),
                   rng.integers(1, 2**10, n_rows)], 1).astype(np.int64)
    row_index = rng.permutation(n_rows).astype(np.int32)
    count = np.full(n_nodes, n_rows // n_nodes, np.int64)
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    hist = numpy_kernels.build_histograms(bins, gh, row_index, start, count, 17)
    return hist, np.array([1, 16, 16], np.int32), present, gh, row_index, start, count


@pytest.mark.parametrize("min_child_weight", [0.0, 1.0])
def test_evaluate_splits_splits_present_values_from_missing_ones(kernels, min_child_weight):
    """A feature whose present values are all equal (one value bin) has one split: present
    versus missing. It comes back as bin threshold 0, missing values left, left_sum the
    missing rows' sums; its gain is that of "every value bin left, missing right"."""
    rng = np.random.default_rng(5)
    hist, n_value_bins, present, gh, row_index, start, count = \
        _present_or_missing_histograms(rng)
    args = (hist, n_value_bins, np.ones(3, bool), 2.0**-20, 2.0**-10, 1.0, 0.0,
            min_child_weight)
    expected = numpy_kernels.evaluate_splits(*args)
    got = kernels.evaluate_splits(*args)
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and np.array_equal(e, g), (e, g)
    gain, feature, threshold, default_left, left_sum = expected
    assert np.all(feature == 0) and np.all(threshold == 0) and np.all(default_left)
    for k in range(len(start)):
        rows = row_index[start[k]: start[k] + count[k]]
        assert np.array_equal(left_sum[k], gh[rows][~present[rows]].sum(axis=0))
    # the same gain as the candidate read the other way round
    flipped = hist.copy()
    flipped[:, 0, [0, 1]] = hist[:, 0, [1, 0]]  # present rows in the missing bin, and back
    flipped_result = numpy_kernels.evaluate_splits(flipped, *args[1:])
    assert np.array_equal(flipped_result[0], gain)


def test_evaluate_splits_never_splits_present_from_missing_without_missing_values(kernels):
    """Without missing values in a node the new candidate has an empty missing side: invalid
    for min_child_weight > 0, and a gain of exactly 0 otherwise, which no split takes (so
    models of data without missing values do not change)."""
    rng = np.random.default_rng(6)
    bins, gh, row_index, start, count = random_level(rng, 4000, 4, 16, 5, missing=0.0)
    n_value_bins = np.array([1, 15, 3, 1], np.int32)  # two features with one value bin
    bins[:] = 1 + rng.integers(0, n_value_bins, size=bins.shape)  # no bin 0 anywhere
    gh[:, 1] = rng.integers(1, 2**20, size=len(gh))
    hist = numpy_kernels.build_histograms(bins, gh, row_index, start, count, 16)
    for min_child_weight in (0.0, 1e-9):
        args = (hist, n_value_bins, np.ones(4, bool), 2.0**-30, 2.0**-20, 1.0, 0.0,
                min_child_weight)
        expected = numpy_kernels.evaluate_splits(*args)
        for e, g in zip(expected, kernels.evaluate_splits(*args)):
            assert np.array_equal(e, g)
        present_vs_missing = (expected[1] >= 0) & (expected[2] == 0)
        assert np.all(expected[0][present_vs_missing] == 0.0)
        if min_child_weight > 0:
            assert not present_vs_missing.any()
    only_constant = args[:2] + (np.array([True, False, False, True]),) + args[3:7] + (0.0,)
    gain, feature, threshold, _, _ = kernels.evaluate_splits(*only_constant)
    assert np.all(gain[count > 0] == 0.0) and np.all(threshold[count > 0] == 0)


@pytest.mark.parametrize("n_cuts", [0, 1, 2, 7, 254, 255, 300])
def test_bin_features(kernels, n_cuts):
    """Bins of values below, on and between cuts, NaN, +-inf and -0.0; up to 255 cuts a feature
    the CPU searches a padded table of cuts, from 255 each feature's own."""
    rng = np.random.default_rng(n_cuts)
    cuts = [np.unique(rng.normal(size=n_cuts)).astype(np.float32) for _ in range(3)]
    cuts[1] = cuts[1][: n_cuts // 2]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cuts])]).astype(np.int64)
    values = np.concatenate(cuts)
    X = rng.normal(size=(1001, 3)).astype(np.float32)
    X[:20, 0] = values[:20] if len(values) >= 20 else X[:20, 0]  # values exactly on a cut
    X[rng.random(X.shape) < 0.1] = np.nan
    X[0, 1] = -0.0
    X[1, :] = np.inf
    X[2, :] = -np.inf
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


@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_add_split_leaf_values(kernels, n_rows, n_features, n_bins, n_nodes, layout):
    rng = np.random.default_rng(11 + n_rows)
    bins, _, row_index, start, count = random_level(rng, n_rows, n_features, n_bins, n_nodes)
    split = (rng.integers(0, n_features, size=n_nodes),
             rng.integers(1, max(2, n_bins - 1), size=n_nodes), rng.random(n_nodes) < 0.5,
             rng.normal(size=n_nodes), rng.normal(size=n_nodes))
    expected = np.full(n_rows, 0.25)
    numpy_kernels.add_split_leaf_values(expected, bins.T.copy(), row_index, start, count, *split)
    got = np.full(n_rows, 0.25)
    kernels.add_split_leaf_values(got, by_feature_of(bins, layout), row_index, start, count,
                                  *split)
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


@pytest.mark.parametrize("n_rows", [1, 2, 3, 333])  # the walks go four rows at a time
@pytest.mark.parametrize("n_groups", [1, 3])
def test_predict_margins(kernels, n_groups, n_rows):
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
    X = rng.normal(size=(n_rows, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.2] = np.nan
    X[:5, :] = forest.threshold[:min(5, n_rows), None]  # values on thresholds go right
    arrays = (forest.feature, forest.threshold, forest.default_left, forest.left, forest.right,
              forest.value, forest.tree_root, forest.tree_group)
    expected = numpy_kernels.predict_margins(X, *arrays, np.full((n_rows, n_groups), 0.5))
    got = kernels.predict_margins(X, *arrays, np.full((n_rows, n_groups), 0.5))
    assert np.array_equal(got, expected)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6, width=32), st.just(float('nan')),
                         st.sampled_from([0.0, -0.0, 1.0, 2.5])), min_size=1, max_size=200),
       st.integers(2, 20))
def test_bins_agree_with_thresholds(values, max_bin):
    """The bin a value falls in and the prediction-time test ``x < cut`` agree at every cut."""
    X = np.asarray(values, dtype=np.float32)[:, None]
    cuts = sketch.compute_cuts(np, [X], None, max_bin)
    bins = cpu_kernels.bin_features(X, cuts.values, cuts.offsets,
                                    np.empty(X.shape, cuts.bin_dtype))[:, 0]
    for t in range(1, len(cuts.values) + 1):  # split "bins 1..t go left" == "x < cuts[t-1]"
        present = ~np.isnan(X[:, 0])
        assert np.array_equal((bins[present] <= t), X[present, 0] < cuts.values[t - 1])


@pytest.mark.parametrize("n", [0, 1, 1000, 100_003])
def test_fixed_point_words(kernels, n):
    rng = np.random.default_rng(n)
    values = rng.standard_normal(n) * 1e3
    values[::7] = 0.0
    scale, low_scale = 2.0**40, 2.0**30
    expected = numpy_kernels.fixed_point_words(values, scale, low_scale)
    got = np.asarray(kernels.fixed_point_words(values, scale, low_scale))
    assert got.dtype == np.int64 and np.array_equal(got, expected)
    # the words are the sum, exactly (to 2**-70 here)
    if n:
        exact = sum(map(float, values))  # about 1e-13 relative: the words are finer
        total = float(expected[0]) / scale + float(expected[1]) / (scale * low_scale)
        assert total == pytest.approx(exact, rel=1e-12, abs=1e-9)
    # a split of the values gives the same words
    if n > 2:
        halves = [numpy_kernels.fixed_point_words(part, scale, low_scale)
                  for part in (values[: n // 3], values[n // 3:])]
        assert np.array_equal(halves[0] + halves[1], expected)


@pytest.mark.parametrize("weighted", [False, True])
def test_auc_tally(kernels, weighted):
    rng = np.random.default_rng(7)
    n, n_buckets = 50_000, 4096
    bucket = rng.integers(0, n_buckets, n)
    label = (rng.random(n) < 0.3).astype(np.float64)
    label[:100] = 0.25  # soft labels
    weight = rng.random(n) * 3 if weighted else None
    scale = 2.0**10
    out = np.full((2, n_buckets), 5, dtype=np.int64)  # added into
    expected = numpy_kernels.auc_tally(bucket, label, weight, scale, out.copy())
    got = kernels.auc_tally(bucket, label, weight, scale, out)
    assert np.array_equal(got, expected) and np.array_equal(out, expected)
    w = (weight if weighted else np.ones(n)) * scale
    assert expected.sum() - 5 * 2 * n_buckets == np.rint(w).astype(np.int64).sum()
    assert expected[0].sum() - 5 * n_buckets == np.rint(w * label).astype(np.int64).sum()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_rows,n_buckets", [(0, 64), (1, 64), (50_000, 1 << 20), (3000, 130)])
def test_auc_bucket_words(kernels, weighted, n_rows, n_buckets):
    """The words of the rows' tally without a table kept by the caller equal the dense table's
    tally and words: buckets crowded and sparse, both ends of the range, soft labels; a bucket
    outside the range is refused."""
    rng = np.random.default_rng(n_rows + n_buckets)
    bucket = rng.integers(0, n_buckets, n_rows)
    bucket[: n_rows // 10] = rng.integers(0, 3, n_rows // 10)  # crowded low buckets
    if n_rows > 2:
        bucket[-2:] = [0, n_buckets - 1]
    label = (rng.random(n_rows) < 0.35).astype(np.float64)
    label[:7] = 0.5  # soft labels
    weight = rng.random(n_rows) * 3 if weighted else None
    scale = 2.0**12
    expected = numpy_kernels.auc_words(numpy_kernels.auc_tally(
        bucket, label, weight, scale, np.zeros((2, n_buckets), np.int64)))
    assert np.array_equal(numpy_kernels.auc_bucket_words(bucket, label, weight, scale, n_buckets),
                          expected)
    got = kernels.auc_bucket_words(bucket, label, weight, scale, n_buckets)
    assert np.array_equal(np.asarray(got), expected)
    if n_rows:
        assert expected[1] + expected[2] == np.rint((weight if weighted else np.ones(n_rows))
                                                    * scale).astype(np.int64).sum()


@pytest.mark.parametrize("case", ["empty", "one", "all equal", "ties", "wide", "buckets"])
def test_occupied_keys(kernels, case):
    """The compact table's entries (distinct keys in order, then -1) and each key's entry equal
    the twin's: ties in any order, keys over the whole [0, 2**32) (every radix digit moving),
    keys that share their high digits (passes skipped)."""
    rng = np.random.default_rng(len(case))
    keys = {"empty": np.zeros(0, np.int64), "one": np.array([7], np.int64),
            "all equal": np.full(300, 2**31 + 5, np.int64),
            "ties": rng.integers(0, 50, 10_000),
            "wide": np.concatenate([rng.integers(0, 2**32, 70_000), [0, 2**32 - 1, 0]]),
            "buckets": rng.integers(0, 1 << 20, 5_000) * 3}[case].astype(np.int64)
    expected = numpy_kernels.occupied_keys(keys)
    got = kernels.occupied_keys(keys)
    for e, g in zip(expected, got):
        assert np.array_equal(np.asarray(g), e)
    distinct = np.unique(keys)
    assert np.array_equal(expected[0][:len(distinct)], distinct)
    assert (expected[0][len(distinct):] == -1).all()
    assert np.array_equal(distinct[expected[1]], keys)


def test_occupied_keys_refuses_keys_out_of_range():
    with pytest.raises(ValueError, match=r"keys must lie in \[0, 2\*\*32\)"):
        cpu_kernels.occupied_keys(np.array([3, 2**32]))
    with pytest.raises(ValueError, match=r"keys must lie"):
        cpu_kernels.occupied_keys(np.array([-1, 2]))


def test_auc_bucket_words_refuses_buckets_out_of_range():
    with pytest.raises(ValueError, match=r"bucket ids must lie in \[0, 64\)"):
        cpu_kernels.auc_bucket_words(np.array([3, 64]), np.ones(2), None, 1.0, 64)


def test_auc_bucket_words_at_the_tally_bound():
    """The CPU's int32 tallies: a bucket holding every row's weight, 2**30 in all (the largest
    total the auc's integer area allows), gives the twin's words; the scales the metrics choose
    (``tallies.weight_scale``, a rounding ulp above 2**30 in all at times) are taken; a scale
    whose tally could reach 2**31 is refused, not wrapped."""
    n = 1024
    bucket = np.full(n, 5)
    bucket[:3] = [0, 63, 5]
    label = np.ones(n)
    label[::7] = 0.0
    expected = numpy_kernels.auc_bucket_words(bucket, label, None, 2.0**20, 64)
    assert expected[1] + expected[2] == 2**30
    assert np.array_equal(cpu_kernels.auc_bucket_words(bucket, label, None, 2.0**20, 64),
                          expected)
    rng = np.random.default_rng(9)
    rows = 1 << 17
    weight = np.ones(rows)
    weight[0] = np.nextafter(1.0, 2.0)  # its scale puts rows * weight * scale past 2**30
    scale = tallies.weight_scale(rows, float(weight.max()))
    assert rows * weight.max() * scale > 2**30
    spread, soft = rng.integers(0, 1 << 20, rows), rng.random(rows)
    assert np.array_equal(cpu_kernels.auc_bucket_words(spread, soft, weight, scale, 1 << 20),
                          numpy_kernels.auc_bucket_words(spread, soft, weight, scale, 1 << 20))
    with pytest.raises(ValueError, match=r"may tally 2\*\*31 or more"):
        cpu_kernels.auc_bucket_words(bucket, label, None, 2.0**21, 64)
    # rows split between threads: each thread's tallies stay below the total's bound
    many = np.full(rows, 5)
    many[:2] = [0, 63]
    ones = np.ones(rows)
    ones[::5] = 0.0
    expected = numpy_kernels.auc_bucket_words(many, ones, None, 2.0**13, 64)
    assert expected[1] + expected[2] == 2**30
    assert np.array_equal(cpu_kernels.auc_bucket_words(many, ones, None, 2.0**13, 64), expected)
    with pytest.raises(ValueError, match=r"may tally 2\*\*31 or more"):
        cpu_kernels.auc_bucket_words(many, ones, None, 2.0**14, 64)
    with pytest.raises(ValueError, match=r"may tally 2\*\*31 or more"):
        cpu_kernels.auc_bucket_words(bucket, label, np.full(n, 2.0), 2.0**20, 64)


def _margins(n: int) -> np.ndarray:
    """float64 margins of every scale, both ends of exp's range and the special values."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 10.0, 100.0], n)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 709.8, -709.8, 745.2, -745.2, 5e-324, 36.8]
    return np.concatenate([x, specials])


@pytest.mark.parametrize("n", [0, 50, 70_000])
def test_sigmoid(kernels, n):
    """1 / (1 + exp(-x)) as NumPy computes it, into ``out``, on each side of the CPU's size for
    threads; numba's exactly (CUDA's exp is its own: to an ulp or two)."""
    x = _margins(n)
    with np.errstate(over="ignore"):
        plain = 1.0 / (1.0 + np.exp(-x))
    expected = numpy_kernels.sigmoid(x, np.empty_like(x))
    assert np.array_equal(expected, plain, equal_nan=True)
    out = np.empty_like(x)
    got = kernels.sigmoid(x, out)
    assert got is out
    if kernels is cpu_kernels:
        assert np.array_equal(got, expected, equal_nan=True)
    else:
        assert np.allclose(got, expected, rtol=1e-15, atol=0, equal_nan=True)


def test_cpu_sigmoid_takes_numbas_threads_only_where_its_exp_is_numpys(monkeypatch):
    """The numba sigmoid equals NumPy's where the check lets it run; the check refuses an exp
    that differs anywhere on its probe, and then the twin runs."""
    x = _margins(70_000)
    expected = numpy_kernels.sigmoid(x, np.empty_like(x))
    if cpu_kernels._numpy_exp_is_numbas():
        out = np.empty_like(x)
        cpu_kernels._sigmoid(x, out)
        assert np.array_equal(out, expected, equal_nan=True)
    threaded = cpu_kernels._sigmoid

    def off_by_an_ulp(values, out):  # an exp of its own: one value differs
        threaded(values, out)
        out[len(out) // 2] = np.nextafter(out[len(out) // 2], 2.0)
    monkeypatch.setattr(cpu_kernels, "_sigmoid", off_by_an_ulp)
    assert not cpu_kernels._numpy_exp_is_numbas.__wrapped__()
    monkeypatch.setattr(cpu_kernels, "_numpy_exp_is_numbas", lambda: False)
    assert np.array_equal(cpu_kernels.sigmoid(x, np.empty_like(x)), expected, equal_nan=True)


@pytest.mark.parametrize("shape", [(0,), (40,), (70_000,), (20_000, 3)])
def test_prediction_keys(kernels, shape):
    """The int64 ordered keys of float32 predictions equal the twin's, whose order is the
    float32 values' (-0.0 as +0.0; values beyond float32's range as infinities)."""
    rng = np.random.default_rng(sum(shape))
    values = rng.standard_normal(shape) * rng.choice([1e-30, 1e-3, 1.0, 1e30], shape)
    flat = values.reshape(-1)
    flat[: min(8, flat.size)] = [0.0, -0.0, np.inf, -np.inf, 1e39, -1e39, 1e-46, -1e-46][
        : min(8, flat.size)]
    expected = numpy_kernels.prediction_keys(values)
    assert expected.shape == shape and expected.dtype == np.int64
    assert np.array_equal(np.asarray(kernels.prediction_keys(values)), expected)
    with np.errstate(over="ignore"):
        as_float32 = values.astype(np.float32)
    assert np.array_equal(np.asarray(kernels.prediction_keys(as_float32)), expected)
    with np.errstate(over="ignore"):
        ranked = flat.astype(np.float32)[np.argsort(expected.reshape(-1), kind="stable")]
    assert (ranked[1:] >= ranked[:-1]).all()
    assert ((expected >= 0) & (expected < 2**32)).all()
    if flat.size >= 2:
        assert expected.reshape(-1)[0] == expected.reshape(-1)[1]  # 0.0 and -0.0


@pytest.mark.parametrize("shape", [(0,), (40,), (70_000,), (20_000, 3)])
@pytest.mark.parametrize("span", [1, 1000, 2**32])
def test_key_buckets(kernels, shape, span):
    """Bucket ids (keys - low) * 2**20 // span equal the twin's exact integers, both ends of the
    range in [0, 2**20); low and span as ints or 0-d int64 arrays."""
    rng = np.random.default_rng(span + sum(shape))
    low = 0 if span == 2**32 else 3_000_000_000
    keys = low + rng.integers(0, span, shape)
    flat = keys.reshape(-1)
    flat[: min(2, flat.size)] = [low, low + span - 1][: min(2, flat.size)]
    expected = numpy_kernels.key_buckets(keys, low, span, 20)
    assert expected.shape == shape and expected.dtype == np.int64
    assert ((expected >= 0) & (expected < 2**20)).all()
    exact = [(int(k) - low) * 2**20 // span for k in flat[:50]]
    assert expected.reshape(-1)[:50].tolist() == exact
    for low_arg, span_arg in [(low, span), (np.array(low), np.array(span))]:
        assert np.array_equal(np.asarray(kernels.key_buckets(keys, low_arg, span_arg, 20)),
                              expected)


@pytest.mark.parametrize("n", [10, 70_000])
def test_elementwise_kernels_refuse_bad_arguments_as_their_twins_do(kernels, n):
    """Every version refuses what the twin refuses, before writing anything (a threaded kernel
    must not write past ``out``): an ``out`` of another length, shape or dtype, an x that is
    not one column, and a low or span that is not a signed integer."""
    x = np.zeros(n)
    for bad_out in (np.empty(n + 1), np.empty((n, 1)), np.empty(n, np.float32),
                    np.empty(n, np.int64)):
        for module in (numpy_kernels, kernels):
            with pytest.raises(ValueError, match="sigmoid: out must be a float64 array"):
                module.sigmoid(x, bad_out)
    for module in (numpy_kernels, kernels):
        with pytest.raises(ValueError, match="sigmoid: x must be one-dimensional"):
            module.sigmoid(np.zeros((n, 2)), np.empty((n, 2)))
    keys = np.arange(n, dtype=np.int64)
    for low, span, name in [(0.0, n, "low"), (0, float(n), "span"), (np.array([0]), n, "low"),
                            (np.uint64(0), n, "low"), (0, np.array(n, np.uint32), "span"),
                            (True, n, "low")]:
        for module in (numpy_kernels, kernels):
            with pytest.raises(TypeError, match=f"{name} must be a signed integer"):
                module.key_buckets(keys, low, span, 20)


def test_cpu_prediction_keys_of_other_floats_are_the_twins():
    """Half floats, long doubles and big-endian floats take the twin's way on the CPU."""
    rng = np.random.default_rng(5)
    values = rng.standard_normal(70_000)
    for dtype in (np.float16, np.longdouble, np.dtype(">f8"), np.dtype(">f4")):
        as_dtype = values.astype(dtype)
        assert np.array_equal(cpu_kernels.prediction_keys(as_dtype),
                              numpy_kernels.prediction_keys(as_dtype))


def test_log_gamma(kernels):
    values = np.concatenate([np.arange(1, 50, dtype=np.float64), [0.5, 1.5, 1e6, 3.25]])
    expected = numpy_kernels.log_gamma(values)
    got = np.asarray(kernels.log_gamma(values))
    # numba's and CUDA's lgamma are their own implementations: equal to a few ulps
    assert np.allclose(got, expected, rtol=1e-13, atol=0)
    assert expected[0] == 0.0 and expected[3] == pytest.approx(np.log(6.0))


def test_auc_words(kernels):
    rng = np.random.default_rng(8)
    table = rng.integers(0, 1000, size=(3, 2, 5000)).astype(np.int64)
    table[1, 0] = 0  # a table without positives
    expected = numpy_kernels.auc_words(table)
    assert expected.shape == (3, 3) and expected[1, 1] == 0
    assert np.array_equal(np.asarray(kernels.auc_words(table)), expected)
    assert np.array_equal(np.asarray(kernels.auc_words(table[0])), expected[0])
    positive, negative = table[0, 0].astype(object), table[0, 1].astype(object)  # exact ints
    pairs = sum(p * (2 * sum(negative[:j]) + negative[j]) for j, p in enumerate(positive[:50]))
    assert numpy_kernels.auc_words(table[0, :, :50])[0] == pairs


@pytest.mark.parametrize("n_split", [1, 3, 7])
def test_cpu_auc_kernels_split_between_threads_give_the_serial_tallies_and_words(n_split):
    """The CPU auc tally split by bucket range and the words split by chunks of buckets (as
    many as threads; forced here) equal the twin's integers for any split."""
    rng = np.random.default_rng(n_split)
    n, n_buckets = 40_000, 1 << 17
    bucket = rng.integers(0, n_buckets, n)
    bucket[:500] = n_buckets - 1  # the last bucket, crowded
    label = (rng.random(n) < 0.4).astype(np.float64)
    weight = rng.random(n) * 2
    expected = numpy_kernels.auc_tally(bucket, label, weight, 2.0**12,
                                       np.zeros((2, n_buckets), np.int64))
    got = np.zeros((2, n_buckets), np.int64)
    cpu_kernels._AUC_TALLY_CALL(bucket, label, weight, True, 2.0**12, got, n_split)
    assert np.array_equal(got, expected)
    tables = np.stack([expected, expected[::-1]])
    words = np.empty((2, 3), np.int64)
    cpu_kernels._auc_words(tables, words, n_split)
    assert np.array_equal(words, numpy_kernels.auc_words(tables))


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64, np.uint8])
def test_table_counts_equal_numpys_bincount(device, id_dtype):
    """Counts and integer-valued weight sums per id, on the device as NumPy's bincount; on the
    GPU without temporary storage (CuPy's bincount through CUB reserved 3-10 GiB for 16M ids)."""
    from gbflow.backend.tables import table_counts
    rng = np.random.default_rng(4)
    size = 200 if id_dtype == np.uint8 else 1 << 20
    n = 1 << 16 if device == "cpu" else 1 << 24
    ids = rng.integers(0, size, n).astype(id_dtype)
    weights = rng.integers(0, 1000, n).astype(np.float64)
    expected = (np.bincount(ids, minlength=size), np.bincount(ids, weights=weights, minlength=size))
    if device == "cpu":
        got = (table_counts(np, ids, size), table_counts(np, ids, size, weights))
    else:
        cp = pytest.importorskip("cupy")
        pool = cp.get_default_memory_pool()
        d_ids, d_weights = cp.asarray(ids), cp.asarray(weights)
        pool.free_all_blocks()
        reserved = pool.total_bytes()
        got = (table_counts(cp, d_ids, size), table_counts(cp, d_ids, size, d_weights))
        assert pool.total_bytes() - reserved <= 2 * size * 8 + (1 << 20)  # the two tables
        got = tuple(g.get() for g in got)
        assert len(table_counts(cp, d_ids[:0], size)) == size
    assert got[0].dtype == np.int64 and got[1].dtype == np.float64
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


@pytest.mark.parametrize("weighted", [False, True])
def test_sort_segments(kernels, weighted):
    """Keys sorted within each segment, in place, weights along (equal keys in their order):
    empty segments, one-key segments, many equal keys (a one-hot column), the full uint32
    range."""
    rng = np.random.default_rng(9)
    lengths = np.concatenate([[0, 1, 0, 5000, 3, 0], rng.integers(0, 300, 200), [0]])
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    keys = rng.integers(0, 2**32, ptr[-1], dtype=np.uint64).astype(np.uint32)
    keys[ptr[3] : ptr[3] + 4000] = 7  # most of a segment one key
    keys[ptr[3] + 4000 : ptr[4]] = rng.choice([0, 2**32 - 1], 1000)
    weights = rng.integers(1, 50, ptr[-1]).astype(np.float64) if weighted else None
    expected_keys = keys.copy()
    expected_weights = None if weights is None else weights.copy()
    numpy_kernels.sort_segments(ptr, expected_keys, expected_weights)
    for lo, hi in zip(ptr[:-1], ptr[1:]):
        assert np.array_equal(expected_keys[lo:hi], np.sort(keys[lo:hi]))
    got_keys = keys.copy()
    got_weights = None if weights is None else weights.copy()
    result = kernels.sort_segments(ptr, got_keys, got_weights)
    assert result[0] is got_keys and np.array_equal(got_keys, expected_keys)
    if weighted:
        assert result[1] is got_weights and np.array_equal(got_weights, expected_weights)
    else:
        assert result[1] is None
    empty = np.zeros(0, np.uint32)
    assert len(kernels.sort_segments(np.zeros(3, np.int64), empty)[0]) == 0


@pytest.mark.parametrize("max_bin", [16, 256, 1000])
def test_predict_margins_binned_equals_the_raw_values(kernels, max_bin):
    """Rows binned with a model's cuts walk its trees to the leaves their raw values reach:
    unseen rows with missing values, values on the cuts, beyond the training range, one-hot
    columns (present-versus-missing splits), uint8 and uint16 bins."""
    import gbflow
    from gbflow.backend import get_backend
    from gbflow.binning import quantize
    from gbflow.predictor import FlatForest
    rng = np.random.default_rng(max_bin)
    n = 3000

    def data(n):
        X = rng.normal(size=(n, 5)).astype(np.float32)
        X[:, 3] = np.where(rng.random(n) < 0.3, 1.0, np.nan)  # one-hot with absent = missing
        X[rng.random(X.shape) < 0.1] = np.nan
        return X

    X = data(n)
    y = ((X[:, 0] > 0) ^ np.isnan(X[:, 3]) ^ (rng.random(n) < 0.1)).astype(np.float32)
    booster = gbflow.train(X, y, {"objective": "binary:logistic", "max_depth": 5,
                                  "max_bin": max_bin, "device": "cpu"}, 6, verbose=False)
    forest = FlatForest.from_trees(booster.trees)
    assert (forest.bin_threshold[forest.feature == 3] == 0).any()  # present vs missing used
    Xe = data(2000)
    Xe[:200, 0] = booster.cuts.feature_cuts(0)[rng.integers(0, 5, 200)]  # on cuts
    Xe[200:300, 1] = rng.choice([-1e30, 1e30], 100)  # beyond every cut
    bins = quantize(get_backend("cpu"), Xe, booster.cuts)
    assert bins.dtype == (np.uint8 if max_bin <= 256 else np.uint16)
    start = np.full((2000, 1), 0.25)
    raw = numpy_kernels.predict_margins(
        Xe, forest.feature, forest.threshold, forest.default_left, forest.left, forest.right,
        forest.value, forest.tree_root, forest.tree_group, start.copy())
    arrays = (forest.feature, forest.bin_threshold, forest.default_left, forest.left,
              forest.right, forest.value, forest.tree_root, forest.tree_group)
    twin = numpy_kernels.predict_margins_binned(bins, *arrays, start.copy())
    got = kernels.predict_margins_binned(bins, *arrays, start.copy())  # a padded view
    assert np.array_equal(twin, raw) and np.array_equal(got, raw)
    assert np.array_equal(kernels.predict_margins_binned(bins[:0], *arrays, start[:0].copy()),
                          start[:0])


def test_a_feature_mask_of_another_shape_is_refused(kernels):
    hist = np.zeros((3, 4, 5, 2), dtype=np.int64)
    for mask in (np.ones(3, bool), np.ones((1, 4), bool), np.ones((2, 4), bool)):
        for version in (numpy_kernels, kernels):
            with pytest.raises(ValueError, match="feature_allowed must have shape"):
                version.evaluate_splits(hist, np.full(4, 4, np.int32), mask, 1.0, 1.0, 1.0, 0.0,
                                        0.0)


def random_bounds(rng, n_nodes, n_features, max_delta_step):
    """A search's weight bounds: per node [lower, upper] (some infinite, some narrow around 0,
    some a point), max_delta_step, and monotone signs in {-1, 0, 1}."""
    centre = rng.normal(scale=0.5, size=n_nodes)
    width = rng.choice([0.0, 0.05, 1.0, np.inf], size=(n_nodes, 2))
    node_bounds = np.stack([centre - width[:, 0], centre + width[:, 1]], axis=1)
    node_bounds[width[:, 0] == np.inf, 0] = -np.inf
    node_bounds[width[:, 1] == np.inf, 1] = np.inf
    if max_delta_step:  # bounds are midpoints of capped weights: within the cap
        finite = np.isfinite(node_bounds)
        node_bounds[finite] = np.clip(node_bounds[finite], -max_delta_step, max_delta_step)
    monotone = rng.integers(-1, 2, size=n_features).astype(np.int8)
    return max_delta_step, node_bounds, monotone


@pytest.mark.parametrize("n_nodes,n_features,n_bins", [(1, 1, 2), (3, 4, 16), (64, 5, 256),
                                                        (2, 3, 300)])
@pytest.mark.parametrize("max_delta_step,reg_alpha,min_child_weight",
                         [(0.0, 0.0, 1.0), (0.3, 0.5, 0.0), (0.7, 2.0, 50.0)])
def test_evaluate_splits_with_weight_bounds(kernels, n_nodes, n_features, n_bins, max_delta_step,
                                            reg_alpha, min_child_weight):
    """max_delta_step and monotone constraints (XGBoost's bounded weights): the fast searches
    are the twin's bit for bit, and every split the twin takes keeps its feature's order."""
    rng = np.random.default_rng(n_nodes * n_bins + 11)
    bins, gh, row_index, start, count = random_level(rng, 4000, n_features, n_bins, n_nodes)
    gh[:, 1] = rng.integers(1, 2**20, size=len(gh))
    hist = numpy_kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
    n_value_bins = rng.integers(1, n_bins, size=n_features).astype(np.int32)
    allowed = rng.random(n_features) < 0.9
    bounds = random_bounds(rng, n_nodes, n_features, max_delta_step)
    constants = (2.0**-30, 2.0**-20, 1.0, reg_alpha, min_child_weight)
    for search_bounds in (bounds, bounds[:2] + (None,)):
        expected = numpy_kernels.evaluate_splits(hist, n_value_bins, allowed, *constants,
                                                 bounds=search_bounds)
        got = kernels.evaluate_splits(hist, n_value_bins, allowed, *constants,
                                      bounds=search_bounds)
        for e, g in zip(expected, got):
            assert e.dtype == g.dtype and np.array_equal(e, g), (e, g)
    gain, feature, threshold, _, left_sum = expected if bounds[2] is None else \
        numpy_kernels.evaluate_splits(hist, n_value_bins, allowed, *constants, bounds=bounds)
    total = hist[:, 0].sum(axis=1)
    for n in np.flatnonzero(feature >= 0):
        sums = np.stack([left_sum[n], total[n] - left_sum[n]]).astype(np.float64)
        w = numpy_kernels._bounded_weight(sums[:, 0] * 2.0**-30, sums[:, 1] * 2.0**-20, 1.0,
                                          reg_alpha, max_delta_step, *bounds[1][n])
        assert bounds[1][n, 0] <= w.min() and w.max() <= bounds[1][n, 1]
        if max_delta_step:
            assert np.abs(w).max() <= max_delta_step
        if threshold[n] > 0:  # present versus missing orders no present values: exempt
            assert bounds[2][feature[n]] * (w[1] - w[0]) >= 0


def test_unbounded_weight_bounds_give_the_plain_gains_order(kernels):
    """Infinite node bounds, no max_delta_step, no constraint, no reg_alpha: a gain of bounded
    weights is the plain gain up to rounding, so on well-separated candidates the same split
    wins. (With reg_alpha the two differ, as XGBoost's do: a bounded weight's gain has no L1
    term.)"""
    rng = np.random.default_rng(3)
    bins, gh, row_index, start, count = random_level(rng, 4000, 4, 16, 5)
    gh[:, 1] = rng.integers(1, 2**20, size=len(gh))
    hist = numpy_kernels.build_histograms(bins, gh, row_index, start, count, 16)
    args = (hist, np.full(4, 15, np.int32), np.ones(4, bool), 2.0**-30, 2.0**-20, 1.0, 0.0, 1.0)
    node_bounds = np.tile([-np.inf, np.inf], (5, 1))
    plain = kernels.evaluate_splits(*args)
    bounded = kernels.evaluate_splits(*args, bounds=(0.0, node_bounds, np.zeros(4, np.int8)))
    np.testing.assert_allclose(bounded[0], plain[0], rtol=1e-9)
    for p, b in zip(plain[1:], bounded[1:]):
        assert np.array_equal(p, b)


@pytest.mark.parametrize("max_delta_step", [0.0, 0.2])
def test_leaf_weights_with_bounds(max_delta_step):
    rng = np.random.default_rng(4)
    totals = np.stack([rng.integers(-2**40, 2**40, 50), rng.integers(0, 2**30, 50)], 1)
    node_bounds = np.stack([np.full(50, -0.1), np.full(50, np.inf)], 1)
    plain = numpy_kernels.leaf_weights(totals, 2.0**-30, 2.0**-20, 1.0, 0.0, 0.5)
    bounded = numpy_kernels.leaf_weights(totals, 2.0**-30, 2.0**-20, 1.0, 0.0, 0.5,
                                         max_delta_step, node_bounds)
    raw = plain / 0.5
    if max_delta_step:
        raw = np.clip(raw, -max_delta_step, max_delta_step)
    assert np.array_equal(bounded, np.maximum(raw, -0.1) * 0.5)


GROW_CASES = [  # n_rows, n_features, n_bins, max_depth, extra keyword arguments
    (1, 3, 16, 3, {}),  # one row: the root cannot split
    (1000, 5, 16, 0, {}),  # depth limit 0: the root is the tree
    (1000, 5, 16, 1, {}),  # the root's split is the last
    (3000, 4, 256, 6, {"reg_alpha": 0.5, "max_delta_step": 0.7}),
    (3000, 4, 256, 6, {"max_delta_step": 0.0}),  # bounded search without a cap
    (20000, 8, 64, 8, {}),  # deep levels of many small nodes: one thread a node
    (60000, 3, 16, 3, {}),  # nodes of 15K-60K rows: each over every thread
    (5000, 6, 32, 7, {"min_child_weight": 3e5}),  # levels stop before the limit
    (5000, 6, 32, 5, {"min_gain": 1e30}),  # nothing splits
    (4000, 6, 32, 5, {"allowed": "by depth"}),  # each depth its own feature sample
]


@pytest.mark.parametrize("leaf", [
    dict(reg_lambda=1.0, reg_alpha=0.0, max_delta_step=0.0),
    dict(reg_lambda=0.0, reg_alpha=0.7, max_delta_step=0.0),  # nodes of no hessian: value 0
    dict(reg_lambda=1.0, reg_alpha=0.2, max_delta_step=0.3)])
@pytest.mark.parametrize("n_cuts", [40, 0])
def test_finish_whole_tree(leaf, n_cuts):
    """A grown tree's node arrays, compiled against the twin, bit for bit and dtype for dtype:
    leaves, value splits, present-versus-missing splits (threshold 0), thresholds past a
    feature's cuts clipped as the twin clips them, zero-hessian nodes, max_delta_step."""
    from gbflow.backend import cpu_tree
    rng = np.random.default_rng(n_cuts + int(10 * leaf["reg_alpha"]))
    n = 63
    feature = np.where(rng.random(n) < 0.5, rng.integers(0, 5, n), -1).astype(np.int32)
    bin_threshold = np.where(feature >= 0, rng.integers(0, 12, n), 0).astype(np.int32)
    totals = np.stack([rng.integers(-2**40, 2**40, n), rng.integers(0, 2**40, n)], axis=1)
    totals[::7, 1] = 0  # no hessian
    totals[::11, 0] = 0  # no gradient: -0.0 or 0.0
    features = np.array([3, 0, 7, 1, 9], dtype=np.int64)  # store-local -> global
    offsets = np.sort(rng.integers(0, n_cuts + 1, 11)).astype(np.int64)
    offsets[0] = 0
    cut_values = np.sort(rng.normal(size=n_cuts)).astype(np.float32)
    args = (feature, bin_threshold, totals, features, cut_values, offsets, 2.0**-30, 2.0**-31,
            leaf["reg_lambda"], leaf["reg_alpha"], 0.3, leaf["max_delta_step"])
    expected = numpy_kernels.finish_whole_tree(*args)
    got = cpu_tree.finish_whole_tree(*args)
    assert len(expected) == len(got) == 4
    for a, b in zip(expected, got):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    glob, threshold, value, _ = expected
    assert (glob[feature < 0] == _dtypes.LEAF).all() and \
        np.array_equal(glob[feature >= 0], features[feature[feature >= 0]])
    assert (threshold[(feature >= 0) & (bin_threshold == 0)] == _dtypes.BELOW_EVERY_VALUE).all()
    if leaf["reg_lambda"] == 0:
        assert (value[totals[:, 1] == 0] == 0).all()


def _assert_finished_trees_add_their_leaves(grow, unfinished, row_bins, ids, n_cut_features,
                                            args):
    """``grow(grower, rows, finish)`` of the twin's and numba's ``grow_whole_tree`` with a
    ``TreeFinish``:
    the same tree as ``unfinished`` (grown without one), finished as ``finish_whole_tree``
    finishes it, and each row's margin in column 1 of three raised by the value of the leaf
    that the finished tree's splits send the row to (row_bins (n, F): every feature's bin, ids
    their global ids), bit for bit in both; the other columns untouched."""
    from gbflow.backend import cpu_tree
    n_rows = len(row_bins)
    rng = np.random.default_rng(n_rows)
    cut_offsets = np.arange(n_cut_features + 1, dtype=np.int64) * 300  # any thresholds
    cut_values = np.sort(rng.normal(size=300 * n_cut_features)).astype(np.float32)
    leaf = (args["inv_scale_g"], args["inv_scale_h"], args["reg_lambda"], args["reg_alpha"],
            0.3, args.get("max_delta_step") or 0.0)
    start = rng.normal(size=(n_rows, 3))
    finished = {}
    for name, grower in (("twin", numpy_kernels.grow_whole_tree),
                         ("numba", cpu_tree.grow_whole_tree)):
        margin = start.copy()
        rows = (np.arange(n_rows, dtype=_dtypes.ROW_INDEX), np.zeros(n_rows, _dtypes.ROW_INDEX))
        tree = grow(grower, rows, common.TreeFinish(cut_values, cut_offsets, leaf, margin, 1))
        for field in ("totals", "feature", "bin_threshold", "default_left", "left", "gain"):
            assert np.array_equal(getattr(tree, field), getattr(unfinished, field)), field
        expected = numpy_kernels.finish_whole_tree(tree.feature, tree.bin_threshold,
                                                   tree.totals, np.arange(n_cut_features),
                                                   cut_values, cut_offsets, *leaf)
        for field, want in zip(("threshold", "value", "cover"), expected[1:]):
            got = getattr(tree, field)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), field
        finished[name] = margin
        # the finished tree walked on the rows' bins
        column = {int(g_id): j for j, g_id in enumerate(ids)}
        node = np.zeros(n_rows, dtype=np.int64)
        for _ in range(len(tree.feature)):
            inner = tree.feature[node] >= 0
            if not inner.any():
                break
            b = row_bins[np.arange(n_rows), [column.get(int(f), 0) for f in tree.feature[node]]]
            left = np.where(b == 0, tree.default_left[node], b <= tree.bin_threshold[node])
            node = np.where(inner, np.where(left, tree.left[node], tree.left[node] + 1), node)
        assert np.array_equal(margin[:, 1], start[:, 1] + tree.value[node]), name
        assert np.array_equal(margin[:, [0, 2]], start[:, [0, 2]])
    assert finished["twin"].tobytes() == finished["numba"].tobytes()


def _assert_same_grown_trees(grown: dict, rows: dict):
    """The twin's and numba's ``GrownTree`` (``grown["twin"]``, ``grown["numba"]``) equal in
    every node array, and every node's rows the same rows in the same order in its depth's row
    array (``rows[name][depth % 2]``: the level loop's stable partitions). Returns the twin's."""
    twin, fast = grown["twin"], grown["numba"]
    for field in ("totals", "feature", "bin_threshold", "default_left", "gain", "left", "depth",
                  "seg_start", "seg_count"):
        a, b = getattr(twin, field), getattr(fast, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    for k in np.flatnonzero(twin.seg_start >= 0):
        segment = slice(twin.seg_start[k], twin.seg_start[k] + twin.seg_count[k])
        parity = twin.depth[k] % 2
        assert np.array_equal(rows["twin"][parity][segment], rows["numba"][parity][segment])
    return twin


@pytest.mark.parametrize("n_rows,n_features,n_bins,max_depth,extra", GROW_CASES)
def test_grow_whole_tree(n_rows, n_features, n_bins, max_depth, extra):
    """The CPU's whole-tree grower against its twin: every node array equal, and every node's
    rows the same rows in the same order (the level loop's stable partitions)."""
    from gbflow.backend import cpu_tree
    rng = np.random.default_rng(n_rows + max_depth)
    bins, gh, _, _, _ = random_level(rng, n_rows, n_features, n_bins, 1)
    signal = np.where(bins[:, 0] > n_bins // 2, 2**38, -2**38) + \
        np.where(bins[:, 1] == 0, 2**39, 0) + np.where(bins[:, -1] % 3 == 0, 2**37, 0)
    gh[:, 0] += signal  # something to split on, present versus missing included
    extra = dict(extra)
    allowed = np.ones((max_depth, n_features), dtype=bool)
    if extra.pop("allowed", None):
        allowed = rng.random((max_depth, n_features)) < 0.5
        allowed[:, 0] = np.arange(max_depth) % 2 == 0
    n_value_bins = np.full(n_features, n_bins - 1, dtype=np.int32)
    n_value_bins[0] = max(1, n_bins // 3)  # a feature narrower than the histograms
    bins[:, 0] = np.minimum(bins[:, 0], n_value_bins[0])
    args = dict(inv_scale_g=2.0**-30, inv_scale_h=2.0**-30, reg_lambda=1.0,
                reg_alpha=extra.pop("reg_alpha", 0.0),
                min_child_weight=extra.pop("min_child_weight", 1.0),
                min_gain=extra.pop("min_gain", 1e-6), **extra)
    by_feature = np.ascontiguousarray(bins.T)
    rows = {}
    grown = {}
    for name, grow in (("twin", numpy_kernels.grow_whole_tree),
                       ("numba", cpu_tree.grow_whole_tree)):
        rows[name] = (np.arange(n_rows, dtype=_dtypes.ROW_INDEX),
                      np.full(n_rows, -1, dtype=_dtypes.ROW_INDEX))
        grown[name] = grow(bins, by_feature, gh, *rows[name], n_value_bins, n_bins, allowed,
                           **args)
    twin = _assert_same_grown_trees(grown, rows)
    _assert_finished_trees_add_their_leaves(
        lambda grow, rows, finish: grow(bins, by_feature, gh, *rows, n_value_bins, n_bins,
                                        allowed, **args, finish=finish),
        twin, bins, np.arange(n_features), n_features, args)
    # the tree is whole: the root holds every row, children sum to their parent
    assert twin.totals[0].tolist() == gh.sum(axis=0).tolist()
    split = np.flatnonzero(twin.feature >= 0)
    assert np.array_equal(twin.totals[twin.left[split]] + twin.totals[twin.left[split] + 1],
                          twin.totals[split])
    assert (twin.depth <= max_depth).all() and len(twin.feature) == 2 * len(split) + 1
    if args["min_child_weight"] > 1e4:
        assert 2 < twin.depth.max() < max_depth
    elif n_rows > 1 and args["min_gain"] < 1:
        assert twin.depth.max() == max_depth
    else:
        assert len(twin.feature) == 1
    assert all(allowed[twin.depth[k], twin.feature[k]] for k in split)


@pytest.mark.parametrize("n_rows,n_dense,n_sparse,max_depth,indexed,extra", [
    (20000, 3, 40, 7, True, {}),  # deep levels: nodes apart, walked and searched columns
    (20000, 3, 40, 7, False, {}),  # the sparse store without its column index
    (5000, 0, 12, 5, True, {"allowed": "by depth"}),  # sparse features only
    (3000, 2, 6, 4, True, {"reg_alpha": 0.5, "max_delta_step": 0.7}),
    (1, 1, 3, 3, True, {}),  # one row: the root cannot split
])
def test_grow_whole_tree_with_a_sparse_store(n_rows, n_dense, n_sparse, max_depth, indexed,
                                             extra):
    """The whole-tree grower over dense and sparse stores against its twin: every node array
    equal, the same rows in the same order in every node, sparse splits taken (one-hot
    columns whose present values say much), common bins missing or a value. (Ties between the
    stores: the next test.)"""
    from gbflow.backend import cpu_tree
    from gbflow.stores import SparseBins, SparseColumns
    rng = np.random.default_rng(n_rows + n_sparse)
    n_bins = 16
    dense_bins = rng.integers(0, n_bins, size=(n_rows, n_dense)).astype(np.uint8)
    present = rng.random((n_rows, n_sparse)) < 0.08
    sparse_bins = np.where(present, rng.integers(1, 3, size=(n_rows, n_sparse)), 0)
    sparse_bins[:, 1] = np.where(rng.random(n_rows) < 0.4, 1, 0)  # often present: searched
    gh = np.stack([rng.integers(-2**36, 2**36, n_rows), rng.integers(0, 2**36, n_rows)], axis=1)
    gh[:, 0] += np.where(sparse_bins[:, 0] > 0, 2**40, 0) + np.where(sparse_bins[:, 1] > 0,
                                                                      -2**39, 2**38)
    if n_dense:
        gh[:, 0] += np.where(dense_bins[:, 0] > n_bins // 2, 2**37, 0)
    n_value_bins = np.full(n_dense, n_bins - 1, dtype=np.int32)
    sparse_value_bins = np.full(n_sparse, 2, dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(sparse_value_bins + 1)]).astype(np.int64)
    # every third feature's common bin a value (mostly-zero columns), the others' missing
    common_bin = np.where(np.arange(n_sparse) % 3 == 2, 1, 0).astype(np.int32)
    valued = common_bin == 1
    sparse_bins[:, valued] = np.where(rng.random((n_rows, valued.sum())) < 0.85, 1,
                                      sparse_bins[:, valued])
    rows, local = np.nonzero(sparse_bins != common_bin[None, :])  # entries: other bins
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_rows))])
    entries = SparseBins(indptr.astype(np.int64), local.astype(np.int16),
                         sparse_bins[rows, local].astype(np.uint8))
    # ids interleaved across the stores, so that either store may hold the lower id
    order = rng.permutation(n_dense + n_sparse)
    dense_ids, sparse_ids = np.sort(order[:n_dense]), np.sort(order[n_dense:])
    allowed = np.ones((max_depth, n_dense + n_sparse), dtype=bool)
    extra = dict(extra)
    if extra.pop("allowed", None):
        allowed = rng.random(allowed.shape) < 0.6
    args = dict(inv_scale_g=2.0**-30, inv_scale_h=2.0**-30, reg_lambda=1.0,
                reg_alpha=extra.pop("reg_alpha", 0.0), min_child_weight=1.0, min_gain=1e-6,
                **extra)
    grown, row_arrays = {}, {}
    for name, grow in (("twin", numpy_kernels.grow_whole_tree),
                       ("numba", cpu_tree.grow_whole_tree)):
        columns = SparseColumns.of(entries, n_sparse, offsets) if indexed else None
        side = common.SparseSide(entries.indptr, entries.entry_feature, entries.entry_bin,
                                 offsets, sparse_value_bins, common_bin,
                                 allowed[:, sparse_ids], sparse_ids,
                                 np.full(n_rows, 255, dtype=np.uint8), columns)
        row_arrays[name] = (np.arange(n_rows, dtype=_dtypes.ROW_INDEX),
                            np.full(n_rows, -1, dtype=_dtypes.ROW_INDEX))
        grown[name] = grow(dense_bins, np.ascontiguousarray(dense_bins.T), gh,
                           *row_arrays[name], n_value_bins, n_bins, allowed[:, dense_ids],
                           features=dense_ids, sparse=side, **args)
        if columns is not None:
            assert (columns.marks == -1).all()  # the scratch left as split_column needs it
    twin = _assert_same_grown_trees(grown, row_arrays)
    all_bins = np.concatenate([dense_bins, sparse_bins], axis=1)
    finish_side = {}

    def grow_finished(grow, rows, finish):
        columns = SparseColumns.of(entries, n_sparse, offsets) if indexed else None
        side = common.SparseSide(entries.indptr, entries.entry_feature, entries.entry_bin,
                                 offsets, sparse_value_bins, common_bin,
                                 allowed[:, sparse_ids], sparse_ids,
                                 np.full(n_rows, 255, dtype=np.uint8), columns)
        finish_side[grow] = columns
        return grow(dense_bins, np.ascontiguousarray(dense_bins.T), gh, *rows, n_value_bins,
                    n_bins, allowed[:, dense_ids], features=dense_ids, sparse=side,
                    finish=finish, **args)
    _assert_finished_trees_add_their_leaves(grow_finished, twin, all_bins,
                                            np.concatenate([dense_ids, sparse_ids]),
                                            n_dense + n_sparse, args)
    for columns in finish_side.values():
        assert columns is None or (columns.marks == -1).all()
    split = np.flatnonzero(twin.feature >= 0)
    assert twin.totals[0].tolist() == gh.sum(axis=0).tolist()
    assert np.array_equal(twin.totals[twin.left[split]] + twin.totals[twin.left[split] + 1],
                          twin.totals[split])
    assert all(allowed[twin.depth[k], twin.feature[k]] for k in split)
    if n_rows > 1:
        assert twin.feature[0] in sparse_ids[:2]  # the strongest signals, sparse features
        assert np.isin(twin.feature[split], sparse_ids).sum() > 1
        if n_dense and "max_delta_step" not in args:  # (capped weights: a shallow tree)
            assert np.isin(twin.feature[split], dense_ids).any()
    else:
        assert len(twin.feature) == 1


def test_grow_whole_tree_ties_between_stores_go_to_the_lower_id():
    """The same two columns in both stores (each store also holding a noise feature): at every
    level the tie goes to the lower id, whichever store holds it (``split.find_splits``' rule),
    in the twin and the compiled grower alike, and the two grow the same depth-2 tree."""
    from gbflow.backend import cpu_tree
    from gbflow.stores import SparseBins
    rng = np.random.default_rng(8)
    n_rows = 3000
    a = (rng.random(n_rows) < 0.3).astype(np.uint8)
    b = (rng.random(n_rows) < 0.5).astype(np.uint8)
    noise = rng.integers(1, 3, n_rows).astype(np.uint8)
    gh = np.stack([np.where(a > 0, 2**36, -2**35) + np.where(b > 0, 2**34, -2**34),
                   np.full(n_rows, 2**30)], axis=1)
    sparse_bins = np.stack([noise, a, b], axis=1)  # sparse-local 0 noise, 1 a, 2 b
    rows, local = np.nonzero(sparse_bins)
    entries = SparseBins(np.concatenate([[0], np.cumsum((sparse_bins > 0).sum(1))]).astype(
        np.int64), local.astype(np.int16), sparse_bins[rows, local].astype(np.uint8))
    dense = np.stack([a, b, noise], axis=1)  # dense-local 0 a, 1 b, 2 noise
    # ids: (dense a, b, noise), (sparse noise, a, b); a and b lower in one store, then the other
    for dense_ids, sparse_ids in (([0, 2, 4], [5, 1, 3]), ([1, 3, 5], [4, 0, 2])):
        grown = {}
        for name, grow in (("twin", numpy_kernels.grow_whole_tree),
                           ("numba", cpu_tree.grow_whole_tree)):
            side = common.SparseSide(entries.indptr, entries.entry_feature, entries.entry_bin,
                                     np.array([0, 3, 5, 7], np.int64), np.array([2, 1, 1],
                                                                                np.int32),
                                     np.zeros(3, np.int32), np.ones((2, 3), bool),
                                     np.array(sparse_ids), np.zeros(n_rows, np.uint8))
            grown[name] = grow(dense, np.ascontiguousarray(dense.T), gh,
                               np.arange(n_rows, dtype=np.int32), np.zeros(n_rows, np.int32),
                               np.array([1, 1, 2], np.int32), 3, np.ones((2, 3), bool),
                               2.0**-30, 2.0**-30, 1.0, 0.0, 1.0, 1e-6,
                               features=np.array(dense_ids), sparse=side)
        twin, fast = grown["twin"], grown["numba"]
        for field in ("totals", "feature", "bin_threshold", "default_left", "left"):
            assert np.array_equal(getattr(twin, field), getattr(fast, field)), field
        a_id, b_id = min(dense_ids[0], sparse_ids[1]), min(dense_ids[1], sparse_ids[2])
        assert twin.feature[0] == a_id  # the root splits on a, the lower of its two ids
        assert set(twin.feature[twin.depth == 1]) == {b_id}  # both children on b


@pytest.mark.parametrize("grower", ["twin", "numba"])
def test_grow_whole_tree_checks_its_finish(grower):
    """A ``TreeFinish`` whose cuts lack a feature the tree may split on, or whose margins are
    not (n, K) float64 C-contiguous with K above the group, is refused alike by both growers
    (the compiled finish reads the cuts and writes the margins unchecked)."""
    from gbflow.backend import cpu_tree
    grow = numpy_kernels.grow_whole_tree if grower == "twin" else cpu_tree.grow_whole_tree
    rng = np.random.default_rng(2)
    n_rows, n_features = 500, 3
    bins = rng.integers(0, 8, size=(n_rows, n_features)).astype(np.uint8)
    gh = np.stack([rng.integers(-2**30, 2**30, n_rows), rng.integers(0, 2**30, n_rows)], 1)
    leaf = (2.0**-30, 2.0**-30, 1.0, 0.0, 0.3, 0.0)

    def run(finish, features=None):
        rows = (np.arange(n_rows, dtype=np.int32), np.zeros(n_rows, np.int32))
        return grow(bins, np.ascontiguousarray(bins.T), gh, *rows,
                    np.full(n_features, 7, np.int32), 8, np.ones((3, n_features), bool),
                    2.0**-30, 2.0**-30, 1.0, 0.0, 1.0, 1e-6, features=features, finish=finish)
    cuts = (np.arange(7 * 4, dtype=np.float32), np.arange(5, dtype=np.int64) * 7)  # 4 features
    margin = np.zeros((n_rows, 2))
    assert run(common.TreeFinish(*cuts, leaf, margin, 1)).value is not None
    with pytest.raises(ValueError, match="features of finish.cut_offsets"):
        run(common.TreeFinish(*cuts, leaf, margin, 1), features=np.array([0, 1, 4]))
    with pytest.raises(ValueError, match="features of finish.cut_offsets"):
        run(common.TreeFinish(cuts[0], cuts[1][:3], leaf))  # 2 cut features for 3
    for bad, group in ((np.zeros((n_rows - 1, 2)), 1), (np.zeros((n_rows, 2)), 2),
                       (np.zeros((n_rows, 2), np.float32), 0), (np.zeros((2, n_rows)).T, 0)):
        with pytest.raises(ValueError, match="finish.margin"):
            run(common.TreeFinish(*cuts, leaf, bad, group))
    # five constants; a float group; a negative one
    for leaf_constants, group in ((leaf[:5], 0), (leaf, 1.0), (leaf, -1)):
        with pytest.raises(ValueError, match="finish.leaf_constants"):
            run(common.TreeFinish(*cuts, leaf_constants, margin, group))


@pytest.mark.parametrize("n_rows,max_depth,dtype", [(3000, 5, np.float32), (700, 3, np.float64),
                                                    (1, 2, np.float32)])
def test_grow_whole_round(n_rows, max_depth, dtype):
    """A round's trees in one call, the twin's and numba's: each tree and the margins equal,
    bit for bit, to the trees ``grow_whole_tree`` grows one after another on each column's
    quantised gradients with its own scales, feature mask and leaf constants."""
    from gbflow.backend import cpu_round
    rng = np.random.default_rng(n_rows)
    n_features, n_bins, n_trees = 6, 16, 3
    bins = rng.integers(0, n_bins, size=(n_rows, n_features)).astype(np.uint8)
    by_feature = np.ascontiguousarray(bins.T)
    n_value_bins = np.full(n_features, n_bins - 1, dtype=np.int32)
    grad = (rng.normal(size=(n_rows, n_trees)) + (bins[:, :n_trees] > 8)).astype(dtype)
    hess = rng.uniform(0.1, 1.0, size=(n_rows, n_trees)).astype(dtype)
    scales = np.array([[2.0**20, 2.0**21], [2.0**18, 2.0**22], [2.0**19, 2.0**19]])
    allowed = rng.random((n_trees, max_depth, n_features)) < 0.7
    split = np.array([[1 / g, 1 / h, 1.0, 0.1 * k, 0.5] for k, (g, h) in enumerate(scales)])
    leaf = np.array([[1 / g, 1 / h, 1.0, 0.1 * k, 0.3, 0.0] for k, (g, h) in enumerate(scales)])
    cut_offsets = np.arange(n_features + 1, dtype=np.int64) * n_bins
    cut_values = np.sort(rng.normal(size=n_bins * n_features)).astype(np.float32)
    start = rng.normal(size=(n_rows, n_trees))
    results = {}
    for name, module in (("twin", numpy_kernels), ("numba", cpu_round)):
        margin = start.copy()
        rows = (np.zeros(n_rows, _dtypes.ROW_INDEX), np.zeros(n_rows, _dtypes.ROW_INDEX))
        trees = module.grow_whole_round(bins, by_feature, grad, hess, scales,
                                        np.zeros((n_rows, 2), np.int64), *rows, n_value_bins,
                                        n_bins, allowed, split, 0.0, None,
                                        np.arange(n_features), cut_values, cut_offsets, leaf,
                                        margin)
        results[name] = trees, margin
    # the definition: tree after tree, each on its column
    margin = start.copy()
    for k in range(n_trees):
        gh = numpy_kernels.quantise_gradients(grad[:, k], hess[:, k], *scales[k])
        rows = (np.arange(n_rows, dtype=_dtypes.ROW_INDEX), np.zeros(n_rows, _dtypes.ROW_INDEX))
        want = numpy_kernels.grow_whole_tree(
            bins, by_feature, gh, *rows, n_value_bins, n_bins, allowed[k], *split[k], 0.0,
            finish=common.TreeFinish(cut_values, cut_offsets, tuple(leaf[k]), margin, k))
        for name, (trees, _) in results.items():
            for field in ("totals", "feature", "bin_threshold", "default_left", "gain", "left",
                          "depth", "threshold", "value", "cover"):
                a, b = getattr(want, field), getattr(trees[k], field)
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (name, k, field)
    for name, (trees, got) in results.items():
        assert len(trees) == n_trees and got.tobytes() == margin.tobytes(), name
    if n_rows > 1:
        assert not np.array_equal(margin, start) and all(len(t.feature) > 1 for t in trees)


@pytest.mark.parametrize("grower", ["twin", "numba"])
def test_grow_whole_round_checks_its_arrays(grower):
    """Arrays of the wrong shapes or dtypes are refused alike by both round growers, before
    any tree grows (the compiled round reads them unchecked)."""
    from gbflow.backend import cpu_round
    grow = (numpy_kernels if grower == "twin" else cpu_round).grow_whole_round
    rng = np.random.default_rng(1)
    n_rows, n_features, n_trees = 200, 3, 2
    bins = rng.integers(0, 8, size=(n_rows, n_features)).astype(np.uint8)
    good = dict(grad=rng.normal(size=(n_rows, n_trees)).astype(np.float32),
                hess=np.ones((n_rows, n_trees), np.float32), scales=np.full((n_trees, 2), 2.0**20),
                gh=np.zeros((n_rows, 2), np.int64),
                feature_allowed=np.ones((n_trees, 3, n_features), bool),
                split_constants=np.full((n_trees, 5), 1.0),
                leaf_constants=np.full((n_trees, 6), 0.5), margin=np.zeros((n_rows, n_trees)))

    good.update(bins=bins, row_index=np.zeros(n_rows, np.int32),
                spare_index=np.zeros(n_rows, np.int32), features=np.arange(n_features))

    def run(**changes):
        a = {**good, **changes}
        return grow(a["bins"], np.ascontiguousarray(a["bins"].T), a["grad"], a["hess"],
                    a["scales"], a["gh"], a["row_index"], a["spare_index"],
                    np.full(n_features, 7, np.int32), 8, a["feature_allowed"],
                    a["split_constants"], 0.0, None, a["features"],
                    np.arange(8 * n_features, dtype=np.float32),
                    np.arange(n_features + 1, dtype=np.int64) * 8, a["leaf_constants"],
                    a["margin"])
    assert len(run()) == n_trees and len(run(features=None)) == n_trees
    for changes, match in (
            (dict(hess=np.ones((n_rows, n_trees))), "grad and hess"),
            (dict(grad=np.zeros((n_rows, 3), np.float32)), "grad and hess"),
            (dict(gh=np.zeros((n_rows - 1, 2), np.int64)), "out must be"),
            (dict(scales=np.ones((n_trees, 3))), "scales"),
            (dict(feature_allowed=np.ones((n_trees, 3, n_features + 1), bool)),
             "feature_allowed"),
            (dict(split_constants=np.ones((n_trees, 4))), "split_constants"),
            (dict(leaf_constants=np.ones((n_trees + 1, 6))), "leaf_constants"),
            (dict(margin=np.zeros((n_rows, n_trees - 1))), "margin"),
            (dict(margin=np.zeros((n_trees, n_rows)).T), "margin must be a writeable"),
            (dict(bins=np.zeros((n_rows + 5, n_features), np.uint8)), "grad and hess"),
            (dict(row_index=np.zeros(n_rows - 1, np.int32)), "row_index"),
            (dict(spare_index=np.zeros(n_rows, np.int64)), "spare_index"),
            (dict(features=np.arange(n_features - 1)), "features must hold"),
            (dict(feature_allowed=np.ones((n_trees, 3, n_features), np.int8)),
             "feature_allowed")):
        with pytest.raises(ValueError, match=match):
            run(**changes)


@pytest.mark.parametrize("indexed", [True, False])
def test_grow_whole_round_with_a_sparse_store(indexed):
    """A round over dense and sparse stores, the twin's and numba's: the trees and margins of
    ``grow_whole_tree`` tree after tree, each with its own rows of both stores' masks."""
    from gbflow.backend import cpu_round
    from gbflow.stores import SparseBins, SparseColumns
    rng = np.random.default_rng(5)
    n_rows, n_dense, n_sparse, n_trees, max_depth, n_bins = 4000, 2, 12, 3, 4, 16
    dense = rng.integers(0, n_bins, size=(n_rows, n_dense)).astype(np.uint8)
    sparse_bins = np.where(rng.random((n_rows, n_sparse)) < 0.1,
                           rng.integers(1, 3, size=(n_rows, n_sparse)), 0)
    rows, local = np.nonzero(sparse_bins)
    entries = SparseBins(np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_rows))])
                         .astype(np.int64), local.astype(np.int16),
                         sparse_bins[rows, local].astype(np.uint8))
    offsets = np.arange(n_sparse + 1, dtype=np.int64) * 3
    dense_ids, sparse_ids = np.array([3, 9]), np.setdiff1d(np.arange(14), [3, 9])
    grad = (rng.normal(size=(n_rows, n_trees)) + 2.0 * (sparse_bins[:, :n_trees] > 0) +
            (dense[:, :1] > 8)).astype(np.float32)
    hess = rng.uniform(0.2, 1.0, size=(n_rows, n_trees)).astype(np.float32)
    scales = np.array([[2.0**20, 2.0**21]] * n_trees)
    split = np.array([[1 / g, 1 / h, 1.0, 0.0, 0.5] for g, h in scales])
    leaf = np.array([[1 / g, 1 / h, 1.0, 0.0, 0.3, 0.0] for g, h in scales])
    allowed = rng.random((n_trees, max_depth, 14)) < 0.8
    cut_offsets = np.arange(15, dtype=np.int64) * n_bins
    cut_values = np.sort(rng.normal(size=14 * n_bins)).astype(np.float32)
    start = rng.normal(size=(n_rows, n_trees))

    def side(mask):
        return common.SparseSide(entries.indptr, entries.entry_feature, entries.entry_bin,
                                 offsets, np.full(n_sparse, 2, np.int32),
                                 np.zeros(n_sparse, np.int32), mask, sparse_ids,
                                 np.zeros(n_rows, np.uint8),
                                 SparseColumns.of(entries, n_sparse, offsets) if indexed else None)
    results = {}
    for name, module in (("twin", numpy_kernels), ("numba", cpu_round)):
        margin = start.copy()
        trees = module.grow_whole_round(
            dense, np.ascontiguousarray(dense.T), grad, hess, scales,
            np.zeros((n_rows, 2), np.int64), np.zeros(n_rows, np.int32),
            np.zeros(n_rows, np.int32), np.full(n_dense, n_bins - 1, np.int32), n_bins,
            allowed[:, :, dense_ids], split, 0.0, None, dense_ids, cut_values, cut_offsets, leaf,
            margin, sparse=side(allowed[:, :, sparse_ids]))
        results[name] = trees, margin
    margin = start.copy()
    for k in range(n_trees):
        want = numpy_kernels.grow_whole_tree(
            dense, np.ascontiguousarray(dense.T),
            numpy_kernels.quantise_gradients(grad[:, k], hess[:, k], *scales[k]),
            np.arange(n_rows, dtype=np.int32), np.zeros(n_rows, np.int32),
            np.full(n_dense, n_bins - 1, np.int32), n_bins, allowed[k][:, dense_ids],
            *split[k], 0.0, features=dense_ids, sparse=side(allowed[k][:, sparse_ids]),
            finish=common.TreeFinish(cut_values, cut_offsets, tuple(leaf[k]), margin, k))
        assert np.isin(want.feature, sparse_ids).any()  # sparse splits taken
        for name, (trees, _) in results.items():
            for field in ("totals", "feature", "bin_threshold", "default_left", "left",
                          "threshold", "value", "cover"):
                a, b = getattr(want, field), getattr(trees[k], field)
                assert a.tobytes() == b.tobytes(), (name, k, field)
    for name, (_, got) in results.items():
        assert got.tobytes() == margin.tobytes(), name
    with pytest.raises(ValueError, match="sparse side's feature_allowed"):
        cpu_round.grow_whole_round(
            dense, np.ascontiguousarray(dense.T), grad, hess, scales,
            np.zeros((n_rows, 2), np.int64), np.zeros(n_rows, np.int32),
            np.zeros(n_rows, np.int32), np.full(n_dense, n_bins - 1, np.int32), n_bins,
            allowed[:, :, dense_ids], split, 0.0, None, dense_ids, cut_values, cut_offsets, leaf,
            start.copy(), sparse=side(allowed[0][:, sparse_ids]))


def _loss_rows(n: int, k: int = 1):
    """(margins of every scale (n,) or (n, k), labels, weights) for the gradient kernels."""
    rng = np.random.default_rng(n + k)
    shape = (n,) if k == 1 else (n, k)
    margin = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 10.0, 300.0], shape[:1] +
                                                     (1,) * (len(shape) - 1))
    if k == 1 and n >= 6:
        margin[:6] = [800.0, -800.0, 0.0, -0.0, 36.8, -745.2]
    label = (rng.random(n) < 0.4).astype(np.float64) if k == 1 else \
        rng.integers(0, k, n).astype(np.float64)
    return margin, label, rng.random(n) * 3.0


def _same_gradients(got, expected, exact: bool):
    for a, b in zip(got, expected):
        a = np.asarray(a.get() if hasattr(a, "get") else a)
        assert a.dtype == np.float32 and a.shape == b.shape
        if exact:
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        else:  # CUDA's exp is its own: an ulp of p, which p - 1 keeps near 0
            np.testing.assert_allclose(a, b, rtol=3e-7, atol=1e-14)


@pytest.mark.parametrize("n", [0, 50, 70_000])
@pytest.mark.parametrize("weighted", [False, True])
def test_logistic_gradients(kernels, n, weighted):
    """binary:logistic's float32 gradients and hessians equal the twin's bit for bit on each
    side of the CPU's size for threads (margins far past exp's range too), and the twin's
    are the objective's own expressions."""
    margin, label, weight = _loss_rows(n)
    weight = weight if weighted else None
    expected = numpy_kernels.logistic_gradients(margin, label, weight)
    with np.errstate(over="ignore"):
        p = 1.0 / (1.0 + np.exp(-margin))
    g, h = p - label, np.maximum(p * (1.0 - p), 1e-16)
    if weighted:
        g, h = g * weight, h * weight
    _same_gradients(expected, (g.astype(np.float32), h.astype(np.float32)), exact=True)
    _same_gradients(kernels.logistic_gradients(margin, label, weight), expected,
                    exact=kernels is cpu_kernels)


@pytest.mark.parametrize("k", [2, 3, 8, 10, 17, 128, 130])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_gradients(kernels, k, weighted):
    """multi:softprob's (n, k) gradients and hessians equal the twin's bit for bit (NumPy's
    row sums, whose order changes at 8 classes and past 128), and the twin's are the
    objective's own."""
    margin, label, weight = _loss_rows(3000, k)
    weight = weight if weighted else None
    expected = numpy_kernels.softmax_gradients(margin, label, weight)
    e = np.exp(margin - margin.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    g = p - (label[:, None] == np.arange(k)).astype(np.float64)
    h = np.maximum(2.0 * p * (1.0 - p), 1e-16)
    if weighted:
        g, h = g * weight[:, None], h * weight[:, None]
    _same_gradients(expected, (g.astype(np.float32), h.astype(np.float32)), exact=True)
    _same_gradients(expected, objectives.get_objective("multi:softprob", num_class=k).gradients(
        np, margin, label, weight), exact=True)
    _same_gradients(kernels.softmax_gradients(margin, label, weight), expected,
                    exact=kernels is cpu_kernels)
    column_major = np.asfortranarray(margin)  # the same values whatever the layout
    _same_gradients(kernels.softmax_gradients(column_major, label, weight), expected,
                    exact=kernels is cpu_kernels)
    _same_gradients(numpy_kernels.softmax_gradients(column_major, label, weight), expected,
                    exact=True)
    assert kernels.softmax_gradients(margin[:0], label[:0], None)[0].shape == (0, k)


def test_cpu_softmax_runs_numba_only_where_its_values_are_numpys(monkeypatch):
    """The CPU's softmax kernel runs where its probe gives the twin's values (up to 128
    classes, NumPy's exp numba's), and the probe refuses a kernel that differs in one bit:
    the twin runs then."""
    if not cpu_kernels._numpy_exp_is_numbas():
        pytest.skip("NumPy's exp is not numba's here: the twin always runs")
    assert cpu_kernels._softmax_is_numpys(10) and not cpu_kernels._softmax_is_numpys(129)
    threaded = cpu_kernels._SOFTMAX_GRADIENTS_CALL

    def off_by_an_ulp(margin, label, weight, weighted, grad, hess, n_chunks):
        threaded(margin, label, weight, weighted, grad, hess, n_chunks)
        hess[-1, -1] = np.nextafter(hess[-1, -1], np.float32(2.0))
    monkeypatch.setattr(cpu_kernels, "_SOFTMAX_GRADIENTS_CALL", off_by_an_ulp)
    assert not cpu_kernels._softmax_is_numpys.__wrapped__(10)
    monkeypatch.setattr(cpu_kernels, "_softmax_is_numpys", lambda k: False)
    margin, label, weight = _loss_rows(500, 10)
    _same_gradients(cpu_kernels.softmax_gradients(margin, label, weight),
                    numpy_kernels.softmax_gradients(margin, label, weight), exact=True)


def test_gradient_kernels_refuse_bad_arguments_as_their_twins_do(kernels):
    """Every version refuses a margin of the wrong rank and labels or weights of another
    length, naming the kernel, before reading anything."""
    for module in (numpy_kernels, kernels):
        with pytest.raises(ValueError, match="logistic_gradients: margin must have 1"):
            module.logistic_gradients(np.zeros((5, 2)), np.zeros(5), None)
        with pytest.raises(ValueError, match="logistic_gradients: label must have shape"):
            module.logistic_gradients(np.zeros(70_000), np.zeros(69_999), None)
        with pytest.raises(ValueError, match="softmax_gradients: weight must have shape"):
            module.softmax_gradients(np.zeros((5, 3)), np.zeros(5), np.ones(4))
        with pytest.raises(ValueError, match="softmax_gradients: margin must have 2"):
            module.softmax_gradients(np.zeros(5), np.zeros(5), None)


def _sketch_block(rng, n_rows, n_features, f0, subnormals=True):
    """A dense sketch block of features f0.. (a non-contiguous view, as a group of a wider
    matrix is), with NaN, both zeros, infinities, repeated values and (if ``subnormals``)
    subnormal floats; its feature ids; integer weights (zeros among them) as the passes hold
    them, (n_rows, 1). The GPU's float32 arithmetic flushes subnormals to zero (CuPy compiles
    every kernel with -ftz=true): its keys of them are zero's, not the CPU's."""
    wide = rng.standard_normal((n_rows, n_features + 3)).astype(np.float32)
    repeated = rng.random(wide.shape) < 0.3  # a few values many times
    wide[repeated] = rng.choice(np.float32([-1.5, 0.25, 0.5, 3.0]), int(repeated.sum()))
    # NaN of either sign, quiet and signalling, beside infinity's keys (the kernels must tell
    # them apart on the bits alone)
    nans = np.array([0x7FC00000, 0x7F800001, 0xFF800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    specials = np.concatenate([nans, np.float32([0.0, -0.0, np.inf, -np.inf, 3.0e38]),
                               np.float32([1e-40, -1e-40] if subnormals else [])])
    mask = rng.random(wide.shape) < 0.1
    wide[mask] = rng.choice(specials, int(mask.sum()))
    values = wide[:, 1:n_features + 1]
    feature = np.arange(f0, f0 + n_features, dtype=np.int64)[None, :]
    weight = rng.integers(0, 4, (n_rows, 1)).astype(np.float64)
    return values, feature, weight


def _slot_of(rng, values, f0):
    """(g * 65,536,) int32: each feature's candidate buckets (some occupied, some not, and
    always those of infinity and NaN: a NaN must not count there) numbered by feature, -1
    elsewhere: no two features share a slot, as ``bucket_slots`` gives."""
    n_features = values.shape[1]
    keys = common.ordered_keys(np, values)
    edges = common.ordered_keys(np, np.array([0x7F800001, 0xFF800001, 0xFFFFFFFF, 0x7F800000,
                                              0xFF800000], np.uint32).view(np.float32)) >> 16
    slot_of = np.full(n_features * sketch.N_BUCKETS, -1, dtype=np.int32)
    n_slots = 0
    for f in range(n_features):
        occupied = np.unique(keys[:, f] >> 16).astype(np.int64)
        chosen = np.union1d(rng.choice(occupied, min(len(occupied), 5), replace=False),
                            np.concatenate([rng.integers(0, sketch.N_BUCKETS, 3), edges]))
        slot_of[f * sketch.N_BUCKETS + chosen] = n_slots + np.arange(len(chosen))
        n_slots += len(chosen)
    return slot_of, n_slots


@pytest.mark.parametrize("n_rows,n_features,f0", [(0, 3, 0), (1, 1, 0), (700, 5, 2),
                                                  (20_000, 9, 30)])
@pytest.mark.parametrize("weighted", [False, True])
def test_sketch_counts_and_selection(kernels, n_rows, n_features, f0, weighted):
    """The sketch's block tallies (buckets, and sub-buckets of slots) and its fine selection
    give the twins' integers and marks on dense blocks with every kind of float."""
    rng = np.random.default_rng(n_rows + n_features)
    values, feature, weight = _sketch_block(rng, n_rows, n_features, f0,
                                            subnormals=kernels is cpu_kernels)
    weight = weight if weighted else None
    size = n_features * sketch.N_BUCKETS
    start = rng.integers(0, 5, size).astype(np.int64)  # added to, not overwritten
    expected = numpy_kernels.sketch_counts(values, feature, f0, weight, None, start.copy())
    got = kernels.sketch_counts(values, feature, f0, weight, None, start.copy())
    assert np.array_equal(got, expected)
    assert (expected - start).sum() == (np.count_nonzero(~np.isnan(values)) if weight is None
                                        else (weight * ~np.isnan(values)).sum())
    slot_of, n_slots = _slot_of(rng, values, f0)
    table = np.zeros(n_slots * sketch.N_SUB, dtype=np.int64)
    expected = numpy_kernels.sketch_counts(values, feature, f0, weight, slot_of, table.copy())
    assert np.array_equal(kernels.sketch_counts(values, feature, f0, weight, slot_of,
                                                table.copy()), expected)
    if n_rows > 100:
        assert expected.sum() > 0
    wanted = rng.random(n_slots * sketch.N_SUB) < 0.5
    expected = numpy_kernels.sketch_selected(values, feature, f0, slot_of, wanted,
                                             np.empty(values.shape, bool))
    out = np.empty(values.shape, bool)
    assert kernels.sketch_selected(values, feature, f0, slot_of, wanted, out) is out
    assert np.array_equal(out, expected)
    assert not expected[np.isnan(values)].any()


def test_sketch_kernels_take_csr_entries(kernels):
    """A CSR block's (k,) entries with their own feature ids give the twins' results (the
    CPU's kernel hands them to its twin)."""
    rng = np.random.default_rng(5)
    values, _, _ = _sketch_block(rng, 3000, 4, 0, subnormals=kernels is cpu_kernels)
    entries = values.reshape(-1).copy()
    feature = np.tile(np.arange(4, dtype=np.int32), 3000)
    weight = rng.integers(0, 3, len(entries)).astype(np.float64)
    table = np.zeros(4 * sketch.N_BUCKETS, dtype=np.int64)
    expected = numpy_kernels.sketch_counts(entries, feature, 0, weight, None, table.copy())
    assert np.array_equal(kernels.sketch_counts(entries, feature, 0, weight, None,
                                                table.copy()), expected)
    # the same values as a dense block: the same tally
    dense = kernels.sketch_counts(values, np.arange(4)[None, :], 0, None, None, table.copy())
    assert np.array_equal(dense, numpy_kernels.sketch_counts(entries, feature, 0, None, None,
                                                             table.copy()))


def test_sketch_kernels_refuse_bad_arguments_as_their_twins_do(kernels):
    """Shapes and sizes the kernels would read or write past are refused by every version
    before any work, naming the kernel (the slots' range on the host)."""
    values = np.zeros((4, 2), np.float32)
    feature = np.arange(2)[None, :]
    table = np.zeros(2 * sketch.N_BUCKETS, np.int64)
    slot_of = np.full(2 * sketch.N_BUCKETS, -1, np.int32)
    slot_of[[5, sketch.N_BUCKETS + 5]] = [0, 1]
    for module in (numpy_kernels, kernels):
        for weight in (np.ones((4, 2)), np.ones((1, 2)), np.ones((3, 1)), np.ones(4)):
            with pytest.raises(ValueError, match="sketch_counts: weight must be"):
                module.sketch_counts(values, feature, 0, weight, None, table.copy())
        with pytest.raises(ValueError, match="sketch_counts: the table must hold"):
            module.sketch_counts(values, feature, 0, None, None, table[:-1].copy())
        with pytest.raises(ValueError, match="sketch_counts: slot_of must be"):
            module.sketch_counts(values, feature, 0, None, slot_of[:-1], table.copy())
        if module in (numpy_kernels, cpu_kernels):  # host slots only (the GPU would wait)
            with pytest.raises(ValueError, match="sketch_counts: slot_of names slot 1"):
                module.sketch_counts(values, feature, 0, None, slot_of, np.zeros(256, np.int64))
            with pytest.raises(ValueError, match="sketch_selected: slot_of names slot 1"):
                module.sketch_selected(values, feature, 0, slot_of, np.zeros(256, bool),
                                       np.empty((4, 2), bool))
        with pytest.raises(TypeError, match="sketch_selected: wanted must be"):
            module.sketch_selected(values, feature, 0, slot_of, np.ones(512, np.uint8),
                                   np.empty((4, 2), bool))
        with pytest.raises(ValueError, match="sketch_selected: out must be"):
            module.sketch_selected(values, feature, 0, slot_of, np.ones(512, bool),
                                   np.empty((4, 1), bool))
        with pytest.raises(ValueError, match="sketch_counts: values must be"):
            module.sketch_counts(values, np.arange(3)[None, :], 0, None, None, table.copy())
        with pytest.raises(TypeError, match="sketch_counts: values must be float32"):
            module.sketch_counts(values.astype(np.float64), feature, 0, None, None,
                                 np.zeros(2 * sketch.N_BUCKETS, np.int64))
        with pytest.raises(TypeError, match="sketch_counts: the table must be"):
            module.sketch_counts(values, feature, 0, None, None,
                                 np.zeros(2 * sketch.N_BUCKETS, np.float64))
        with pytest.raises(ValueError, match="sketch_selected: slot_of must be"):
            module.sketch_selected(values, feature, 0, np.zeros(2 * sketch.N_BUCKETS),
                                   np.zeros(256, bool), np.empty((4, 2), bool))


@pytest.mark.parametrize("n_rows", [0, 1, 1000, 70_001])
def test_any_infinite(kernels, n_rows, monkeypatch):
    """Whether a matrix holds an infinity, as the twin says: none (NaN and the largest floats
    do not count), either sign in the first, a middle or the last row, in a strided view; the
    GPU's blocks of rows made small so that several are read."""
    if kernels is not cpu_kernels:
        from gbflow.backend import cuda_kernels
        monkeypatch.setattr(cuda_kernels, "_INF_CHECK_VALUES", 600)
    rng = np.random.default_rng(n_rows)
    X = rng.standard_normal((n_rows, 7)).astype(np.float32)
    if n_rows:
        X[rng.random(X.shape) < 0.1] = np.nan
        X[0, 0] = np.finfo(np.float32).max
    for row, value in [(None, None), (0, np.inf), (n_rows // 2, -np.inf), (n_rows - 1, np.inf)]:
        Y = X.copy()
        if row is not None:
            if not n_rows:
                continue
            Y[row, 3] = value
        for view in (Y, Y[:, 2:6], np.asfortranarray(Y)):
            expected = numpy_kernels.any_infinite(view)
            assert expected == (row is not None)
            assert kernels.any_infinite(view) == expected


@pytest.mark.parametrize("n_parts", [1, 2, 3, 7])
def test_auc_bucket_words_in_chunks_of_rows(n_parts):
    """The CPU's tally split into chunks of rows (each with its own bitmap and table) gives the
    twin's words for any number of chunks, the bucket ranges' ends included, and refuses a
    bucket out of range in the last chunk."""
    rng = np.random.default_rng(n_parts)
    n, n_buckets = 5003, 1 << 12
    bucket = rng.integers(0, n_buckets, n)
    bucket[:3] = [0, n_buckets - 1, 7]
    label = (rng.random(n) < 0.4).astype(np.float64)
    label[:5] = 0.5
    weight = rng.random(n) * 2
    for w in (None, weight):
        expected = numpy_kernels.auc_bucket_words(bucket, label, w, 2.0**10, n_buckets)
        out = np.empty(3, np.int64)
        assert cpu_kernels._AUC_BUCKET_WORDS_CALL(
            bucket, label, np.zeros(1) if w is None else w, w is not None, 2.0**10, n_buckets,
            out, n_parts) == 0
        assert np.array_equal(out, expected)
    bad = bucket.copy()
    bad[-1] = n_buckets
    assert cpu_kernels._AUC_BUCKET_WORDS_CALL(bad, label, np.zeros(1), False, 1.0, n_buckets,
                                              np.empty(3, np.int64), n_parts) == \
        cpu_kernels._BAD_BUCKET
